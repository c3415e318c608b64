"""A step before the job that fails (code, secrets, image, setup) is not a preemption: decide()
ends the attempt without a restart or a cooldown and launches again; the same failure on a
second attempt, or a third failure of any kind, fails the job. The daemon's inputs read the
failures back from the attempts' end reasons."""

from __future__ import annotations

from datetime import timedelta

from provisioner.control.inputs import agent_report, setup_failures
from provisioner.control.store import AttemptRow
from provisioner.core.decide import AgentReport, Fail, Observations, Terminate, decide
from tests.core.test_decide import NOW, cands, job, kinds, running


def _failed(fp: str, attempt: int = 1) -> AgentReport:
    return AgentReport(
        state="setup-failed",
        attempt=attempt,
        exit_code=78,
        updated_at=NOW,
        setup_message="setup: pip install -r requirements.txt exited 1",
        setup_fingerprint=fp,
    )


def test_a_first_setup_failure_ends_the_attempt_without_a_preemption() -> None:
    cur, inst = running(1)
    out = decide(job(current=cur, agent=_failed("abc")), Observations(instances=(inst,)), NOW)
    assert kinds(out) == ["Terminate"]
    assert isinstance(out[0], Terminate) and out[0].instance_id == inst.id
    assert out[0].reason.startswith("setup failed (abc): setup: pip install")
    assert "preempted" not in out[0].reason  # no restart counted, no zone cooled down


def test_the_same_failure_twice_fails_the_job() -> None:
    cur, inst = running(2)
    v = job(current=cur, agent=_failed("abc", 2), setup_failures=("abc",))
    out = decide(v, Observations(instances=(inst,)), NOW)
    assert kinds(out) == ["Terminate", "Fail"]
    assert isinstance(out[1], Fail) and "the same way on two attempts" in out[1].reason


def test_another_failure_launches_again_and_a_third_fails() -> None:
    cur, inst = running(2)
    v = job(current=cur, agent=_failed("new", 2), setup_failures=("old",))
    assert kinds(decide(v, Observations(instances=(inst,)), NOW)) == ["Terminate"]
    cur, inst = running(3)
    v = job(current=cur, agent=_failed("third", 3), setup_failures=("one", "two"))
    out = decide(v, Observations(instances=(inst,)), NOW)
    assert kinds(out) == ["Terminate", "Fail"] and "3 attempts" in out[1].reason


def test_a_report_of_an_ended_attempt_does_not_stop_the_next_launch() -> None:
    cur, _ = running(1)
    from dataclasses import replace

    from provisioner.core.models import InstanceState

    gone = replace(cur, state=InstanceState.TERMINATED, ended_at=NOW - timedelta(seconds=5))
    v = job(current=gone, agent=_failed("abc"), setup_failures=("abc",))
    out = decide(v, Observations(candidates=cands("us-east-1a")), NOW)
    assert kinds(out) == ["Launch"]  # the failure was judged when its attempt ended


def _attempt(n: int, reason: str) -> AttemptRow:
    return AttemptRow(job_id="j1", attempt=n, end_reason=reason, state="ended")


def test_the_daemon_reads_failures_from_progress_and_attempts() -> None:
    progress = {
        "state": "setup-failed",
        "attempt": 2,
        "exit_code": 78,
        "updated_at": NOW.isoformat(),
        "setup_error": {
            "stage": "secrets",
            "message": "HF (sim:HF): not found",
            "fingerprint": "f1",
        },
    }
    rep = agent_report(progress)
    assert rep is not None and rep.state == "setup-failed"
    assert rep.setup_fingerprint == "f1" and rep.setup_message == "secrets: HF (sim:HF): not found"
    rows = [
        _attempt(1, "setup failed (f0): setup: x exited 1"),
        _attempt(2, "preempted"),
        _attempt(3, "setup failed (f1): secrets: HF (sim:HF): not found"),
    ]
    assert setup_failures(rows) == ("f0", "f1")
