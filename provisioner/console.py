"""One rich Console for the CLI, honouring NO_COLOR and non-terminal output."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console


#: the width of output that is not a terminal: wide enough that no line is ever wrapped
UNWRAPPED = 100_000


def console(stderr: bool = False) -> Console:
    """A Console writing to the *current* stdout/stderr (so redirection and tests work)."""
    import sys

    from rich.console import Console

    no_color = os.environ.get("NO_COLOR", "") != ""
    stream = sys.stderr if stderr else sys.stdout
    # Not a terminal (a pipe, a file, a test): nothing is wrapped or cut, whatever COLUMNS says
    # (a line someone greps for is never split; a table is as wide as its cells).
    tty = stream.isatty()
    return Console(
        stderr=stderr,
        no_color=no_color,
        color_system=None if no_color else "auto",  # NO_COLOR: no escape codes, bold included
        highlight=False,
        soft_wrap=not tty,
        width=None if tty else UNWRAPPED,
        emoji=False,  # user text (a secret ARN's :secret:) is never an emoji code
    )


def error(message: str) -> None:
    """Print an error line to stderr (never a traceback). The message is printed as it is:
    user text in it (a path, a key) is never read as rich markup."""
    from rich.markup import escape

    console(stderr=True).print(
        f"[bold red]error:[/] {escape(message)}", markup=True, highlight=False
    )
