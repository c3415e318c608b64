"""The agent's progress record, typed, and the notice in it as decide() reads a notice.

No cloud's API, as the adapters read them, reports a notice before the capacity goes; the agent
sees it on the VM and writes it in its record. These check the one contract both sides share
(:class:`~provisioner.agent.protocol.ProgressRecord`) and the controller's reading of it
(:func:`provisioner.control.inputs.reported_notices`): an interruption notice of the attempt
that reported it, whatever the provider; the end-to-end runs are in
``tests/e2e/test_e2e_aws_moto.py`` and ``tests/e2e/test_e2e_azure_notice.py``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from provisioner.agent.protocol import AgentNotice, ProgressRecord
from provisioner.control.inputs import agent_report, merged, reported_notices
from provisioner.control.store import AttemptRow
from provisioner.core.models import Interruption

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def attempt(n: int, state: str, instance_id: str | None, zone: str = "eu-west-1a") -> AttemptRow:
    return AttemptRow(
        job_id="j",
        attempt=n,
        token=f"j-{n}",
        provider="aws",
        region="eu-west-1",
        zone=zone,
        instance_type="g5.xlarge",
        gpu="A10G",
        gpu_count=1,
        market="spot",
        price_per_hour=0.4,
        instance_id=instance_id,
        state=state,
        created_at=NOW - timedelta(hours=1),
    )


def record(**over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "job_id": "j",
        "attempt": 2,
        "instance_id": "",  # a cloud's bootstrap does not tell the agent its instance id
        "cloud": "aws",
        "state": "checkpointing",
        "exit_code": None,
        "updated_at": "2026-05-01T12:00:01.000Z",
        "notice": {
            "seen_at": "2026-05-01T12:00:00.500Z",
            "deadline": "2026-05-01T12:02:00Z",
            "raw": '{"action": "terminate", "time": "2026-05-01T12:02:00Z"}',
            "source": "metadata",
        },
    }
    doc.update(over)
    return doc


def test_the_record_reads_the_fields_the_controller_acts_on() -> None:
    rec = ProgressRecord.from_doc(record())
    assert rec is not None
    assert (rec.attempt, rec.state, rec.cloud, rec.exit_code) == (2, "checkpointing", "aws", None)
    assert rec.updated_at == datetime(2026, 5, 1, 12, 0, 1, tzinfo=UTC)
    assert rec.notice == AgentNotice(
        seen_at=datetime(2026, 5, 1, 12, 0, 0, 500000, tzinfo=UTC),
        deadline=datetime(2026, 5, 1, 12, 2, tzinfo=UTC),
        raw='{"action": "terminate", "time": "2026-05-01T12:02:00Z"}',
        source="metadata",
    )
    assert rec.notice.from_cloud
    # what the agent writes is what the controller reads
    assert AgentNotice.from_doc(rec.notice.to_doc()) == rec.notice


@pytest.mark.parametrize(
    "junk",
    [
        {"attempt": "2", "exit_code": True, "state": 7, "updated_at": "yesterday"},
        {"notice": "soon", "setup_error": ["x"]},
        {"notice": {"seen_at": 5, "deadline": "not a time", "source": "rumour"}},
    ],
)
def test_a_malformed_field_reads_as_absent_never_an_error(junk: dict[str, Any]) -> None:
    rec = ProgressRecord.from_doc(record(**junk))
    assert rec is not None
    if "attempt" in junk:
        assert rec.attempt is None and rec.exit_code is None and rec.state is None
        assert rec.updated_at is None
    if junk.get("notice") == "soon":
        assert rec.notice is None and rec.setup_error is None
    if isinstance(junk.get("notice"), dict):
        assert rec.notice is not None
        assert (rec.notice.seen_at, rec.notice.deadline) == (None, None)
        assert rec.notice.source == "metadata"
    assert ProgressRecord.from_doc(["not", "an", "object"]) is None
    assert ProgressRecord.from_doc(None) is None


def test_a_reported_notice_is_an_interruption_of_that_attempts_instance() -> None:
    attempts = [attempt(1, "preempted", "i-old", "eu-west-1b"), attempt(2, "running", "i-new")]
    [it] = reported_notices(ProgressRecord.from_doc(record()), attempts, NOW)
    assert it == Interruption(
        instance_id="i-new",
        provider="aws",
        zone="eu-west-1a",
        kind="notice",
        at=datetime(2026, 5, 1, 12, 0, 0, 500000, tzinfo=UTC),
        deadline=datetime(2026, 5, 1, 12, 2, tzinfo=UTC),
        raw='aws: {"action": "terminate", "time": "2026-05-01T12:02:00Z"}',
    )
    # a peer's notice in a gang is the gang's: the same
    gang = record(notice={**record()["notice"], "source": "gang", "raw": "gang: node 1: TRUE"})
    assert [x.kind for x in reported_notices(ProgressRecord.from_doc(gang), attempts, NOW)] == [
        "notice"
    ]


@pytest.mark.parametrize(
    ("doc", "attempts", "why"),
    [
        (record(notice=None), [attempt(2, "running", "i-new")], "no notice"),
        (
            record(notice={**record()["notice"], "source": "signal", "raw": "SIGTERM"}),
            [attempt(2, "running", "i-new")],
            "a stop signal to the agent is not a cloud's notice",
        ),
        (record(), [attempt(2, "ended", "i-new")], "that attempt is over"),
        (record(), [attempt(2, "launching", None)], "no instance recorded yet"),
        (record(), [attempt(1, "running", "i-1")], "another attempt's record"),
        (record(attempt=None), [attempt(2, "running", "i-new")], "no attempt in the record"),
        (
            record(notice={**record()["notice"], "deadline": "2026-05-01T10:00:00Z"}),
            [attempt(2, "running", "i-new")],
            "over two hours ago, and the capacity stayed",
        ),
    ],
)
def test_no_interruption_without_a_cloud_notice_for_a_running_attempt(
    doc: dict[str, Any], attempts: list[AttemptRow], why: str
) -> None:
    assert reported_notices(ProgressRecord.from_doc(doc), attempts, NOW) == [], why


def test_the_apis_notice_is_kept_where_both_report_one() -> None:
    api = Interruption("i-new", "aws", "eu-west-1a", "notice", NOW, NOW + timedelta(minutes=2))
    mine = Interruption("i-new", "aws", "eu-west-1a", "notice", NOW, NOW + timedelta(seconds=90))
    other = Interruption("i-2", "aws", "eu-west-1b", "notice", NOW)
    gone = Interruption("i-new", "aws", "eu-west-1a", "preempted", NOW)
    assert merged([api, gone], [mine, other]) == [api, gone, other]


def test_an_api_notice_without_a_time_takes_the_agents() -> None:
    """Alibaba's Recycling lock says nothing of when the instance goes; the VM's metadata
    does, and the agent reports it: the one notice keeps that deadline."""
    lock = Interruption("i-1", "alibaba", "cn-hangzhou-h", "notice", NOW, raw="Recycling")
    when = NOW + timedelta(minutes=5)
    mine = Interruption("i-1", "alibaba", "cn-hangzhou-h", "notice", NOW, when)
    [one] = merged([lock], [mine])
    assert one.deadline == when and one.raw == "Recycling"


def test_the_agent_report_comes_from_the_same_record() -> None:
    rec = ProgressRecord.from_doc(record(state="interrupted", exit_code=0))
    rep = agent_report(rec)
    assert rep is not None
    assert (rep.state, rep.attempt, rep.exit_code) == ("interrupted", 2, 0)
    assert agent_report(record(state="interrupted", exit_code=0)) == rep  # a raw document too
    assert agent_report(None) is None and agent_report({}) is None


def test_the_daemons_poll_sees_a_notice_in_a_local_progress_file(tmp_path: Path) -> None:
    """On a local store the daemon's interruption poll asks each held job's memo whether its
    agent reported a new notice: only a notice the pass has not read counts, and a file that
    did not change is not read again."""
    import json
    import os

    from provisioner.control.jobpass.progress import local_mtime, local_notice
    from provisioner.control.jobpass.state import JobMemo

    path = tmp_path / "progress.json"
    running = {"state": "running", "attempt": 1, "step": 40}
    path.write_text(json.dumps(running))
    memo = JobMemo()
    memo.progress_file, memo.progress = str(path), running
    memo.progress_mtime = local_mtime(str(path))
    assert not local_notice(memo)  # as the pass read it
    path.write_text(json.dumps({**running, "step": 50}))
    os.utime(path, ns=(1, 1))  # a change, whatever the clock's resolution
    assert not local_notice(memo)  # progress, but no notice: the pass's own pace
    notice = {"seen_at": "2026-12-05T10:00:00Z", "deadline": "2026-12-05T10:02:00Z"}
    path.write_text(json.dumps({**running, "state": "checkpointing", "notice": notice}))
    os.utime(path, ns=(2, 2))
    assert local_notice(memo)  # a notice the pass has not seen: a pass now
    memo.progress = json.loads(path.read_text())
    memo.progress_mtime = local_mtime(str(path))
    assert not local_notice(memo)  # read by the pass: nothing new
    memo.progress_file = None
    assert not local_notice(memo)  # a bucket: the poll never reads it


def test_a_reported_rebalance_is_an_early_signal_of_that_attempts_instance() -> None:
    """The agent's ``rebalance`` (AWS's recommendation) reaches decide() as an interruption
    with ``kind="rebalance"`` and no deadline, of the running attempt that reported it; it is
    not a notice (a record with one and no notice has no notice)."""
    from provisioner.control.inputs import reported_rebalance

    doc = record(
        notice=None,
        state="running",
        rebalance={
            "seen_at": "2026-05-01T12:00:03.000Z",
            "at": "2026-05-01T11:58:00.000Z",
            "raw": '{"noticeTime": "2026-05-01T11:58:00Z"}',
        },
    )
    rec = ProgressRecord.from_doc(doc)
    assert rec is not None and rec.notice is None
    assert rec.rebalance_at == datetime(2026, 5, 1, 11, 58, tzinfo=UTC)
    attempts = [attempt(1, "ended", "i-1"), attempt(2, "running", "i-2")]
    (it,) = reported_rebalance(rec, attempts)
    assert (it.instance_id, it.kind, it.deadline) == ("i-2", "rebalance", None)
    assert it.at == rec.rebalance_at and "noticeTime" in it.raw
    assert reported_notices(rec, attempts, NOW) == []
    # no longer served, or the attempt no longer running: nothing
    gone = ProgressRecord.from_doc(record(notice=None, rebalance=None))
    assert reported_rebalance(gone, attempts) == []
    assert reported_rebalance(rec, [attempt(2, "preempted", "i-2")]) == []
    # junk reads as absent
    junk = ProgressRecord.from_doc(record(rebalance={"at": 5}))
    assert junk is not None and junk.rebalance_at is None
