"""What a pass queues (provisioner.control.records.PassBatch) and how it reaches the store: the
events that tell of the batch's rows (a job's first progress) commit with them, in one
transaction, or not at all; a queued event is written before anything else of its job that
is written sooner (its next event, its row outside the batch)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from policies.loader import parse_policy
from provisioner.control.jobpass.settle import settle
from provisioner.control.jobpass.state import PassEnv, PassState
from provisioner.control.records import PassBatch, instance_doc
from provisioner.control.store import Store
from provisioner.core.models import TAG_ATTEMPT, TAG_JOB, Instance, InstanceState, Market
from provisioner.core.planner import Plan
from tests.pg import fresh_database

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
POLICY = """\
name: writes
job:
  command: ["true"]
resources:
  gpu_count: 1
market: spot
"""


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        s = Store(f"sqlite:///{tmp_path / 'p.db'}")
        yield s
        s.close()
    else:
        with fresh_database() as url:
            s = Store(url)
            yield s
            s.close()


def submit(store: Store, name: str) -> str:
    return store.submit(
        name=name,
        policy_yaml=POLICY,
        policy_path=None,
        provider="sim",
        provider_options={},
        now=NOW,
        deadline=None,
        work_total_h=None,
    ).id


def kinds(store: Store, job_id: str) -> list[str]:
    return [e.kind for e in store.events(job_id) if e.kind != "submitted"]


def no_plan(*_args: Any) -> Plan:
    raise AssertionError("nothing is planned here")


def test_a_pass_batch_commits_its_events_rows_and_columns_together(store: Store) -> None:
    a, b = submit(store, "a"), submit(store, "b")
    batch = PassBatch()
    batch.event(a, "first-progress", "attempt 1: the job runs", NOW, attempt=1)
    batch.event(b, "first-progress", "attempt 1: the job runs", NOW, attempt=1)
    batch.job(a, progress={"attempt": 1, "state": "running"}, spent_usd=0.5)
    batch.job(b, spent_usd=0.25)
    inst = Instance(
        id="i-1",
        provider="sim",
        region="r",
        zone="r-a",
        instance_type="g",
        market=Market.SPOT,
        state=InstanceState.RUNNING,
        price_per_hour=1.0,
        launched_at=NOW,
        tags={TAG_JOB: a, TAG_ATTEMPT: "1"},
    )
    batch.instance(instance_doc(inst, NOW))
    rows, cols, events = batch.take()
    assert batch.take() == ([], {}, [])  # taken: the next pass starts empty
    store.write_pass(rows, cols, events)
    assert kinds(store, a) == ["first-progress"] and kinds(store, b) == ["first-progress"]
    ja, jb = store.job(a), store.job(b)
    assert ja is not None and jb is not None
    assert ja.progress == {"attempt": 1, "state": "running"} and ja.spent_usd == 0.5
    assert jb.spent_usd == 0.25 and jb.progress == {}
    assert [(r.instance_id, r.state, r.job_id) for r in store.instances(a)] == [
        ("i-1", "running", a)
    ]
    # a batch that cannot be written whole writes nothing: its events neither
    batch.event(a, "first-progress", "attempt 2: the job runs", NOW, attempt=2)
    batch.job(a, progress={"attempt": 2, "state": "running"})
    batch.job(b, no_such_column=1)
    with pytest.raises(Exception):  # noqa: B017 - the database's or SQLAlchemy's own error
        store.write_pass(*batch.take())
    assert kinds(store, a) == ["first-progress"]
    ja = store.job(a)
    assert ja is not None and ja.progress == {"attempt": 1, "state": "running"}


def test_a_queued_event_goes_before_its_jobs_next_writes(store: Store) -> None:
    jid, other = submit(store, "q"), submit(store, "other")
    job = store.job(jid)
    assert job is not None
    batch = PassBatch()
    env = PassEnv(store, "t", timedelta(minutes=1), lambda: NOW, no_plan, batch, None)
    run = PassState(env, job, parse_policy(POLICY, "p.yaml"), None, [], NOW)  # type: ignore[arg-type]
    batch.event(other, "first-progress", "another job's", NOW)
    run.queue_event("first-progress", "attempt 1: the job runs", NOW, attempt=1)
    assert kinds(store, jid) == []  # queued: written with the batch
    run.event("note", "something else of the job")
    assert kinds(store, jid) == ["first-progress", "note"]  # in their order
    run.queue_event("first-progress", "attempt 2: the job runs", NOW, attempt=2)
    settle(run, {"reason": "written at once"})  # the row outside the batch: the event first
    assert kinds(store, jid) == ["first-progress", "note", "first-progress"]
    got = store.job(jid)
    assert got is not None and got.reason == "written at once"
    assert [e["job_id"] for e in batch.take()[2]] == [other]  # only the other job's is left
    assert kinds(store, other) == []


def test_a_step_that_does_not_finish_drops_what_it_queued(store: Store) -> None:
    jid = submit(store, "dropped")
    job = store.job(jid)
    assert job is not None
    batch = PassBatch()
    env = PassEnv(store, "t", timedelta(minutes=1), lambda: NOW, no_plan, batch, None)
    run = PassState(env, job, parse_policy(POLICY, "p.yaml"), None, [], NOW)  # type: ignore[arg-type]
    run.memo.first_progress = 1  # told, as note_first_progress marks it when it queues
    run.queue_event("first-progress", "attempt 1: the job runs", NOW, attempt=1)
    run.drop_queued()  # the pass forgets the job: its progress row may not be written
    assert batch.take()[2] == [] and kinds(store, jid) == []
    assert run.memo.first_progress is None  # its next pass tells it again
