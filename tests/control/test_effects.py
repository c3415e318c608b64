"""Bounded calls to the jobs' stores (provisioner.control.effects), with real threads and
calls that really block; the store check ``up`` makes, against a server that never answers;
and the daemon's quiet, useful lines about slow passes and a taken metrics port."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from provisioner.control.effects import Effects, Pending, no_answer, store_where


class Gate:
    """A call that blocks until let go, then answers (or raises)."""

    def __init__(self, answer: object = "ok", error: BaseException | None = None) -> None:
        self.go = threading.Event()
        self.answer, self.error, self.calls = answer, error, 0

    def __call__(self) -> object:
        self.calls += 1
        self.go.wait(30)
        if self.error is not None:
            raise self.error
        return self.answer


def until_ready(fx: Effects, job: str) -> bool:
    """Wait (at most 5 s) until the worker has the job's answer."""
    for _ in range(500):
        if fx.ready(job, "progress"):
            return True
        threading.Event().wait(0.01)
    return False


def test_a_quick_call_is_answered_in_the_pass() -> None:
    fx = Effects(wait_s=5.0)
    fx.begin_pass()
    assert fx.call("j1", "progress", "store A", "progress.json", lambda: {"step": 3}) == {"step": 3}
    with pytest.raises(KeyError):  # the call's own error, as it is
        fx.call("j1", "progress", "store A", "progress.json", lambda: {"a": 1}["x"])
    fx.close()


def test_a_hung_store_costs_one_wait_and_holds_one_worker() -> None:
    fx = Effects(wait_s=0.2, patience_s=1.0, slow_after_s=10.0)
    fx.begin_pass()
    hung = Gate()
    with pytest.raises(Pending) as first:
        fx.call("a1", "progress", "store S", "progress.json", hung)
    assert first.value.where == "store S"
    # other jobs on the same store: Pending at once, and no second call is started
    others = Gate()
    for job in ("a2", "a3", "a4"):
        with pytest.raises(Pending):
            fx.call(job, "progress", "store S", "progress.json", others)
    assert others.calls == 0 and fx.waited["store S"] < 0.6, fx.waited
    # a job on another store is answered as usual
    assert fx.call("b1", "progress", "store F", "progress.json", lambda: "fresh") == "fresh"
    # the same job asking again does not start a second call
    with pytest.raises(Pending):
        fx.call("a1", "progress", "store S", "progress.json", hung)
    assert hung.calls == 1
    hung.go.set()
    assert until_ready(fx, "a1")
    fx.begin_pass()
    assert fx.call("a1", "progress", "store S", "progress.json", hung) == "ok"
    assert not fx.take_stalls()  # answered before it was slow enough to be told
    fx.close()


def test_a_long_stall_is_told_once_per_job_and_its_end_too() -> None:
    clock = [100.0]
    fx = Effects(wait_s=0.0, slow_after_s=10.0, monotonic=lambda: clock[0])
    fx.begin_pass()
    hung = Gate()
    with pytest.raises(Pending):
        fx.call("a1", "progress", "store S", "progress.json", hung)
    assert fx.take_stalls() == []
    clock[0] += 12.0
    for _ in range(3):  # three passes: one event
        with pytest.raises(Pending) as got:
            fx.call("a1", "progress", "store S", "progress.json", hung)
    assert got.value.waited_s == pytest.approx(12.0)
    with pytest.raises(Pending):  # another job on the slow store is told too
        fx.call("a2", "result", "store S", "output/result.json", Gate())
    stalls = fx.take_stalls()
    assert [(s.job_id, s.ended) for s in stalls] == [("a1", False), ("a2", False)]
    assert "store S has not answered for 12 s" in str(got.value)
    hung.go.set()
    assert until_ready(fx, "a1")
    assert fx.call("a1", "progress", "store S", "progress.json", hung) == "ok"
    ended = fx.take_stalls()
    assert {(s.job_id, s.ended) for s in ended} == {("a1", True), ("a2", True)}
    fx.close()


def test_a_timeout_is_no_answer_but_an_error_document_is() -> None:
    assert no_answer(TimeoutError("read timed out"))
    assert no_answer(ConnectionRefusedError())
    wrapped = RuntimeError("store")
    wrapped.__cause__ = TimeoutError("timed out")
    assert no_answer(wrapped)
    assert not no_answer(FileNotFoundError("no such key"))
    assert not no_answer(PermissionError("access denied"))


def test_stores_are_shown_without_credentials() -> None:
    assert store_where("s3://bucket/runs") == "checkpoint store s3://bucket/runs"
    shown = store_where("s3://AKIAEXAMPLE:hunter2@bucket/runs?token=abc")
    assert "hunter2" not in shown and "AKIA" not in shown and "abc" not in shown
    assert shown == "checkpoint store s3://bucket/runs"


# -- the store check `up` makes -----------------------------------------------------------------


@pytest.fixture
def silent_server() -> Iterator[str]:
    """Accepts connections and never answers (an endpoint behind a broken proxy)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
                held.append(conn)
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.getsockname()[1]}"
    stop.set()
    t.join(5)
    for c in held:
        c.close()
    srv.close()


def test_up_refuses_a_store_that_never_answers_within_seconds(
    tmp_path: Path, silent_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("boto3")
    import time

    from click.testing import CliRunner

    from provisioner.cli import cli
    from provisioner.objstore import fs

    monkeypatch.setattr(fs, "CHECK_CONNECT_S", 1.0)
    monkeypatch.setattr(fs, "CHECK_READ_S", 2.0)
    for key, value in {
        "AWS_ENDPOINT_URL_S3": silent_server,
        "AWS_ACCESS_KEY_ID": "AKIDSTALL",
        "AWS_SECRET_ACCESS_KEY": "stall-secret-value-0123",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(key, value)
    policy = tmp_path / "p.yaml"
    policy.write_text(
        "name: silent\njob:\n  command: [python, -c, 'pass']\n  compute_hours: 1\n"
        "  reference_gpu: A10G\nresources:\n  gpu_count: 1\nmarket: spot\n"
        "checkpoint:\n  uri: s3://silent-bucket/runs\n"
    )
    store = f"sqlite:///{tmp_path / 'store.db'}"
    t0 = time.monotonic()
    res = CliRunner().invoke(
        cli, ["up", "--policy", str(policy), "--provider", "sim", "--store", store, "--detach"]
    )
    took = time.monotonic() - t0
    print(f"\nup against a silent S3 endpoint: exit {res.exit_code} after {took:.1f} s")
    assert res.exit_code == 2, res.output
    text = res.stderr
    assert "checkpoint" in text and "did not answer within 3 s" in text, text
    assert f"{policy}:" in text  # where: the policy's checkpoint.uri line
    assert "stall-secret-value-0123" not in res.output + text
    from provisioner.control.store import Store

    assert Store(store).jobs() == []  # nothing written


# -- the daemon's lines -------------------------------------------------------------------------


def test_overruns_one_line_then_one_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    from provisioner.control.daemon.overruns import Overruns
    from provisioner.control.records import PassReport

    clock = [0.0]
    o = Overruns(monotonic=lambda: clock[0])
    report = PassReport(jobs=7, waited={"checkpoint store s3://b/r": 2.0})
    report.launch_seconds = [1.5]
    with caplog.at_level(logging.WARNING, logger="provisioner.control.daemon"):
        o.note(0.4, 5.0, report)  # on time: nothing
        o.note(7.2, 5.0, report)
        for _ in range(5):
            clock[0] += 5
            o.note(6.0, 5.0, report)
        clock[0] += 60
        o.note(9.0, 5.0, report)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert "took 7.2 s, over the 5 s interval" in lines[0]
    assert "2.0 s on checkpoint store s3://b/r" in lines[0] and "1 launch(es) 1.5 s" in lines[0]
    assert "6 passes overran since the last such line (longest 9.0 s)" in lines[1]


def test_apscheduler_skips_are_not_logged(caplog: pytest.LogCaptureFixture) -> None:
    from apscheduler.schedulers.background import BackgroundScheduler

    from provisioner.control.daemon.overruns import quiet_scheduler

    quiet_scheduler()
    busy = threading.Event()
    sched = BackgroundScheduler(job_defaults={"max_instances": 1, "coalesce": True})
    sched.add_job(lambda: busy.wait(2.5), "interval", seconds=0.5)
    with caplog.at_level(logging.DEBUG, logger="apscheduler"):
        sched.start()
        threading.Event().wait(2.2)
        busy.set()
        sched.shutdown(wait=True)
    said = [r.getMessage() for r in caplog.records]
    assert said, "the scheduler ran (it logs at DEBUG/INFO)"
    assert not [m for m in said if "maximum number of running instances" in m], said


def test_a_taken_metrics_port_is_named_and_the_daemon_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import json

    from provisioner.control.daemon.service import Daemon

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    cfg = tmp_path / "daemon.yaml"
    cfg.write_text(
        json.dumps(
            {
                "store": f"sqlite:///{tmp_path / 'store.db'}",
                "metrics": {"enabled": True, "port": port},
                "dashboard": {"enabled": False},
            }
        )
    )
    d = Daemon(str(cfg))
    try:
        with caplog.at_level(logging.ERROR, logger="provisioner.control.daemon"):
            d.open()
        (line,) = [r.getMessage() for r in caplog.records]
        assert f"127.0.0.1:{port}" in line and "metrics.port" in line, line
        assert d.store is not None and d.reconciler is not None  # it goes on
    finally:
        taken.close()
        if d.reconciler is not None:
            d.reconciler.close()
        d.metrics.close()


# -- providers' lanes ---------------------------------------------------------------------------


def test_a_provider_that_hangs_is_left_to_finish_and_counted_when_it_does() -> None:
    from provisioner.control.lanes import ProviderLanes
    from provisioner.control.records import PassReport

    lanes = ProviderLanes(patience_s=0.3)
    gate = threading.Event()

    def step(key: str, pairs: list[tuple[str, object]], report: PassReport) -> None:
        if key == "hung":
            gate.wait(10)
        report.launches += len(pairs)
        report.provider_errors[(key, "transient")] += 1

    report = PassReport()
    groups: dict[str, list[tuple[str, object]]] = {
        "hung": [("a1", None), ("a2", None)],
        "fine": [("b1", None)],
    }
    lanes.run(groups, step, report)
    assert report.launches == 1 and lanes.jobs() == {"a1", "a2"}
    nxt = PassReport()
    assert lanes.busy_jobs(nxt) == {"a1", "a2"}  # still at it: its jobs are its own
    lanes.run({"fine": [("b1", None)]}, step, nxt)  # the next pass goes on without it
    assert nxt.launches == 1
    gate.set()
    for _ in range(200):
        if not lanes.busy_jobs(nxt):
            break
        threading.Event().wait(0.01)
    assert lanes.jobs() == set()
    assert nxt.launches == 3  # the late part counted in the pass that found it done
    assert nxt.provider_errors[("hung", "transient")] == 1
    lanes.close()


def test_one_provider_runs_in_the_pass_own_thread() -> None:
    from provisioner.control.lanes import ProviderLanes
    from provisioner.control.records import PassReport

    where: list[str] = []
    lanes = ProviderLanes(patience_s=0.3)
    lanes.run(
        {"only": [("j", None)]},
        lambda k, p, r: where.append(threading.current_thread().name),
        PassReport(),
    )
    assert where == [threading.current_thread().name]
    with pytest.raises(RuntimeError, match="store locked"):  # a part's error reaches the pass

        def boom(k: str, p: list[tuple[str, object]], r: PassReport) -> None:
            raise RuntimeError("store locked")

        lanes.run({"x": [("j1", None)], "y": [("j2", None)]}, boom, PassReport())
    lanes.close()
