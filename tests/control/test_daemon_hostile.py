"""One job's trouble stays that job's: a poisoned policy, a provider that refuses our
credentials or cannot be set up, a store that is locked or on a full disk.

Real parts throughout: the sim cloud server, the real boto3 SDK against a small HTTP server
that answers every EC2 call with EC2's own ``AuthFailure`` document, a real SQLite store,
another connection holding its write lock, and a small tmpfs filled to the last byte.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from provisioner.control.store import Store
from provisioner.control.store.schema import JobRow
from provisioner.core.models import TAG_JOB
from tests.daemon_util import DaemonProc, submit, wait_for, write_config, write_policy

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY9"


def sim_options(tmp_path: Path) -> dict[str, Any]:
    return {
        "state_dir": str(tmp_path / "sim"),
        "mimic": "aws",
        "seconds_per_hour": 3600,
        "mtbp_hours": None,
        "idle_exit_s": 300,
        "terminate_grace_s": 1.0,
    }


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[dict[str, Any]]:
    from providers.sim import SimProvider

    opts = sim_options(tmp_path)
    yield opts
    SimProvider(opts["state_dir"]).shutdown_server(terminate_all=True)


@pytest.fixture
def refusing_ec2() -> Iterator[str]:
    """An endpoint that answers every EC2 request as EC2 does for bad credentials."""
    sys.path.insert(0, str(REPO / "tests" / "contract"))
    from harness_aws import error_response

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            status, headers, body = error_response(
                "AuthFailure", "AWS was not able to validate the provided access credentials"
            )
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST

        def log_message(self, *_: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def poison(store: Store, job_id: str, text: str) -> None:
    with store.session() as s:
        s.execute(update(JobRow).where(JobRow.id == job_id).values(policy_yaml=text))


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "provisioner", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )


def test_a_poisoned_job_and_refusing_providers_do_not_stop_the_others(
    tmp_path: Path, sim: dict[str, Any], refusing_ec2: str
) -> None:
    from provisioner.control.reconciler import Reconciler, cancel_job

    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = Store(url)
    policy = write_policy(tmp_path / "p.yaml", ckpt=tmp_path / "ck", steps=100_000)
    good, poisoned = submit(store, policy, 2, "sim", sim)
    poison(store, poisoned, "name: x\nbudget: {max_total: .inf}\n")
    # e.g. a provider plug-in uninstalled since the job was recorded (`up` refuses it now)
    (gone,) = submit(store, policy, 1, "nosuch", {}, check=False)
    aws_opts = {
        "region": "us-east-1",
        "endpoint": refusing_ec2,
        "credentials": {
            "aws_access_key_id": "AKIAIOSFODNN7EXAMPLE",
            "aws_secret_access_key": SECRET,
        },
        "package_spec": "provisioner[aws] @ https://pkgs.example.com/provisioner-0.1.0-py3-none-any.whl",
    }
    (refused,) = submit(store, policy, 1, "aws", aws_opts)
    rec = Reconciler(store, lease=timedelta(seconds=60))
    try:
        reports = [rec.run_pass() for _ in range(3)]
        assert all(r.errors >= 2 for r in reports)
        # the healthy job was launched on the first pass and is supervised
        assert wait_for(lambda: bool(store.attempts(good)), 10)
        first = store.attempts(good)[0]
        assert first.state in ("launching", "running"), first

        bad = store.job(poisoned)
        assert bad is not None and bad.state == "failed"
        assert (
            "policy no longer parses" in bad.reason
            and "p.yaml:2:21: budget.max_total" in bad.reason
        )
        assert [e.kind for e in store.events(poisoned)].count("policy-error") == 1

        for job_id, expect in (
            (gone, "cannot set up nosuch: unknown provider"),
            (refused, "aws refuses"),
        ):
            row = store.job(job_id)
            assert row is not None and row.state == "pending", row
            assert row.reason.startswith("blocked: ") and expect in row.reason, row.reason
            kinds = [e.kind for e in store.events(job_id)]
            assert kinds.count("provider-error") == 1, kinds  # once, not once per pass
        refusal = store.job(refused)
        assert refusal is not None and "auth" in refusal.reason.lower()
        for e in store.events(refused):
            assert SECRET not in e.message and SECRET not in json.dumps(e.data)
        assert SECRET not in refusal.reason

        # the reasons are what `status` and `logs` show
        status = cli("status", poisoned, "--store", url)
        assert status.returncode == 0 and "failed" in status.stdout
        assert "policy no longer parses" in status.stdout
        logs = cli("logs", refused, "--store", url)
        assert "provider-error" in logs.stdout and "aws refuses" in logs.stdout
        assert "Traceback" not in status.stderr + logs.stderr
    finally:
        rec.close()
        cancel_job(store, good, now=rec.clock())


def hold_write_lock(db: Path, seconds: float) -> threading.Thread:
    """Another connection takes the database's write lock and keeps it for ``seconds``."""
    started = threading.Event()

    def hold() -> None:
        con = sqlite3.connect(db, isolation_level=None, timeout=60)
        con.execute("BEGIN IMMEDIATE")
        con.execute(
            "INSERT INTO events (job_id, at, kind, message, data) VALUES (NULL, '2026-01-01', 'lock', 'held', '{}')"
        )
        started.set()
        time.sleep(seconds)  # the behaviour under test: the lock held this long
        con.execute("ROLLBACK")
        con.close()

    t = threading.Thread(target=hold, daemon=True)
    t.start()
    assert started.wait(30)
    return t


def run_daemon_through(
    tmp_path: Path, sim: dict[str, Any], db: Path, trouble: Any, expect_in_log: str
) -> None:
    """A daemon supervises a short job (and a poisoned one) while ``trouble`` happens; it keeps
    running, logs ``expect_in_log``, and the job finishes with one instance per attempt."""
    from providers.sim import SimProvider

    url = f"sqlite:///{db}"
    store = Store(url)
    policy = write_policy(tmp_path / "p.yaml", ckpt=tmp_path / "ck", steps=300, step_seconds=0.05)
    good, poisoned = submit(store, policy, 2, "sim", sim)
    poison(store, poisoned, "name: [unclosed\n")
    cfg = write_config(tmp_path / "daemon.yaml", url)
    log = tmp_path / "daemon.log"
    d = DaemonProc(cfg, log).start()
    try:
        assert d.ready(store), log.read_text()[-3000:]
        assert wait_for(lambda: any(a.state == "running" for a in store.attempts(good)), 60)
        trouble()
        assert d.alive(), log.read_text()[-3000:]
        assert expect_in_log in log.read_text(), log.read_text()[-3000:]
        assert "Traceback" not in log.read_text(), log.read_text()[-4000:]
        assert wait_for(
            lambda: (j := store.job(good)) is not None and j.state == "succeeded", 120
        ), (
            store.job(good),
            log.read_text()[-3000:],
        )
        assert d.alive()
        bad = store.job(poisoned)
        assert bad is not None and bad.state == "failed" and "policy no longer parses" in bad.reason
        launched = [i for i in SimProvider(sim["state_dir"]).list({TAG_JOB: good})]
        assert len(launched) == len(store.attempts(good)), (launched, store.attempts(good))
    finally:
        assert d.stop() == 0


def test_the_daemon_keeps_serving_through_a_locked_store(
    tmp_path: Path, sim: dict[str, Any]
) -> None:
    db = tmp_path / "store.db"

    def locked() -> None:
        # longer than the store's 30 s busy timeout: the daemon's writes fail, then succeed
        hold_write_lock(db, 40).join()

    run_daemon_through(tmp_path, sim, db, locked, "database is locked")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "small"
    mnt.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)], capture_output=True, text=True
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_the_daemon_keeps_serving_through_a_full_disk(
    tmp_path: Path, sim: dict[str, Any], small_disk: Path
) -> None:
    db = small_disk / "store.db"

    def full() -> None:
        filler = small_disk / "filler"
        # unbuffered, inside the suppress: a buffered file kept the tail of a write the disk
        # took only part of and raised ENOSPC again on close, out of reach of the suppress
        with contextlib.suppress(OSError), open(filler, "wb", buffering=0) as f:
            while True:
                f.write(b"\0" * 65536)
                os.fsync(f.fileno())
        with pytest.raises(sqlite3.OperationalError, match="full"):  # the disk is really full
            con = sqlite3.connect(db, timeout=60)
            con.execute(
                "INSERT INTO events (job_id, at, kind, message, data) VALUES (NULL, '2026-01-01', 'x', ?, '{}')",
                ("x" * 1_000_000,),
            )
            con.commit()
        time.sleep(8)  # the behaviour under test: the disk stays full for several passes
        filler.unlink()

    run_daemon_through(tmp_path, sim, db, full, "database or disk is full")
