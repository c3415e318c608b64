"""The daemon as systemd runs it: a real subprocess, a real notify socket, real signals."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _recv_until(sock: socket.socket, needle: str, timeout: float) -> list[str]:
    got: list[str] = []
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        sock.settimeout(max(0.1, end - time.monotonic()))
        try:
            msg = sock.recv(4096).decode()
        except TimeoutError:
            break
        got.append(msg)
        if needle in msg:
            return got
    raise AssertionError(f"no {needle!r} from the daemon; got {got}")


@pytest.fixture
def notify_socket(tmp_path: Path):  # type: ignore[no-untyped-def]
    path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    yield sock, path
    sock.close()


def test_ready_watchdog_metrics_reload_and_clean_stop(tmp_path: Path, notify_socket) -> None:  # type: ignore[no-untyped-def]
    sock, path = notify_socket
    cfg = tmp_path / "daemon.yaml"
    cfg.write_text(
        f"store: sqlite:///{tmp_path / 'd.db'}\nreconcile_interval: 1s\nmetrics: {{port: 0}}\n"
    )
    env = dict(
        os.environ,
        NOTIFY_SOCKET=str(path),
        WATCHDOG_USEC="2000000",
        XDG_STATE_HOME=str(tmp_path / "state"),
    )
    env.pop("WATCHDOG_PID", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "provisioner", "daemon", "--config", str(cfg)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        got = _recv_until(sock, "READY=1", 30)
        assert any("STATUS=" in g for g in got)
        _recv_until(sock, "WATCHDOG=1", 10)
        _recv_until(sock, "STATUS=pass", 10)
        # metrics: find the port in the JSON log line
        port = None
        end = time.monotonic() + 10
        while port is None and time.monotonic() < end:
            line = proc.stdout.readline()  # type: ignore[union-attr]
            if "metrics on" in line:
                port = int(json.loads(line)["msg"].rsplit(":", 1)[1].split("/")[0])
        assert port, "the daemon logs where its metrics are"
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        assert "provisioner_reconcile_passes_total" in body
        assert "provisioner_reconcile_pass_seconds_bucket" in body
        proc.send_signal(signal.SIGHUP)
        _recv_until(sock, "RELOADING=1", 10)
        _recv_until(sock, "READY=1", 10)
        proc.send_signal(signal.SIGTERM)
        _recv_until(sock, "STOPPING=1", 10)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_bad_config_is_exit_2_with_location(tmp_path: Path) -> None:
    cfg = tmp_path / "daemon.yaml"
    cfg.write_text("store: sqlite:///x.db\nreconcile_intervall: 5s\n")
    proc = subprocess.run(
        [sys.executable, "-m", "provisioner", "daemon", "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert f"{cfg}:2:1" in proc.stderr and "Traceback" not in proc.stderr


def test_unit_file_is_hardened_and_valid() -> None:
    unit = REPO / "systemd" / "provisioner.service"
    text = unit.read_text()
    for key in (
        "Type=notify",
        "WatchdogSec=",
        "StateDirectory=provisioner",
        "User=provisioner",
        "NoNewPrivileges=yes",
    ):
        assert key in text
    if not _has("systemd-analyze"):
        pytest.skip("systemd-analyze not installed")
    out = subprocess.run(
        ["systemd-analyze", "security", "--offline=yes", str(unit)], capture_output=True, text=True
    )
    line = next(ln for ln in out.stdout.splitlines() if "Overall exposure level" in ln)
    exposure = float(line.split("level for provisioner.service:")[1].split()[0])
    assert exposure <= 2.0, line
    verify = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True
    )
    assert verify.returncode == 0 and verify.stderr.strip() == "", verify.stderr


def _has(cmd: str) -> bool:
    from shutil import which

    return which(cmd) is not None
