"""The invariants (provisioner.control.invariants): each check finds a hand-made snapshot that
breaks its promise and passes a clean one; the daemon's per-pass check records what it finds;
``provisioner check`` runs them on demand."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from provisioner.control import invariants as inv
from provisioner.control.invariants import Invariant, Snapshot
from provisioner.control.store import AttemptRow, EventRow, InstanceRow, JobRow, Store
from provisioner.control.store.schema import NotificationRow
from provisioner.core.models import (
    TAG_ATTEMPT,
    TAG_JOB,
    TAG_MANAGED,
    Instance,
    InstanceState,
    Market,
)

T0 = datetime(2031, 3, 4, 5, 0, tzinfo=UTC)  # any date: nothing here reads the real clock
POLICY = """\
name: inv
resources: {gpus: [V100]}
market: spot
job: {command: ["python", "-c", "pass"], compute_hours: 1}
"""


def policy(extra: str = "") -> str:
    return POLICY + extra


def job(state: str = "running", **kw: Any) -> JobRow:
    base: dict[str, Any] = dict(
        id="j1",
        name="inv",
        policy_yaml=policy(),
        provider="sim",
        provider_options={},
        state=state,
        submitted_at=T0,
        updated_at=T0,
        attempt=1,
        restarts=0,
        spent_usd=0.0,
        progress={},
        result={},
        reason="",
    )
    base.update(kw)
    return JobRow(**base)


def attempt(n: int, state: str = "running", **kw: Any) -> AttemptRow:
    base: dict[str, Any] = dict(
        job_id="j1",
        attempt=n,
        token=f"j1:{n}",
        provider="aws",
        region="us-east-1",
        zone="us-east-1a",
        instance_type="p3.2xlarge",
        gpu="V100",
        gpu_count=1,
        market="spot",
        price_per_hour=1.0,
        instance_id=f"i-{n}",
        state=state,
        created_at=T0 + timedelta(minutes=10 * n),
        launched_at=T0 + timedelta(minutes=10 * n, seconds=5),
        ended_at=None,
        cost_usd=0.0,
        nodes=1,
        end_reason="",
    )
    base.update(kw)
    return AttemptRow(**base)


def row(iid: str, state: str = "running", raw: str = "running", **kw: Any) -> InstanceRow:
    base: dict[str, Any] = dict(
        provider="aws",
        instance_id=iid,
        job_id="j1",
        attempt=1,
        region="us-east-1",
        zone="us-east-1a",
        instance_type="p3.2xlarge",
        market="spot",
        state=state,
        raw_state=raw,
        state_reason="",
        launched_at=T0,
        ended_at=None,
    )
    base.update(kw)
    return InstanceRow(**base)


def cloud(
    iid: str, n: int, state: InstanceState = InstanceState.RUNNING, jid: str = "j1"
) -> Instance:
    tags = {TAG_MANAGED: "true", TAG_JOB: jid, TAG_ATTEMPT: str(n)}
    return Instance(
        iid, "aws", "us-east-1", "us-east-1a", "p3.2xlarge", Market.SPOT, state, tags=tags
    )


_ids = iter(range(1, 1_000_000))


def event(kind: str, message: str = "", **data: Any) -> EventRow:
    return EventRow(id=next(_ids), job_id="j1", at=T0, kind=kind, message=message, data=data)


def snap(
    jobs: tuple[JobRow, ...] | None = None,
    attempts: tuple[AttemptRow, ...] = (),
    instances: tuple[InstanceRow, ...] = (),
    **kw: Any,
) -> Snapshot:
    jobs = jobs or (job(),)
    return Snapshot(
        now=T0 + timedelta(hours=1),
        jobs=jobs,
        attempts={"j1": attempts},
        instances=instances,
        **kw,
    )


def kinds(found: list[inv.Violation]) -> set[Invariant]:
    return {v.invariant for v in found}


# -- each check: a violating snapshot and a clean one ------------------------------------------


def test_a_final_job_with_live_capacity_is_found_in_its_rows_and_at_the_cloud() -> None:
    done = job("succeeded")
    ended = row("i-1", "terminated", "terminated", ended_at=T0)
    assert inv.check_final_job_live(snap((done,), instances=(ended,), cloud=())) == []
    bad = inv.check_final_job_live(snap((done,), instances=(row("i-1"),), cloud=(cloud("i-1", 1),)))
    assert [v.invariant for v in bad] == [Invariant.FINAL_JOB_LIVE] * 2
    assert "i-1" in bad[0].message and bad[0].job_id == "j1"
    # an active job's live instance is fine
    assert inv.check_final_job_live(snap(instances=(row("i-1"),), cloud=(cloud("i-1", 1),))) == []


def test_an_ended_row_needs_an_end_time_and_a_final_raw_state() -> None:
    good = (
        row("i-1", "terminated", "terminated", ended_at=T0),
        row("i-2", "preempted", "PowerState/deallocated", ended_at=T0),
        row("i-3"),  # live: nothing to say
    )
    assert inv.check_ended_rows(snap(instances=good)) == []
    for bad in (
        row("i-4", "terminated", "running", ended_at=T0),  # the raw state a live VM has
        row("i-5", "terminated", "PowerState/running", ended_at=T0),
        row("i-6", "terminated", "terminated"),  # no end time
        row("i-7", "running", "running", ended_at=T0),  # ended, yet running
    ):
        found = inv.check_ended_rows(snap(instances=(bad,)))
        assert kinds(found) == {Invariant.ENDED_ROW}, bad.instance_id
        assert bad.instance_id in found[0].message


def test_a_non_zero_exit_read_by_the_daemon_fails_the_job_unless_the_policy_restarts_on_it() -> (
    None
):
    exited = {"attempt": 1, "state": "failed", "exit_code": 1}
    found = inv.check_exit_fails(snap((job(progress=exited),)))
    assert kinds(found) == {Invariant.EXIT_NOT_FAILED} and "exited 1" in found[0].message
    assert inv.check_exit_fails(snap((job("failed", progress=exited),))) == []
    assert inv.check_exit_fails(snap((job(progress={**exited, "exit_code": 0}),))) == []
    assert inv.check_exit_fails(snap((job(progress={**exited, "attempt": 0}),))) == []  # older


def test_the_exit_codes_the_policy_restarts_on_are_not_failures() -> None:
    restarts = policy() + "restart:\n  on_exit_codes: [137]\n"
    killed = {"attempt": 1, "state": "failed", "exit_code": 137}
    assert inv.check_exit_fails(snap((job(progress=killed, policy_yaml=restarts),))) == []
    other = {**killed, "exit_code": 2}
    found = inv.check_exit_fails(snap((job(progress=other, policy_yaml=restarts),)))
    assert kinds(found) == {Invariant.EXIT_NOT_FAILED}


def test_spend_stays_within_max_total_plus_one_billing_minimum() -> None:
    stop = policy("budget: {max_total: 0.004, on_exhausted: stop}\n")
    # AWS: per second with a 60 s minimum; $1/h -> $0.01667 a minute
    a1 = attempt(1, "ended", price_per_hour=0.12, cost_usd=0.005, ended_at=T0 + timedelta(hours=1))
    within = job("failed", policy_yaml=stop, spent_usd=0.005)
    assert inv.check_budget(snap((within,), (a1,))) == []  # 0.004 + 0.002 minimum >= 0.005
    over = job("failed", policy_yaml=stop, spent_usd=0.00834)
    assert kinds(inv.check_budget(snap((over,), (replace_cost(a1, 0.00834),)))) == {
        Invariant.BUDGET_OVERRUN
    }
    # pause, or no max_total: not judged
    pause = policy("budget: {max_total: 0.004, on_exhausted: pause}\n")
    assert inv.check_budget(snap((job(policy_yaml=pause, spent_usd=1.0),), (a1,))) == []


def replace_cost(a: AttemptRow, cost: float) -> AttemptRow:
    b = attempt(a.attempt, a.state, price_per_hour=a.price_per_hour, ended_at=a.ended_at)
    b.cost_usd = cost
    return b


def test_no_launch_whose_minimum_charge_is_more_than_what_is_left() -> None:
    pol = policy("budget: {max_total: 0.01, on_exhausted: stop}\n")
    first = attempt(
        1, "preempted", price_per_hour=0.3, cost_usd=0.009, ended_at=T0 + timedelta(minutes=15)
    )
    # $0.001 left; a $0.3/h launch's 60 s minimum is $0.005
    second = attempt(2, "running", price_per_hour=0.3, created_at=T0 + timedelta(minutes=20))
    found = inv.check_budget(snap((job(policy_yaml=pol, spent_usd=0.009),), (first, second)))
    assert kinds(found) == {Invariant.LAUNCH_OVER_BUDGET} and "attempt 2" in found[0].message
    cheap = attempt(2, "running", price_per_hour=0.03, created_at=T0 + timedelta(minutes=20))
    assert inv.check_budget(snap((job(policy_yaml=pol, spent_usd=0.009),), (first, cheap))) == []


def test_at_most_two_live_attempts_and_a_gang_is_one_unit() -> None:
    two = (attempt(1), attempt(2, "launching"))
    gang = (*tuple(cloud(f"i-2-{k}", 2) for k in range(4)), cloud("i-1", 1))
    assert inv.check_live_attempts(snap(attempts=two, cloud=gang)) == []
    three = (*two, attempt(3))
    found = inv.check_live_attempts(snap(attempts=three, cloud=(*gang, cloud("i-3", 3))))
    assert [v.invariant for v in found] == [Invariant.LIVE_ATTEMPTS] * 2


def test_a_spot_instance_over_its_cap_is_moved_or_stopped_in_time() -> None:
    now = T0 + timedelta(hours=1)
    running = (cloud("i-1", 1),)
    # over its cap for one pass: not yet due
    young = snap(
        attempts=(attempt(1),),
        cloud=running,
        interval_s=60.0,
        over_cap_since={"i-1": now - timedelta(seconds=60)},
    )
    assert inv.check_over_cap(young) == []
    # three passes on, nothing done: found
    stuck = snap(
        attempts=(attempt(1),),
        cloud=running,
        interval_s=60.0,
        over_cap_since={"i-1": now - timedelta(seconds=180)},
    )
    found = inv.check_over_cap(stuck)
    assert kinds(found) == {Invariant.OVER_CAP} and "neither moved nor stopped" in found[0].message
    # a replacement on its way: held to the handover's time, no longer
    moving = (attempt(1), attempt(2, "launching"))
    acted = snap(
        attempts=moving,
        cloud=running,
        interval_s=60.0,
        over_cap_since={"i-1": now - timedelta(minutes=10)},
    )
    assert inv.check_over_cap(acted) == []
    late = snap(
        attempts=moving,
        cloud=running,
        interval_s=60.0,
        over_cap_since={"i-1": now - timedelta(hours=2)},
    )
    assert kinds(inv.check_over_cap(late)) == {Invariant.OVER_CAP}
    # gone at the cloud: nothing to find; the watch forgets what is no longer over
    gone = (cloud("i-1", 1, InstanceState.TERMINATED),)
    assert (
        inv.check_over_cap(
            snap(attempts=(attempt(1),), cloud=gone, interval_s=60.0, over_cap_since={"i-1": T0})
        )
        == []
    )
    watch = inv.OverCapWatch()
    assert watch.update(T0, ["i-1"]) == {"i-1": T0}
    assert watch.update(now, ["i-1", "i-2"]) == {"i-1": T0, "i-2": now}
    assert watch.update(now, []) == {}


def test_an_instance_without_its_live_attempt_or_job_is_an_orphan() -> None:
    atts = (attempt(1, "preempted"), attempt(2))
    assert inv.check_orphans(snap(attempts=atts, cloud=(cloud("i-2", 2),))) == []
    found = inv.check_orphans(snap(attempts=atts, cloud=(cloud("i-1", 1), cloud("i-9", 9))))
    assert [v.invariant for v in found] == [Invariant.ORPHAN] * 2
    assert "which is preempted" in found[0].message and "does not hold" in found[1].message
    gone = cloud("i-1", 1, InstanceState.TERMINATED)
    assert inv.check_orphans(snap(attempts=atts, cloud=(gone,))) == []
    s = snap(attempts=atts, cloud=(cloud("i-x", 1, jid="nobody"),))
    assert kinds(inv.check_unknown_instances(s, ["j1"])) == {Invariant.ORPHAN}


def test_every_preemption_restart_and_final_state_is_told_in_order() -> None:
    atts = (attempt(1, "preempted"), attempt(2, "ended"))
    evs = (
        event("launch", "attempt 1"),
        event("preempted", "attempt 1 on aws:us-east-1a preempted", instance="i-1"),
        event("first-progress", "attempt 2: the job runs", attempt=2),
        event("restarted", "restart 1: attempt 2 runs", attempt=2),
        event("succeeded", "job succeeded"),
    )
    done = job("succeeded", attempt=2)
    assert inv.check_events(snap((done,), atts, events={"j1": evs})) == []
    # no restarted event (defect 6 of issue 39)
    found = inv.check_events(snap((done,), atts, events={"j1": (*evs[:3], evs[4])}))
    assert kinds(found) == {Invariant.EVENTS} and "no restarted event" in found[0].message
    # a replacement whose setup failed never ran the job: no restart to tell
    assert inv.check_events(snap((done,), atts, events={"j1": (*evs[:2], evs[4])})) == []
    # no preempted event, no final event, a preempted one after the final
    assert (
        "no event"
        in inv.check_events(snap((done,), atts, events={"j1": (evs[2], evs[3], evs[4])}))[0].message
    )
    assert (
        "no final event" in inv.check_events(snap((done,), atts, events={"j1": evs[:4]}))[0].message
    )
    late = (evs[0], evs[4], evs[1], evs[2], evs[3])
    assert (
        "after the final" in inv.check_events(snap((done,), atts, events={"j1": late}))[0].message
    )


def test_one_message_per_event_and_target() -> None:
    ev = event("failed", "job exited 1")

    def note(i: int, target: str) -> NotificationRow:
        return NotificationRow(
            id=i, event_id=ev.id, job_id="j1", target=target, event="failed", title="",
            body="", created_at=T0, state="sent", tries=1, next_try_at=T0,
        )  # fmt: skip

    ok = (note(1, "slack"), note(2, "email"))
    assert inv.check_notifications(snap(events={"j1": (ev,)}, notifications=ok)) == []
    dup = (*ok, note(3, "slack"))
    found = inv.check_notifications(snap(events={"j1": (ev,)}, notifications=dup))
    assert kinds(found) == {Invariant.NOTIFICATIONS} and "2 messages to slack" in found[0].message


def test_a_resumed_attempt_starts_from_the_newest_complete_checkpoint() -> None:
    atts = (attempt(1, "preempted"), attempt(2))
    at1 = T0 + timedelta(minutes=12)
    ck = (
        EventRow(id=next(_ids), job_id="j1", at=at1, kind="checkpoint", message="",
                 data={"checkpoint": "ckpt-00000040", "attempt": 1}),
        EventRow(id=next(_ids), job_id="j1", at=at1, kind="checkpoint", message="",
                 data={"checkpoint": "ckpt-00000080", "attempt": 1}),
    )  # fmt: skip
    good = event("first-progress", "attempt 2: runs", attempt=2, resumed_from="ckpt-00000080")
    assert inv.check_resume(snap(attempts=atts, events={"j1": (*ck, good)})) == []
    old = event("first-progress", "attempt 2: runs", attempt=2, resumed_from="ckpt-00000040")
    found = inv.check_resume(snap(attempts=atts, events={"j1": (*ck, old)}))
    assert kinds(found) == {Invariant.RESUME} and "step 80" in found[0].message
    none = event("first-progress", "attempt 2: runs", attempt=2, resumed_from=None)
    assert kinds(inv.check_resume(snap(attempts=atts, events={"j1": (*ck, none)}))) == {
        Invariant.RESUME
    }


def test_a_deterministic_jobs_result_equals_an_uninterrupted_runs() -> None:
    want = {"j1": {"digest": "abc", "steps": 100}}
    done = job("succeeded", result={"digest": "abc", "steps": 100, "extra": 1})
    assert inv.check_results(snap((done,), expected_results=want)) == []
    wrong = job("succeeded", result={"digest": "abd", "steps": 100})
    assert kinds(inv.check_results(snap((wrong,), expected_results=want))) == {Invariant.RESULT}


def test_a_clean_snapshot_passes_every_check() -> None:
    atts = (attempt(1, "preempted", cost_usd=0.1, ended_at=T0 + timedelta(minutes=15)), attempt(2))
    s = snap(
        (job(attempt=2, spent_usd=0.1),),
        atts,
        (
            row("i-1", "preempted", "terminated", ended_at=T0 + timedelta(minutes=15)),
            row("i-2", attempt=2),
        ),
        events={"j1": (event("preempted", "", instance="i-1"), event("restarted", "", attempt=2))},
        cloud=(cloud("i-2", 2),),
    )
    assert inv.run_checks(s) == []


# -- the store and the command -----------------------------------------------------------------


def _stored(tmp_path: Path) -> Store:
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    j = job("succeeded", provider_options={"state_dir": str(tmp_path / "sim"), "idle_exit_s": 30})
    with store.session() as s:
        s.add(j)
    store.add_attempt(attempt(1, "ended", ended_at=T0 + timedelta(minutes=30)))
    # the row a terminated instance is left with when the batched upsert runs after the end
    store.upsert_instance(row("i-1"))
    store.add_event("j1", "succeeded", "job succeeded", at=T0 + timedelta(minutes=30))
    return store


def test_the_per_pass_check_records_one_event_per_job_and_invariant(tmp_path: Path) -> None:
    store = _stored(tmp_path)
    now = T0 + timedelta(hours=1)
    found = inv.check_pass(store, ["j1"], now)
    # a live row of a finished job, which is also a live row of an ended attempt
    assert kinds(found) == {Invariant.FINAL_JOB_LIVE, Invariant.ENDED_ROW}
    again = inv.check_pass(store, ["j1"], now + timedelta(seconds=5))
    assert again == found
    told = [e for e in store.events("j1") if e.kind == "invariant"]
    assert sorted(e.data["invariant"] for e in told) == ["ended-row", "final-job-live"]
    assert {e.at for e in told} == {now}  # the caller's clock, once per invariant
    assert inv.check_pass(store, [], now) == []


def test_the_check_command(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    from click.testing import CliRunner

    from providers.sim import SimProvider
    from provisioner.cli import cli as main

    store = _stored(tmp_path)
    url = store.url
    run = CliRunner().invoke
    request.addfinalizer(lambda: SimProvider(tmp_path / "sim").shutdown_server())
    bad = run(main, ["check", "j1", "--store", url, "--json"])
    assert bad.exit_code == 1, bad.output
    doc = json.loads(bad.output)
    assert doc["jobs"] == 1 and {v["invariant"] for v in doc["violations"]} >= {"final-job-live"}
    # fixed rows: clean
    store.end_instances("aws", ["i-1"], T0 + timedelta(minutes=30), "job finished")
    with store.session() as s:
        r = s.get(InstanceRow, ("aws", "i-1"))
        assert r is not None
        r.raw_state = "terminated"
    ok = run(main, ["check", "--all", "--store", url])
    assert ok.exit_code == 0, ok.output  # the sim listed: nothing of the job's there
    assert "every invariant holds" in ok.output
    assert run(main, ["check", "--store", url]).exit_code == 2  # neither JOB nor --all
    assert run(main, ["check", "j1", "--all", "--store", url]).exit_code == 2
    assert run(main, ["check", "nope", "--store", url]).exit_code == 3
    assert run(main, ["check", "--help"]).exit_code == 0


def test_a_snapshot_read_with_an_event_feed_equals_a_fresh_read(tmp_path: Path) -> None:
    """The seeded run keeps an EventFeed between snapshots (only newer events are read): each
    snapshot is the same as one read from scratch, for every job or one."""
    store = _stored(tmp_path)
    other = job("running", id="j2")
    with store.session() as s:
        s.add(other)
    feed = inv.EventFeed()

    def same(a: Snapshot, b: Snapshot) -> None:
        assert [j.id for j in a.jobs] == [j.id for j in b.jobs]
        assert {k: [x.attempt for x in v] for k, v in a.attempts.items()} == {
            k: [x.attempt for x in v] for k, v in b.attempts.items()
        }
        assert sorted(r.instance_id for r in a.instances) == sorted(
            r.instance_id for r in b.instances
        )
        assert {k: [(e.id, e.kind, e.at) for e in v] for k, v in a.events.items()} == {
            k: [(e.id, e.kind, e.at) for e in v] for k, v in b.events.items()
        }
        assert [n.id for n in a.notifications] == [n.id for n in b.notifications]

    now = T0 + timedelta(hours=1)
    first = inv.snapshot(store, (), now, feed=feed)
    same(first, inv.snapshot(store, (), now))
    assert [e.kind for e in first.events["j1"]] == ["succeeded"] and first.events["j2"] == ()
    store.add_event("j2", "launched", "attempt 1", at=now)
    store.add_event("j1", "invariant", "[x] y", at=now)
    again = inv.snapshot(store, (), now, feed=feed)
    same(again, inv.snapshot(store, (), now))
    assert [e.kind for e in again.events["j1"]] == ["succeeded", "invariant"]
    assert [e.kind for e in again.events["j2"]] == ["launched"]
    one = inv.snapshot(store, (), now, job_ids=["j2", "missing"])
    assert [j.id for j in one.jobs] == ["j2"] and list(one.events) == ["j2"]
    assert [e.kind for e in one.events["j2"]] == ["launched"]
    assert one.instances == () and one.attempts == {"j2": ()}
    assert inv.run_checks(again) == inv.run_checks(inv.snapshot(store, (), now))


def test_the_daemon_checks_the_jobs_its_pass_changed_and_all_of_them_each_minute(
    tmp_path: Path,
) -> None:
    from provisioner.control.jobpass.state import JobMemo
    from provisioner.control.reconciler import CHECK_ALL_EVERY, Reconciler

    rec = Reconciler(Store(f"sqlite:///{tmp_path / 's.db'}"), pass_interval_s=5.0)
    try:
        steady = [(f"s{i}", JobMemo(steady=("as last pass",))) for i in range(60)]
        held = [*steady, ("busy", JobMemo())]
        minute = int(CHECK_ALL_EVERY.total_seconds())
        checked: dict[str, list[int]] = {}
        for t in range(0, 3 * minute, 5):  # a pass every 5 s for three minutes
            got = rec._to_check(held, T0 + timedelta(seconds=t))
            assert got[-1] == "busy"  # changed by its pass: checked after every pass
            assert len(got) < len(held) // 2  # the steady ones spread over the passes
            for jid in got:
                checked.setdefault(jid, []).append(t)
        for jid, _ in steady:  # each steady job once a minute, a minute apart
            times = checked[jid]
            assert len(times) == 3 and all(b - a == minute for a, b in itertools.pairwise(times))
        assert len(checked["busy"]) == 3 * minute // 5
        # a pass that comes a whole period late checks every job
        late = T0 + timedelta(seconds=3 * minute) + CHECK_ALL_EVERY
        assert rec._to_check(held, late) == [jid for jid, _ in held]
    finally:
        rec.close()
