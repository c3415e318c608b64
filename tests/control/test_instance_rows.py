"""Instance rows tell the truth (issue 39, defect 7), on the sim and a real SQLite store, with
the real reconciler on a virtual clock (no agent process: the test writes the job's
``progress.json`` as the agent would).

* an instance we terminated has an end time and a final raw state, not the cloud's word for a
  running one (``PowerState/running`` on Azure's);
* a daemon restarted after the job finished terminates the instance in its first pass; the
  pass's batched instance rows (written at its end, after the termination) never bring the
  row back to ``running``;
* an instance's end time is set once: a later daemon that lists it dead again does not move it.

Each store rule is also checked on the store alone, in both orders of the writes (two daemons
may interleave them), and :func:`provisioner.control.rowchecks.ended_rows_violations` finds
each of the lies on rows written as they were before the fix.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from providers.sim import SimProvider
from provisioner.api import submit
from provisioner.control.reconciler import Reconciler
from provisioner.control.rowchecks import ended_rows_violations
from provisioner.control.store import FINAL_STATES, InstanceRow, JobRow, Store
from provisioner.core.models import TAG_JOB
from tests.pg import fresh_database

#: far from any real date: a row stamped with the real clock cannot pass for this one
T0 = datetime(2030, 6, 1, 9, 0, tzinfo=UTC)
STEP = timedelta(minutes=5)


def policy(path: Path, ckpt: Path) -> Path:
    path.write_text(f"""
name: rows
job:
  command: ["{sys.executable}", "-c", "pass"]
  compute_hours: 1
resources: {{min_vram_gb: 16}}
market: spot
residency: {{allow: [EEA]}}
checkpoint:
  uri: file://{ckpt}
  shared: true
""")
    return path


@dataclass
class World:
    """One sim cloud (mimicking Azure: its raw states say ``PowerState/...``), one store, one
    job, and a virtual clock both read."""

    sim: SimProvider
    store: Store
    job_id: str
    ckpt: Path
    clock: list[datetime]

    def daemon(self) -> Reconciler:
        """A new daemon process: the store and the cloud, nothing remembered."""
        return Reconciler(self.store, clock=lambda: self.clock[0], pass_interval_s=STEP.seconds)

    def tick(self) -> datetime:
        self.clock[0] += STEP
        self.sim.set_clock(self.clock[0])
        return self.clock[0]

    def live(self) -> list[Any]:
        return [i for i in self.sim.list({TAG_JOB: self.job_id}) if i.state.alive]

    def report(self, state: str) -> None:
        """The agent's ``progress.json`` for the job's live instance."""
        from provisioner.agent.store import CheckpointStore

        [inst] = self.live()
        at = self.clock[0].isoformat()
        step = 10 if state == "done" else 5
        doc = {
            "job_id": self.job_id, "attempt": inst.attempt, "instance_id": inst.id,
            "state": state, "step": step, "total_steps": 10, "last_checkpoint": f"ckpt-{step:08d}",
            "last_checkpoint_step": step, "last_checkpoint_at": at, "updated_at": at,
            "exit_code": 0 if state == "done" else None,
        }  # fmt: skip
        CheckpointStore(f"file://{self.ckpt}", self.job_id).write_text(
            "progress.json", json.dumps(doc)
        )

    def job(self) -> JobRow:
        job = self.store.job(self.job_id)
        assert job is not None
        return job

    def row(self, instance_id: str) -> InstanceRow:
        [row] = [r for r in self.store.instances(self.job_id) if r.instance_id == instance_id]
        return row


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    options: dict[str, Any] = {
        "state_dir": str(tmp_path / "sim"),
        "mimic": "azure",
        "seconds_per_hour": 3600.0,  # the virtual clock runs in simulated seconds
        "mtbp_hours": None,
        "run_agent": False,
        "notice_floor_s": 0.0,
        "idle_exit_s": 120.0,
    }
    sim = SimProvider(**options)
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    try:
        sim.set_clock(T0)
        _, job_id = submit(
            policy(tmp_path / "p.yaml", tmp_path / "ck"),
            provider="sim",
            provider_defaults=False,
            provider_options=options,
            store=store,
            now=T0,
        )
        yield World(sim, store, job_id, tmp_path / "ck", [T0])
    finally:
        store.close()
        sim.shutdown_server(terminate_all=True)


def _launched(world: World) -> tuple[Reconciler, str]:
    rec = world.daemon()
    rec.run_pass()
    [inst] = world.live()
    world.tick()
    world.report("running")
    rec.run_pass()  # seen running: its row says so
    row = world.row(inst.id)
    assert row.state == "running" and row.raw_state == "PowerState/running" and not row.ended_at
    return rec, inst.id


def test_an_instance_we_terminated_has_an_end_time_and_a_final_raw_state(world: World) -> None:
    rec, iid = _launched(world)
    end = world.tick()
    world.report("done")
    rec.run_pass()  # done: the instance is stopped and the job succeeds
    rec.close()
    job = world.job()
    assert job.state == "succeeded", job.reason
    assert world.live() == []
    row = world.row(iid)
    assert row.state == "terminated" and row.ended_at == end
    assert row.raw_state != "PowerState/running", row.raw_state
    assert ended_rows_violations([row], world.store.attempts(world.job_id)) == []


def test_a_restarted_daemon_never_brings_an_ended_row_back_to_running(world: World) -> None:
    rec, iid = _launched(world)
    rec.close()  # the daemon stops; the job finishes meanwhile
    world.tick()
    world.report("done")
    end = world.tick()
    again = world.daemon()  # restarted: its first pass terminates the instance...
    again.run_pass()  # ...and writes its batched rows (the instance seen running) after
    job = world.job()
    assert job.state == "succeeded", job.reason
    row = world.row(iid)
    assert row.state == "terminated" and row.ended_at == end, (row.state, row.ended_at)
    assert row.raw_state != "PowerState/running"
    world.tick()
    again.run_pass()
    again.close()
    assert world.row(iid).state == "terminated" and world.row(iid).ended_at == end
    assert ended_rows_violations(world.store.instances(), world.store.attempts(world.job_id)) == []


def test_an_instances_end_time_is_set_once_across_restarts(world: World) -> None:
    rec, iid = _launched(world)
    world.sim.preempt(iid, notice_s=0.0)  # the capacity goes
    gone = world.tick()
    rec.run_pass()  # seen preempted: ended now; a replacement is launched
    rec.close()
    assert world.job().state not in FINAL_STATES, world.job().state  # it goes on
    first = world.row(iid)
    assert first.state != "running" and first.ended_at == gone, (first.state, first.ended_at)
    assert iid in {i.id for i in world.sim.list({TAG_JOB: world.job_id})}  # still listed, dead
    for _ in range(3):  # each restart lists the dead instance again
        world.tick()
        world.tick()
        rec = world.daemon()
        rec.run_pass()
        rec.close()
        assert world.row(iid).ended_at == gone
    assert ended_rows_violations(world.store.instances(), world.store.attempts(world.job_id)) == []


# -- the store's rules alone -------------------------------------------------------------------


def _row(state: str, raw: str, ended: datetime | None, seen: datetime) -> InstanceRow:
    return InstanceRow(
        provider="sim", instance_id="i-1", job_id="j", attempt=1, region="r", zone="z",
        instance_type="t", market="spot", state=state, raw_state=raw, state_reason="",
        price_per_hour=1.0, launched_at=T0, ended_at=ended, last_seen_at=seen,
    )  # fmt: skip


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """The rules are the upsert statement's: each dialect's (PostgreSQL where it runs)."""
    if request.param == "sqlite":
        s = Store(f"sqlite:///{tmp_path / 'r.db'}")
        yield s
        s.close()
        return
    with fresh_database() as url:
        s = Store(url)
        yield s
        s.close()


def test_an_upsert_never_resurrects_an_ended_row(store: Store) -> None:
    running = _row("running", "running", None, T0)
    store.upsert_instances([running])
    end = T0 + STEP
    store.end_instances("sim", ["i-1"], end, "job finished")
    store.upsert_instances([_row("running", "running", None, T0 + STEP)])  # a late batch
    [row] = store.instances()
    assert (row.state, row.ended_at, row.state_reason) == ("terminated", end, "job finished")
    assert row.raw_state != "running" and row.raw_state
    assert row.last_seen_at == T0 + STEP  # what was seen is still recorded
    # the cloud's own final word replaces ours; the end time stays the first one
    later = T0 + 10 * STEP
    store.upsert_instances([_row("terminated", "terminated", later, later)])
    [row] = store.instances()
    assert (row.state, row.raw_state, row.ended_at) == ("terminated", "terminated", end)
    assert row.state_reason == "job finished"


def test_an_end_time_is_set_once_whichever_write_comes_first(store: Store) -> None:
    seen = T0 + STEP
    store.upsert_instances([_row("preempted", "terminated", seen, seen)])
    store.end_instances("sim", ["i-1"], seen + STEP, "late")  # already ended: left alone
    for k in range(2, 5):
        at = T0 + k * STEP
        store.upsert_instances([_row("preempted", "terminated", at, at)])
        store.upsert_instance(_row("preempted", "terminated", at, at))
    [row] = store.instances()
    assert row.ended_at == seen and row.state == "preempted"


# -- the check -----------------------------------------------------------------------------------


def test_the_check_finds_each_lie() -> None:
    from provisioner.control.store import AttemptRow

    def attempt(state: str) -> AttemptRow:
        return AttemptRow(job_id="j", attempt=1, instance_id="i-1", state=state, provider="sim")

    end = T0 + STEP
    ok = _row("terminated", "terminated by provisioner", end, end)
    assert ended_rows_violations([ok], [attempt("ended")]) == []
    assert ended_rows_violations([_row("running", "running", None, T0)], [attempt("running")]) == []
    lies = {
        "no end time": _row("terminated", "terminated", None, end),
        "raw state": _row("terminated", "PowerState/running", end, end),
        "no raw state": _row("preempted", "", end, end),
        "live": _row("running", "PowerState/running", None, T0),  # of an ended attempt
    }
    for what, row in lies.items():
        found = ended_rows_violations([row], [attempt("ended")])
        assert len(found) == 1 and "i-1" in found[0], (what, found)
    # a raw state the snapshot shows on a live row of the same cloud is not a final one
    live = _row("running", "Running", None, T0)
    live.instance_id = "i-2"
    dead = _row("terminated", "Running", end, end)
    assert len(ended_rows_violations([live, dead])) == 1
