"""A command run in a real terminal (a pseudo-terminal of a given width), for output that
depends on being shown on a screen: the CLI wraps and styles only there."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios

from tests.conftest import REPO

#: an ANSI escape sequence (CSI: colours, bold, cursor moves)
ESCAPE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def run_in_terminal(
    args: list[str], columns: int, env: dict[str, str] | None = None, timeout: float = 120
) -> tuple[int, str]:
    """``python -m provisioner ARGS`` with stdout and stderr on a terminal ``columns`` wide;
    its exit code and the text the terminal showed (CRLF turned back into LF, styles' escape
    sequences taken out: :data:`ESCAPE` finds them in the raw output)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    environ = {**os.environ, **(env or {}), "COLUMNS": str(columns), "LINES": "50"}
    environ.pop("FORCE_COLOR", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "provisioner", *args],
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
        cwd=REPO,
        env=environ,
    )
    os.close(slave)
    chunks: list[bytes] = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the terminal's other side closed (the command ended)
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    code = proc.wait(timeout)
    shown = b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")
    return code, ESCAPE.sub("", shown)
