"""Talking to the sim server, and starting it on first use.

:func:`ensure_server` finds the server of a state directory from ``server.json`` and checks it
answers; if not, it starts ``python -m providers.sim serve --detach`` and waits for it. A lock
file (``start.lock``) makes concurrent controllers start one server between them; the server's
own ``serve.lock`` makes a second one on the same state exit at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from providers.base import ErrorKind, ProviderError
from provisioner.errors import CloudError

START_TIMEOUT_S = 20.0
#: a process id: a sim server started while it is set exits (terminating its instances) once
#: that process is gone (the test suite sets it to itself: no server outlives its tests)
ENV_OWNER = "PROVISIONER_SIM_OWNER_PID"


class SimUnreachable(CloudError):
    """The server did not answer (not running, or just died)."""


_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def request(url: str, method: str = "GET", doc: Any = None, timeout: float = 10.0) -> Any:
    """One JSON call; a SimError answer becomes a classified ProviderError."""
    data = None if doc is None else json.dumps(doc).encode()
    headers = {"Content-Type": "application/json"} if data is not None else {}
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with _opener.open(req, timeout=timeout) as resp:
            return json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as err:
        body = err.read()
        try:
            e = json.loads(body)["error"]
            kind, code, message = ErrorKind(e["kind"]), str(e["code"]), str(e["message"])
        except (ValueError, KeyError, TypeError):
            kind, code, message = (
                ErrorKind.TRANSIENT,
                f"HTTP{err.code}",
                body[:200].decode("utf-8", "replace"),
            )
        raise ProviderError(kind, code, message, provider="sim") from None
    except (OSError, ValueError) as exc:  # refused, reset, timeout
        raise SimUnreachable(f"{url}: {exc}") from None


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` is there (one of another user's counts as there)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def running_url(state_dir: Path) -> str | None:
    """The URL of the server serving ``state_dir`` if it is up and answers, else None."""
    try:
        info = json.loads((state_dir / "server.json").read_text())
    except (OSError, ValueError):
        return None
    if not pid_alive(int(info.get("pid", 0))):
        return None
    url = str(info["url"])
    try:
        request(url + "/v1/health", timeout=2.0)
    except (SimUnreachable, ProviderError):
        return None
    return url


def ensure_server(state_dir: Path, python: str | None = None) -> str:
    """The URL of the server for ``state_dir``, started (detached) if none is running."""
    state_dir.mkdir(parents=True, exist_ok=True)
    url = running_url(state_dir)
    if url:
        return url
    with open(state_dir / "start.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            url = running_url(state_dir)  # another controller may have started it meanwhile
            if url:
                return url
            env = dict(os.environ)
            root = str(Path(__file__).resolve().parents[2])
            env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
            owner = os.environ.get(ENV_OWNER, "")
            subprocess.run(
                [
                    python or sys.executable,
                    "-m",
                    "providers.sim",
                    "serve",
                    "--state-dir",
                    str(state_dir),
                    "--detach",
                    *(["--owner-pid", owner] if owner.isdigit() else []),
                ],
                env=env,
                cwd=state_dir,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                check=True,
                timeout=START_TIMEOUT_S,
            )
            deadline = time.monotonic() + START_TIMEOUT_S
            while time.monotonic() < deadline:
                url = running_url(state_dir)
                if url:
                    return url
                time.sleep(0.05)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    log_tail = ""
    with contextlib.suppress(OSError):
        log_tail = (state_dir / "server.log").read_text()[-2000:]
    raise ProviderError(
        ErrorKind.TRANSIENT,
        "SimServerDown",
        f"the sim server for {state_dir} did not start: {log_tail}",
        provider="sim",
    )
