"""The daemon's dashboard in its own process (issue 43): a real child served on the socket the
parent listens on, restarted when it dies, stopped with its parent however the parent ends,
and started with no secret it does not need (nothing on its command line; an environment
from an allow-list)."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from provisioner.control.daemon.config import DashboardConfig
from provisioner.control.store import Store
from provisioner.dashboard.child import DashboardProcess, child_env, start_beside_daemon
from provisioner.dashboard.server import DashboardServer
from tests.daemon_util import DaemonProc, write_config
from tests.dashboard_store import sample_store
from tests.waiting import until, wait_for

REPO = Path(__file__).resolve().parents[2]
TOKEN = "child-token-0123456789abcdefghij"
#: what a daemon's environment may hold and its dashboard must never get
CLOUD_SECRETS = {
    "AWS_SECRET_ACCESS_KEY": "aws-secret-never-in-the-child",
    "GOOGLE_APPLICATION_CREDENTIALS": "/gcp/never-in-the-child.json",
    "AZURE_CLIENT_SECRET": "azure-secret-never-in-the-child",
    "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "alibaba-secret-never-in-the-child",
    "TENCENTCLOUD_SECRET_KEY": "tencent-secret-never-in-the-child",
}


@pytest.fixture(scope="module")
def store_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    db = tmp_path_factory.mktemp("child") / "sample.db"
    sample_store(tmp_path_factory, db)
    url = f"sqlite:///{db}"
    yield url


def _get(url: str, token: str | None = None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as r:
            return r.status, r.read().decode("utf-8")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8")


def _proc_text(pid: int, name: str) -> str:
    return Path(f"/proc/{pid}/{name}").read_bytes().replace(b"\0", b" ").decode()


def _gone(pid: int) -> bool:
    """Whether ``pid`` is no longer a running process (gone, or a zombie nobody reaped)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except OSError:
        return True
    return False


def test_the_child_serves_restarts_and_stops_with_no_secret_it_does_not_need(
    store_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    for name, value in CLOUD_SECRETS.items():
        monkeypatch.setenv(name, value)
    caplog.set_level(logging.WARNING, logger="provisioner.control.daemon")
    dash = DashboardProcess(
        store_url,
        address="127.0.0.1",
        port=0,
        token=TOKEN,
        page_size=100,
        source="test daemon",
        first_retry_s=0.2,
    ).start()
    try:
        assert dash.proc is not None
        first = dash.proc.pid
        status, html = _get(dash.url, TOKEN)
        assert status == 200 and "llama-7b-lora" in html
        assert _get(dash.url)[0] == 401  # the token reached it
        # nothing secret on its command line (ps shows it), no cloud credential in its
        # environment, and the store and token gone from it once read
        # below the daemon's priority: the passes get the CPU first
        mine = os.getpriority(os.PRIO_PROCESS, 0)
        assert os.getpriority(os.PRIO_PROCESS, first) == min(mine + 10, 19)
        cmdline = _proc_text(first, "cmdline")
        assert "provisioner.dashboard.child" in cmdline
        assert TOKEN not in cmdline and "sample.db" not in cmdline
        environ = _proc_text(first, "environ")
        for name, value in CLOUD_SECRETS.items():
            assert name not in environ and value not in environ, name
        # killed: started again on the same address
        os.kill(first, signal.SIGKILL)
        assert until(lambda: dash.restarts == 1, 30)
        assert dash.proc is not None and dash.proc.pid != first
        status, html = _get(dash.url, TOKEN)
        assert status == 200 and "llama-7b-lora" in html
        assert any(
            "ended (exit status -9)" in r.getMessage() and dash.url in r.getMessage()
            for r in caplog.records
        ), caplog.text
    finally:
        dash.close()
    assert dash.proc is not None and _gone(dash.proc.pid)
    assert _refused(dash.port)


def test_the_childs_environment_is_an_allow_list() -> None:
    daemon = {
        "PATH": "/usr/bin",
        "HOME": "/home/p",
        "LC_ALL": "C.UTF-8",
        "PGSSLMODE": "verify-full",
        "PYTHONPATH": "/srv/provisioner",
        "PROVISIONER_STORE": "postgresql+psycopg://p:pw@db/p",  # its own copy comes apart
        "NOTIFY_SOCKET": "/run/systemd/notify",  # the daemon's to systemd, not the child's
        **CLOUD_SECRETS,
    }
    env = child_env("sqlite:////var/lib/p/jobs.db", TOKEN, daemon)
    assert env == {
        "PATH": "/usr/bin",
        "HOME": "/home/p",
        "LC_ALL": "C.UTF-8",
        "PGSSLMODE": "verify-full",
        "PYTHONPATH": "/srv/provisioner",
        "PROVISIONER_DASHBOARD_STORE": "sqlite:////var/lib/p/jobs.db",
        "PROVISIONER_DASHBOARD_TOKEN": TOKEN,
    }
    assert "PROVISIONER_DASHBOARD_TOKEN" not in child_env("sqlite://", None, daemon)


def test_the_child_ends_when_its_parent_is_killed(store_url: str, tmp_path: Path) -> None:
    """``kill -9`` of the daemon: no signal reaches the child, but its stdin (a pipe from the
    parent) ends, and it stops, freeing the port for the next daemon."""
    script = (
        "import json, sys, time\n"
        "from provisioner.dashboard.child import DashboardProcess\n"
        f"d = DashboardProcess({store_url!r}, address='127.0.0.1', port=0, token=None,\n"
        "                     page_size=100, source='parent').start()\n"
        "print(json.dumps({'pid': d.proc.pid, 'port': d.port}), flush=True)\n"
        "time.sleep(600)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO))
    parent = subprocess.Popen(
        [sys.executable, "-c", script], env=env, cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        doc = json.loads(parent.stdout.readline())
        child, port = int(doc["pid"]), int(doc["port"])
        assert _get(f"http://127.0.0.1:{port}/healthz")[0] == 200
        parent.kill()
        parent.wait(timeout=30)
        assert until(lambda: _gone(child), 30), _proc_text(child, "status")
        assert until(lambda: _refused(port), 10)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def test_a_taken_port_is_logged_naming_it_and_nothing_starts(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="provisioner.control.daemon")
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    store = Store(store_url)
    try:
        got = start_beside_daemon(store, DashboardConfig(port=port), port, "test")
        assert got is None
        assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in caplog.text
        assert "choose another dashboard port" in caplog.text
    finally:
        taken.close()
        store.close()


def test_in_process_is_a_thread_of_the_daemon(store_url: str) -> None:
    store = Store(store_url)
    server = start_beside_daemon(store, DashboardConfig(port=0, in_process=True), 0, "test")
    try:
        assert isinstance(server, DashboardServer)
        assert _get(server.url + "healthz") == (200, "ok\n")
    finally:
        server.close()
        store.close()


def test_the_daemon_serves_its_page_from_a_child_it_stops_on_sigterm(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    cfg = write_config(
        tmp_path / "daemon.yaml",
        f"sqlite:///{tmp_path / 'd.db'}",
        dashboard={"port": 0, "token_file": str(token_file)},
    )
    log = tmp_path / "daemon.log"
    daemon = DaemonProc(cfg, log, env=CLOUD_SECRETS).start()
    try:
        found = wait_for(lambda: re.search(r"dashboard on (http://\S+/)", log.read_text()), 60)
        assert found is not None
        page = found.group(1)
        assert _get(page, TOKEN)[0] == 200
        assert _get(page)[0] == 401
        children = [
            int(p.name)
            for p in Path("/proc").iterdir()
            if p.name.isdigit() and _ppid(int(p.name)) == daemon.pid
        ]
        served = [c for c in children if "provisioner.dashboard.child" in _proc_text(c, "cmdline")]
        assert len(served) == 1, [_proc_text(c, "cmdline") for c in children]
        child = served[0]
        environ = _proc_text(child, "environ")
        for name, value in CLOUD_SECRETS.items():
            assert value not in environ, name
        assert TOKEN not in _proc_text(child, "cmdline")
        assert daemon.stop() == 0
        assert until(lambda: _gone(child), 10)
        assert _refused(int(page.rsplit(":", 1)[1].strip("/")))
        assert "Traceback" not in log.read_text()
    finally:
        if daemon.alive():
            daemon.kill()


def _ppid(pid: int) -> int | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(text.rsplit(")", 1)[1].split()[1])
