"""The look schedule and the launch-call budget (provisioner/core/looks.py), alone and through
both drivers: the daemon's reconciler on the sim provider and the simulator's engine (and the
vectorised replay) back off alike after repeated refusals, and never exceed the hourly budget."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from policies import parse_policy
from provisioner.core import looks as lk
from provisioner.core import overlap as ov
from provisioner.core.billing import (
    PER_SECOND,
    PER_SECOND_60S_MINIMUM,
    PER_STARTED_MINUTE,
    Billing,
)
from provisioner.core.decide import Launch, Observations, Wait, decide
from provisioner.core.models import Instance, Market
from provisioner.core.strategies import get_strategy
from provisioner.core.views import JobView, ZoneLooks
from provisioner.simulate.engine import World, run_window
from provisioner.simulate.replay import replay
from tests.e2e.test_equivalence import A, B, job
from tests.equivalence_util import START, Case, explain, run_daemon, run_engine

T0 = datetime(2026, 1, 1, tzinfo=UTC)
LOC = ("aws", A)


def test_refusals_in_a_row_double_the_hold_up_to_the_cap_and_a_launch_resets_it() -> None:
    assert [lk.hold(n) for n in (1, 2, 3, 4, 5, 9)] == [
        timedelta(minutes=m) for m in (5, 10, 20, 40, 40, 40)
    ]
    assert list(lk.hold_s(np.asarray([0, 1, 2, 3, 4, 50]))) == [300, 300, 600, 1200, 2400, 2400]
    events = [(T0 + timedelta(minutes=m), LOC, "refused") for m in (0, 6, 12)]
    sched = lk.schedule(events)
    assert sched[LOC] == ZoneLooks(3, T0 + timedelta(minutes=12))
    assert lk.held(sched, LOC, T0 + timedelta(minutes=32))  # 20 min, its end included
    assert not lk.held(sched, LOC, T0 + timedelta(minutes=32, seconds=1))
    up = lk.schedule([*events, (T0 + timedelta(minutes=13), LOC, "up")])
    assert up[LOC].refused == 0 and not lk.held(up, LOC, T0 + timedelta(minutes=14))
    later = (T0 + timedelta(minutes=20), LOC, "refused")
    shuffled = lk.schedule([later, (T0 + timedelta(minutes=13), LOC, "up"), *events])
    assert shuffled[LOC] == ZoneLooks(1, later[0])  # in time order: one since the launch
    assert lk.schedule([(T0, LOC, "lost"), (T0, LOC, "stop")]) == {}
    # several instance types refused there in one pass: one look, one refusal in the row
    assert lk.schedule([(T0, LOC, "refused")] * 5)[LOC] == ZoneLooks(1, T0)


def test_one_default_budget_for_the_policy_the_core_and_the_simulator() -> None:
    from policies.model import Restart
    from provisioner.simulate.scenario import Scenario

    sc = Scenario(work_s=3600.0, deadline_s=7200.0, overhead_s=720.0, step_s=360.0)
    assert Restart().launch_calls_per_hour == lk.CALLS_PER_HOUR == sc.launch_calls_per_hour


def test_the_budget_counts_every_call_for_an_hour_per_cloud() -> None:
    calls = [("aws", T0 + timedelta(minutes=m)) for m in (0, 10, 20)] + [("gcp", T0)]
    now = T0 + timedelta(minutes=30)
    assert lk.budget_spent_until(calls, "aws", 4, now) is None
    assert lk.budget_spent_until(calls, "aws", 3, now) == T0 + timedelta(hours=1)
    assert lk.budget_spent_until(calls, "aws", 2, now) == T0 + timedelta(minutes=70)
    assert lk.budget_spent_until(calls, "gcp", 2, now) is None
    assert lk.budget_spent_until(calls, "aws", 3, T0 + timedelta(hours=1)) is None  # aged out
    assert lk.recent_calls(calls, T0 + timedelta(minutes=65)) == (
        ("aws", T0 + timedelta(minutes=10)),
        ("aws", T0 + timedelta(minutes=20)),
    )
    assert lk.tight(5, 10) and not lk.tight(4, 10)


def _case(cap: int) -> Case:
    """Spot in A until step 10, then none anywhere: the job goes to on-demand and, from it,
    looks at spot in A and B (both refused) whenever the strategy wants spot there."""
    policy = job(2, "3h", cooldown=f"0s\n  launch_calls_per_hour: {cap}")
    return Case(f"backoff-{cap}", policy, {A: "U10 D", B: "D"})


def _engine_refusals(case: Case) -> tuple[int, int]:
    sc, avail = case.scenario(), case.avail()
    row = run_window(
        parse_policy(case.policy), avail, sc, World(zones=list(case.zones)), start=START
    )
    fast = replay(get_strategy("provisioner"), avail[None], sc)
    return int(row["refusals"]), int(fast.refusals[0])


def _calls_per_hour(run: object, steps_per_hour: int) -> int:
    steps = sorted(e.step for e in [*run.effects, *run.refused] if e.kind == "launch")  # type: ignore[attr-defined]
    return max(
        (sum(1 for s in steps if k <= s < k + steps_per_hour) for k in range(steps[-1] + 1)),
        default=0,
    )


@pytest.mark.slow  # two daemon runs on the sim server (seconds)
def test_repeated_refusals_back_off_alike_in_the_daemon_and_the_engine(tmp_path: Path) -> None:
    tight, free = _case(10), _case(60)
    runs = {c.name: (c, run_engine(c), run_daemon(c, tmp_path / c.name)) for c in (tight, free)}
    for name, (case, engine, daemon) in runs.items():
        why = explain(engine, daemon)
        assert not daemon.notes, why
        assert daemon.effects == engine.effects and daemon.outcome == engine.outcome, why
        assert daemon.outcome[0] == "succeeded", why
        assert max(daemon.live) <= 2 and daemon.left == 0, (name, daemon.live, daemon.left)
        # the same refused looks in the engine, the replay and the daemon
        assert _engine_refusals(case) == (len(daemon.refused), len(daemon.refused)), why
    steps_per_hour = round(3600 / tight.step_s)
    assert _calls_per_hour(runs[tight.name][2], steps_per_hour) <= 10
    assert _calls_per_hour(runs[free.name][2], steps_per_hour) > 10  # the cap is what bounds it

    def looks_from_od(run: object) -> list[int]:
        od = next(e.step for e in run.effects if e.market == "on-demand")  # type: ignore[attr-defined]
        return sorted({e.step for e in run.refused if e.step > od and e.zone == A})  # type: ignore[attr-defined]

    held, every = looks_from_od(runs[tight.name][2]), looks_from_od(runs[free.name][2])
    assert len(held) < len(every), (held, every)
    # without pressure on the budget a look every other step (the 5-minute memory); with it,
    # a zone refused three times in a row is held for 20 minutes (more than three steps)
    assert set(np.diff(every)) == {2}, every
    assert max(np.diff(held)) > 3, held


# -- what a look costs: the clouds' billing rules (overlap.overlap_usd, overlap.look_pays) ----


def _od_job(left_h: float, billing: dict[str, Billing] | None = None) -> tuple[JobView, Instance]:
    from tests.core.test_decide import NOW, job, running

    cur, inst = running(1, market=Market.ON_DEMAND, at=NOW - timedelta(hours=1, seconds=30))
    inst = replace(inst, launched_at=cur.launched_at, price_per_hour=3.06)
    view = job(
        current=cur, attempt=1, work_total_h=10.0, work_done_h=10.0 - left_h, billing=billing or {}
    )
    return view, inst


def test_a_look_costs_the_old_instances_billed_tail_and_the_new_ones_minimum() -> None:
    from tests.core.test_decide import NOW, offer, place

    spot = place(offer("us-east-1b"), Market.SPOT)
    price = spot.price_per_hour
    view, od = _od_job(5.0)
    assert ov.overlap_usd(view, od) == pytest.approx(3.06 * 0.2)  # per second, no minimum
    assert ov.overlap_usd(view, od, NOW, spot) == pytest.approx(3.06 * 0.2)
    aws, _ = _od_job(5.0, {"aws": PER_SECOND_60S_MINIMUM})
    # per second: no tail at the handover; a new instance lost at once is billed 60 s
    assert ov.overlap_usd(aws, od, NOW, spot) == pytest.approx(3.06 * 0.2 + price * 60 / 3600)
    minute, _ = _od_job(5.0, {"aws": PER_STARTED_MINUTE})
    # launched 1 h 30 s ago: at the handover (12 min on) 30 s of a started minute are left
    want = 3.06 * (720 + 30) / 3600 + price * 60 / 3600
    assert ov.overlap_usd(minute, od, NOW, spot) == pytest.approx(want)


def test_a_look_from_on_demand_is_made_only_where_the_work_left_pays_for_it() -> None:
    from tests.core.test_decide import NOW, cands

    # saving (3.06 - spot) per hour left against 3.06 * 0.2 h of overlap and spot's minimum
    for left_h, pays in ((5.0, True), (0.25, False)):
        view, od = _od_job(left_h, {"aws": PER_SECOND_60S_MINIMUM})
        spot = cands("us-east-1b")[0]
        assert ov.look_pays(view, od, spot, NOW) is pays
        out = decide(view, Observations(instances=(od,), candidates=cands("us-east-1b")), NOW)
        launches = [a for a in out if isinstance(a, Launch)]
        if pays:
            assert len(launches) == 1 and launches[0].replaces == od.id, out
        else:
            assert not launches and isinstance(out[-1], Wait), out
            assert "cost more than it saves" in out[-1].reason
    # a move the strategy needs (spot to on-demand) is not weighed
    view, od = _od_job(0.1)
    assert ov.look_pays(view, replace(od, market=Market.SPOT), cands("us-east-1b")[-1], NOW)


def test_the_engine_and_the_replay_weigh_a_look_alike() -> None:
    """Spot back in A shortly before the work is done: a look from on-demand then would not
    pay; both drivers pass it over (and make the earlier, paying ones) at the same steps."""
    from provisioner.simulate.scenario import Scenario

    for rule in (PER_SECOND, PER_SECOND_60S_MINIMUM, PER_STARTED_MINUTE):
        sc = Scenario(
            work_s=2 * 3600.0, deadline_s=3 * 3600.0, overhead_s=720.0, step_s=360.0, billing=rule
        )
        steps = int(np.ceil((sc.deadline_s + sc.work_s) / sc.step_s)) + 4
        avail = np.zeros((30, steps, 2), dtype=bool)
        for w in range(len(avail)):  # spot back in A at step 10 + w, never in B
            avail[w, 10 + w :, 0] = True
        fast = replay(get_strategy("provisioner"), avail, sc)
        pol = parse_policy(job(2, "3h"))
        passed = 0
        for w in range(len(avail)):
            row = run_window(pol, avail[w], sc, World(zones=[A, B]), start=START)
            got = (row["cost"], row["launches"], row["refusals"])
            want = (fast.cost[w], fast.launches[w], fast.refusals[w])
            assert got == pytest.approx(want), (rule, w)
            passed += row["launches"] == 1 and row["spot_hours"] == 0  # on on-demand to the end
        assert passed > 0  # some windows saw spot back too late for a look to pay


def test_decide_waits_once_the_hour_s_calls_are_spent_keeping_what_runs() -> None:
    from tests.core.test_decide import NOW, cands, job, policy, running

    pol = policy("restart:\n  launch_calls_per_hour: 3\n")
    calls = tuple(("aws", NOW - timedelta(minutes=m)) for m in (50, 30, 10))
    obs = Observations(candidates=cands("us-east-1a", "us-east-1b"))
    out = decide(job(pol, launch_calls=calls), obs, NOW)
    assert len(out) == 1 and isinstance(out[0], Wait), out
    assert out[0].until == NOW + timedelta(minutes=10)  # the oldest call an hour old
    assert "launch_calls_per_hour" in out[0].reason
    # a call of another cloud, or one over an hour old, does not count
    other = (("gcp", NOW), *calls[1:], ("aws", NOW - timedelta(minutes=61)))
    assert any(isinstance(a, Launch) for a in decide(job(pol, launch_calls=other), obs, NOW))
    # spent while on-demand works: the look waits, on-demand runs on untouched
    cur, od = running(1, market=Market.ON_DEMAND, at=NOW - timedelta(hours=2))
    view = job(pol, launch_calls=calls, current=cur, attempt=1, work_done_h=40.0)
    out = decide(view, Observations(instances=(od,), candidates=obs.candidates), NOW)
    assert len(out) == 1 and isinstance(out[0], Wait), out
    assert "launch_calls_per_hour" in out[0].reason  # the strategy wanted spot: a look
    free = decide(replace(view, launch_calls=()), Observations((od,), (), obs.candidates), NOW)
    assert [a.replaces for a in free if isinstance(a, Launch)] == [od.id], free
