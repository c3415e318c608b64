"""One job's checkpoint store stops answering: the other jobs do not wait for it.

A real ``provisioner daemon`` runs two jobs on the sim: job A keeps its checkpoints in an S3
bucket on moto's server (a subprocess), job B in a local directory. Once both run, moto is
frozen with SIGSTOP (it accepts connections and never answers: what an endpoint behind a
broken proxy does), and B's instance gets a spot notice. B's replacement must still be
launched within the notice, A must get a ``store-slow`` event naming its store, and once moto
is let go (SIGCONT) a ``store-answered`` event.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from provisioner.control.store import ACTIVE_STATES, Store
from tests.daemon_util import DaemonProc, sim_options, submit, wait_for, write_config, write_policy

pytestmark = pytest.mark.e2e

BUCKET = "stall-bucket"
NOTICE_S = 20.0
CREDS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "stall-secret-0123456789",
    "AWS_DEFAULT_REGION": "us-east-1",
}


#: a job that runs until the test is done with it
LONG_RUN = {"steps": 100_000, "step_seconds": 0.05, "checkpoint_every": 40}


def _daemon(tmp_path: Path, lease: str) -> tuple[Store, Path]:
    """A store and a daemon configuration with fast passes and polls."""
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    cfg = write_config(
        tmp_path / "daemon.yaml",
        store_url,
        reconcile_interval="1s",
        interruption_poll_interval="0.5s",
        lease=lease,
    )
    return Store(store_url), cfg


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def moto_proc(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """moto's S3 in its own process (so that it can be frozen), with the bucket made."""
    pytest.importorskip("moto")
    import boto3

    port = _free_port()
    log = open(tmp_path / "moto.log", "ab")  # noqa: SIM115 - the child keeps it
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, **CREDS},
    )
    log.close()
    url = f"http://127.0.0.1:{port}"
    try:

        def up() -> bool:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    return True
            except OSError:
                return False

        assert wait_for(up, timeout=30), (tmp_path / "moto.log").read_text()[-2000:]
        boto3.client("s3", endpoint_url=url, **_boto_creds()).create_bucket(Bucket=BUCKET)
        yield proc, url
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.kill()
        proc.wait(timeout=30)


def _boto_creds() -> dict[str, str]:
    return {
        "aws_access_key_id": CREDS["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": CREDS["AWS_SECRET_ACCESS_KEY"],
        "region_name": CREDS["AWS_DEFAULT_REGION"],
    }


def test_a_frozen_store_holds_only_its_own_job(
    tmp_path: Path, moto_proc: tuple[subprocess.Popen[bytes], str]
) -> None:
    from providers.sim import SimProvider

    moto, url = moto_proc
    state = tmp_path / "sim"
    options = sim_options(state)
    sim = SimProvider(**options)  # type: ignore[arg-type]
    env = {**CREDS, "AWS_ENDPOINT_URL_S3": url}
    store, cfg = _daemon(tmp_path, lease="10s")
    pol_a = write_policy(tmp_path / "a.yaml", ckpt=tmp_path / "unused", **LONG_RUN)  # type: ignore[arg-type]
    text = pol_a.read_text()
    start = text.index("checkpoint:")
    end = text.index("\n", text.index("uri:", start))
    pol_a.write_text(text[:start] + f"checkpoint:\n  uri: s3://{BUCKET}/runs" + text[end:])
    pol_b = write_policy(tmp_path / "b.yaml", ckpt=tmp_path / "ckpt", **LONG_RUN)  # type: ignore[arg-type]
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the jobs are recorded (and the sim started) as `up` would
    try:
        (job_a,) = submit(store, pol_a, 1, "sim", options)
        (job_b,) = submit(store, pol_b, 1, "sim", options)
        sim.url  # noqa: B018 - starts the sim server with this environment
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    log = tmp_path / "daemon.log"
    d = DaemonProc(cfg, log, env=env).start()
    try:
        assert d.ready(store), log.read_text()[-3000:]

        def running(job_id: str) -> bool:
            job = store.job(job_id)
            return job is not None and job.state == "running" and bool(job.progress)

        assert wait_for(lambda: running(job_a) and running(job_b), timeout=120), (
            store.job(job_a),
            store.job(job_b),
            log.read_text()[-3000:],
        )
        moto.send_signal(signal.SIGSTOP)  # A's store: connections accepted, never answered
        time.sleep(3.0)  # the daemon has asked it by now (progress every second)
        first = store.attempts(job_b)[-1]
        assert first.instance_id
        preempted_at = time.monotonic()
        sim.preempt(first.instance_id, notice_s=NOTICE_S)

        def replaced() -> bool:
            return len(store.attempts(job_b)) >= 2

        assert wait_for(replaced, timeout=NOTICE_S * 3, every=0.1), log.read_text()[-3000:]
        took = time.monotonic() - preempted_at
        print(f"\nB: notice {NOTICE_S:.0f} s, replacement launched after {took:.1f} s")
        assert took < NOTICE_S, (took, log.read_text()[-3000:])

        def told(kind: str) -> list[str]:
            return [e.message for e in store.events(job_a) if e.kind == kind]

        assert wait_for(lambda: told("store-slow"), timeout=60), log.read_text()[-3000:]
        (slow,) = told("store-slow")
        assert f"s3://{BUCKET}" in slow and "has not answered for" in slow, slow
        job = store.job(job_a)
        assert job is not None and job.state in ACTIVE_STATES
        moto.send_signal(signal.SIGCONT)
        assert wait_for(lambda: told("store-answered"), timeout=90), log.read_text()[-3000:]
        assert f"s3://{BUCKET}" in told("store-answered")[0]
        assert (
            CREDS["AWS_SECRET_ACCESS_KEY"] not in log.read_text()
        )  # the store's credentials stay out of the log
    finally:
        moto.send_signal(signal.SIGCONT)
        if d.alive():
            d.stop()
        sim.shutdown_server(terminate_all=True)


def test_a_frozen_cloud_holds_only_its_own_jobs(tmp_path: Path) -> None:
    """Two providers (two sim servers): one frozen with SIGSTOP (its API accepts and never
    answers, as a cloud's endpoint behind a broken proxy), a spot notice at the other. The
    other's replacement comes within the notice; once the frozen one is let go, its job is
    passed again."""
    import json

    from providers.sim import SimProvider

    def options(name: str) -> dict[str, object]:
        return sim_options(tmp_path / name)

    opt_a, opt_b = options("sim-a"), options("sim-b")
    sim_a, sim_b = SimProvider(**opt_a), SimProvider(**opt_b)  # type: ignore[arg-type]
    sim_a.url, sim_b.url  # noqa: B018 - start both servers
    frozen = int(json.loads((tmp_path / "sim-a" / "server.json").read_text())["pid"])
    store, cfg = _daemon(tmp_path, lease="60s")
    policy = write_policy(tmp_path / "p.yaml", ckpt=tmp_path / "ckpt", **LONG_RUN)  # type: ignore[arg-type]
    (job_a,) = submit(store, policy, 1, "sim", opt_a)
    (job_b,) = submit(store, policy, 1, "sim", opt_b)
    log = tmp_path / "daemon.log"
    d = DaemonProc(cfg, log).start()
    try:
        assert d.ready(store), log.read_text()[-3000:]

        def running(job_id: str) -> bool:
            job = store.job(job_id)
            return job is not None and job.state == "running" and bool(job.progress)

        assert wait_for(lambda: running(job_a) and running(job_b), timeout=120), log.read_text()[
            -3000:
        ]
        os.kill(frozen, signal.SIGSTOP)
        time.sleep(3.0)  # a pass or two has met it
        first = store.attempts(job_b)[-1]
        assert first.instance_id
        preempted_at = time.monotonic()
        sim_b.preempt(first.instance_id, notice_s=NOTICE_S)
        assert wait_for(lambda: len(store.attempts(job_b)) >= 2, timeout=NOTICE_S * 3, every=0.1), (
            log.read_text()[-3000:]
        )
        took = time.monotonic() - preempted_at
        print(f"\nB: notice {NOTICE_S:.0f} s, replacement launched after {took:.1f} s")
        assert took < NOTICE_S, (took, log.read_text()[-3000:])
        assert "has not finished its part of the pass" in log.read_text()
        os.kill(frozen, signal.SIGCONT)
        assert wait_for(lambda: "its late part of a pass ended" in log.read_text(), timeout=90), (
            log.read_text()[-3000:]
        )
        # the job at the frozen cloud is passed again: its recorded progress moves on
        before = store.job(job_a).progress  # type: ignore[union-attr]
        assert wait_for(
            lambda: store.job(job_a).progress != before,  # type: ignore[union-attr]
            timeout=60,
        ), log.read_text()[-3000:]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(frozen, signal.SIGCONT)
        if d.alive():
            d.stop()
        sim_a.shutdown_server(terminate_all=True)
        sim_b.shutdown_server(terminate_all=True)
