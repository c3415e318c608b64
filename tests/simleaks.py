"""Sim servers the tests started: found by the environment they were started with, stopped.

A sim server is its own detached process (``python -m providers.sim serve``), made to outlive
the controller that started it; a test that forgets to stop it leaves it running (and its
instances' agents), each costing a share of a core until it goes idle. ``tests/conftest.py``
tags every test's environment (:data:`ENV_TEST`) and the session's (:data:`ENV_SESSION`), and
makes the test process the owner of every server started under it (``PROVISIONER_SIM_OWNER_PID``:
the server exits when its owner is gone); after each test it stops the servers carrying that
test's tag, and at the end of the session it fails the run when one is still alive.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

ENV_TEST = "PROVISIONER_SIM_TEST"
ENV_SESSION = "PROVISIONER_SIM_TEST_SESSION"


@dataclass(frozen=True)
class SimServer:
    pid: int
    state_dir: Path | None
    env: dict[str, str]


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return b""


def sim_servers() -> list[SimServer]:
    """Every running ``python -m providers.sim serve`` process of this user (Linux's /proc)."""
    out = []
    me = os.getpid()
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit() or int(entry) == me:
            continue
        args = [a.decode("utf-8", "replace") for a in _read(f"/proc/{entry}/cmdline").split(b"\0")]
        if "providers.sim" not in args or "serve" not in args:
            continue
        stat = _read(f"/proc/{entry}/stat").rsplit(b")", 1)[-1].split()
        if stat and stat[0] == b"Z":
            continue  # a zombie: it is gone, its parent has not reaped it yet
        state = args[args.index("--state-dir") + 1] if "--state-dir" in args[:-1] else None
        env = {}
        for item in _read(f"/proc/{entry}/environ").split(b"\0"):
            key, sep, value = item.decode("utf-8", "replace").partition("=")
            if sep and key.startswith("PROVISIONER_SIM"):
                env[key] = value
        out.append(SimServer(int(entry), Path(state) if state else None, env))
    return out


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    stat = _read(f"/proc/{pid}/stat").rsplit(b")", 1)[-1].split()
    return bool(stat) and stat[0] == b"Z"


def _wait_gone(pid: int, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while not _gone(pid):
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


def stop(server: SimServer) -> None:
    """Stop ``server`` and every instance's process group: its API's shutdown (which
    terminates them), else SIGTERM, else SIGKILL and the groups killed here."""
    from providers.sim.client import SimUnreachable, request

    info: dict[str, object] = {}
    if server.state_dir is not None:
        with contextlib.suppress(OSError, ValueError):
            info = json.loads((server.state_dir / "server.json").read_text())
    if info.get("pid") == server.pid and info.get("url"):
        with contextlib.suppress(SimUnreachable, Exception):
            request(f"{info['url']}/v1/shutdown", "POST", {"terminate_all": True}, timeout=30)
        if _wait_gone(server.pid, 10):
            return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(server.pid, signal.SIGTERM)
    if _wait_gone(server.pid, 5):
        kill_groups(server.state_dir)
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(server.pid, signal.SIGKILL)
    _wait_gone(server.pid, 5)
    kill_groups(server.state_dir)


def kill_groups(state_dir: Path | None) -> None:
    """SIGKILL the process group of every instance the state still says is running."""
    if state_dir is None:
        return
    for path in (state_dir / "instances").glob("*/instance.json"):
        with contextlib.suppress(OSError, ValueError, TypeError):
            inst = json.loads(path.read_text())
            if inst.get("state") == "running" and inst.get("pid") and not inst.get("killed"):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(int(inst["pid"]), signal.SIGKILL)
