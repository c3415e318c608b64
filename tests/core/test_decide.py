from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from policies import parse_policy
from policies.model import Policy
from provisioner.core.decide import (
    Action,
    AttemptView,
    CapacityError,
    CoolDown,
    Fail,
    JobView,
    Launch,
    Observations,
    Terminate,
    Wait,
    decide,
    region_allowed,
    spot_cap,
)
from provisioner.core.models import (
    TAG_ATTEMPT,
    TAG_JOB,
    Instance,
    InstanceState,
    Interruption,
    Market,
    Offer,
    Placement,
)

T0 = datetime(2026, 12, 1, 0, 0, tzinfo=UTC)
NOW = T0 + timedelta(hours=10)


def policy(extra: str = "") -> Policy:
    base = "name: t\njob:\n  compute_hours: 48\ndeadline: 60h\n"
    return parse_policy(base + extra)


def offer(
    zone: str = "us-east-1a",
    region: str = "us-east-1",
    provider: str = "aws",
    od: float = 3.06,
    spot: float | None = 0.97,
    gpus: int = 1,
) -> Offer:
    return Offer(provider, region, zone, "p3.2xlarge", "V100", gpus, 8, 61, od, spot)


def place(
    o: Offer, market: Market = Market.SPOT, rank: int = 1, cap: float | None = None
) -> Placement:
    price = o.price_for(market)
    assert price is not None
    return Placement(o, market, price, cap, score=float(rank), rank=rank)


def cands(*zones: str) -> tuple[Placement, ...]:
    out = [place(offer(z), Market.SPOT, i + 1) for i, z in enumerate(zones)]
    out.append(place(offer(zones[0]), Market.ON_DEMAND, len(out) + 1))
    return tuple(out)


def job(p: Policy | None = None, **kw: object) -> JobView:
    kw.setdefault("changeover_h", 0.2)
    kw.setdefault("step_h", 0.1)
    return JobView.new("j1", p or policy(), T0, **kw)


def instance(
    i: int,
    zone: str = "us-east-1a",
    market: Market = Market.SPOT,
    state: InstanceState = InstanceState.RUNNING,
) -> Instance:
    return Instance(
        f"i-{i}",
        "aws",
        "us-east-1",
        zone,
        "p3.2xlarge",
        market,
        state,
        tags={TAG_JOB: "j1", TAG_ATTEMPT: str(i)},
    )


def running(
    i: int, zone: str = "us-east-1a", market: Market = Market.SPOT, at: datetime = T0
) -> tuple[AttemptView, Instance]:
    p = place(offer(zone), market)
    return AttemptView(i, p, f"i-{i}", InstanceState.RUNNING, launched_at=at), instance(
        i, zone, market
    )


def kinds(actions: list[Action]) -> list[str]:
    return [type(a).__name__ for a in actions]


def test_launches_the_best_spot_with_a_reason() -> None:
    out = decide(job(), Observations(candidates=cands("us-east-1a", "us-east-1b")), NOW)
    assert kinds(out) == ["Launch"]
    launch = out[0]
    assert isinstance(launch, Launch)
    assert launch.placement.market is Market.SPOT and launch.placement.offer.zone == "us-east-1a"
    assert (
        launch.attempt == 1 and "spot aws:us-east-1a" in launch.reason and "slack" in launch.reason
    )


def test_capacity_error_moves_on_to_the_next_offer() -> None:
    err = CapacityError("aws", "us-east-1a", "p3.2xlarge", Market.SPOT, NOW)
    obs = Observations(candidates=cands("us-east-1a", "us-east-1b"), capacity_errors=(err,))
    out = decide(job(), obs, NOW)
    assert isinstance(out[0], Launch) and out[0].placement.offer.zone == "us-east-1b"


def test_no_spot_anywhere_and_plenty_of_slack_waits() -> None:
    errs = tuple(
        CapacityError("aws", z, "p3.2xlarge", Market.SPOT, NOW)
        for z in ("us-east-1a", "us-east-1b")
    )
    start = Observations(candidates=cands("us-east-1a", "us-east-1b"), capacity_errors=errs)
    assert kinds(decide(job(), start, T0)) == ["Wait"]  # 12 h of slack: wait for spot


def test_deadline_near_launches_on_demand() -> None:
    errs = (CapacityError("aws", "us-east-1a", "p3.2xlarge", Market.SPOT, NOW),)
    tight = job(work_done_h=0.0, deadline=NOW + timedelta(hours=48.3))
    out = decide(tight, Observations(candidates=cands("us-east-1a"), capacity_errors=errs), NOW)
    assert isinstance(out[-1], Launch) and out[-1].placement.market is Market.ON_DEMAND


def test_running_instance_is_kept_without_a_second_launch() -> None:
    cur, inst = running(1)
    out = decide(
        job(current=cur, attempt=1),
        Observations(instances=(inst,), candidates=cands("us-east-1a")),
        NOW,
    )
    assert kinds(out) == ["Wait"] and "staying on spot" in out[0].reason


def test_two_live_instances_terminate_the_extra() -> None:
    cur, inst = running(2)
    stray = instance(1)
    obs = Observations(instances=(stray, inst), candidates=cands("us-east-1a"))
    out = decide(job(current=cur, attempt=2), obs, NOW)
    assert [a.instance_id for a in out if isinstance(a, Terminate)] == ["i-1"]
    assert not any(isinstance(a, Launch) for a in out)


def test_preemption_cools_the_zone_and_relaunches_elsewhere() -> None:
    p = place(offer("us-east-1a"))
    cur = AttemptView(1, p, "i-1", InstanceState.PREEMPTED, launched_at=T0, ended_at=NOW)
    gone = instance(1, state=InstanceState.PREEMPTED)
    out = decide(
        job(current=cur, attempt=1, restarts=0),
        Observations(instances=(gone,), candidates=cands("us-east-1a", "us-east-1b")),
        NOW,
    )
    cool = [a for a in out if isinstance(a, CoolDown)]
    assert cool and (cool[0].location, cool[0].until) == ("us-east-1a", NOW + timedelta(minutes=30))
    assert isinstance(out[-1], Launch) and out[-1].placement.offer.zone == "us-east-1b"
    # the cooldown already recorded: not emitted again, the zone still avoided
    again = decide(
        job(current=cur, attempt=1, cooldowns={("aws", "us-east-1a"): NOW + timedelta(minutes=30)}),
        Observations(instances=(gone,), candidates=cands("us-east-1a")),
        NOW + timedelta(minutes=5),
    )
    assert not any(isinstance(a, CoolDown) for a in again)
    assert not any(isinstance(a, Launch) and a.placement.market is Market.SPOT for a in again)


def test_interruption_notice_waits_for_the_checkpoint() -> None:
    """A notice too short for a replacement to boot (GCP's, Azure's 30 s): wait it out (a
    longer one is overlapped: tests/core/test_decide_overlap.py)."""
    cur, inst = running(1)
    note = Interruption(
        "i-1", "aws", "us-east-1a", "notice", NOW, deadline=NOW + timedelta(seconds=30)
    )
    out = decide(
        job(current=cur, attempt=1),
        Observations(instances=(inst,), interruptions=(note,), candidates=cands("us-east-1a")),
        NOW,
    )
    assert isinstance(out[-1], Wait) and out[-1].until == NOW + timedelta(seconds=30)
    assert not any(isinstance(a, Launch | Terminate) for a in out)


def test_finish_terminates_and_finishes() -> None:
    cur, inst = running(1)
    out = decide(
        job(current=cur, attempt=1, work_done_h=48.0), Observations(instances=(inst,)), NOW
    )
    assert kinds(out) == ["Terminate", "Finish"]


def test_restarts_exhausted() -> None:
    p = policy("restart:\n  max_restarts: 2\n")
    out = decide(job(p, restarts=2, attempt=3), Observations(candidates=cands("us-east-1a")), NOW)
    assert kinds(out) == ["Fail"] and "restarts" in out[0].reason
    cur, inst = running(3, market=Market.ON_DEMAND)
    kept = decide(
        job(p, restarts=2, attempt=3, current=cur),
        Observations(instances=(inst,), candidates=cands("us-east-1a")),
        NOW,
    )
    assert not any(isinstance(a, Launch) for a in kept)


@pytest.mark.parametrize(("mode", "last"), [("stop", Fail), ("pause", Wait)])
def test_budget_exhausted(mode: str, last: type) -> None:
    p = policy(f"budget:\n  max_total: 100\n  on_exhausted: {mode}\n")
    cur, inst = running(1)
    out = decide(
        job(p, spent_usd=100.0, current=cur, attempt=1),
        Observations(instances=(inst,), candidates=cands("us-east-1a")),
        NOW,
    )
    assert isinstance(out[0], Terminate) and isinstance(out[-1], last)


def test_no_launch_that_would_break_the_budget() -> None:
    p = policy(
        "budget:\n  max_total: 60\n"
    )  # 48 h left: spot 48.2 h * 0.97 fits, on-demand does not
    out = decide(job(p, spent_usd=10.0), Observations(candidates=cands("us-east-1a")), NOW)
    assert isinstance(out[-1], Launch) and out[-1].placement.market is Market.SPOT
    broke = decide(job(p, spent_usd=20.0), Observations(candidates=cands("us-east-1a")), NOW)
    assert kinds(broke) == ["Fail"]


def test_outside_the_time_windows_stops_and_waits_for_the_next() -> None:
    p = policy("windows:\n  - cron: '0 22 * * *'\n    duration: 8h\n")
    cur, inst = running(1)
    noon = T0 + timedelta(hours=12)
    out = decide(
        job(p, current=cur, attempt=1),
        Observations(instances=(inst,), candidates=cands("us-east-1a")),
        noon,
    )
    assert kinds(out) == ["Terminate", "Wait"]
    assert out[-1].until == T0 + timedelta(hours=22)  # type: ignore[union-attr]


def test_on_demand_policy_and_spot_policy() -> None:
    od = decide(
        job(policy("market: on-demand\n")), Observations(candidates=cands("us-east-1a")), NOW
    )
    assert isinstance(od[-1], Launch) and od[-1].placement.market is Market.ON_DEMAND
    errs = (CapacityError("aws", "us-east-1a", "p3.2xlarge", Market.SPOT, NOW),)
    late = NOW + timedelta(hours=49)  # past the point where on-demand would be needed
    sp = decide(
        job(policy("market: spot\n")),
        Observations(candidates=cands("us-east-1a"), capacity_errors=errs),
        late,
    )
    assert not any(isinstance(a, Launch) for a in sp)


def test_strategy_by_name() -> None:
    errs = (CapacityError("aws", "us-east-1a", "p3.2xlarge", Market.SPOT, NOW),)
    obs = Observations(candidates=cands("us-east-1a"), capacity_errors=errs)
    assert kinds(decide(job(), obs, NOW, strategy="greedy")) == ["Wait"]
    assert isinstance(decide(job(), obs, NOW, strategy="on-demand")[-1], Launch)
    with pytest.raises(ValueError, match="unknown strategy"):
        decide(job(), obs, NOW, strategy="nope")


def test_rules_shared_with_the_planner() -> None:
    eu = policy("residency:\n  allow: [EU]\n")
    assert region_allowed(eu, "aws", "eu-central-1") and not region_allowed(eu, "aws", "us-east-1")
    assert not region_allowed(
        policy("residency:\n  deny_regions: ['aws:us-east-1']\n"), "aws", "us-east-1"
    )
    capped = policy(
        "bid_cap:\n  max_spot_price_per_gpu_hour: 0.5\n  max_fraction_of_on_demand: 0.4\n"
    )
    assert spot_cap(capped, place(offer(gpus=2), cap=2.0)) == pytest.approx(1.0)
    assert spot_cap(capped, place(offer(od=2.0), cap=None)) == pytest.approx(0.5)


# -- the invariants, on random situations ------------------------------------------------------

REGIONS = [
    ("aws", "us-east-1", "us-east-1a"),
    ("aws", "eu-central-1", "eu-central-1a"),
    ("gcp", "europe-west4", ""),
]
POLICY_BITS = [  # one option per top-level key
    [
        "",
        "bid_cap:\n  max_spot_price_per_hour: 0.8\n",
        "bid_cap:\n  max_fraction_of_on_demand: 0.3\n",
    ],
    ["", "budget:\n  max_price_per_hour: 2.5\n", "budget:\n  max_total: 90\n"],
    ["", "residency:\n  allow: [EU]\n"],
    ["", "market: spot\n", "market: on-demand\n"],
    ["", "restart:\n  max_restarts: 3\n  zone_cooldown: 1h\n"],
]


@hs.composite
def situations(draw: hs.DrawFn) -> tuple[JobView, Observations, datetime]:
    p = policy("".join(draw(hs.sampled_from(group)) for group in POLICY_BITS))
    placements = []
    for rank in range(draw(hs.integers(0, 6))):
        prov, region, zone = draw(hs.sampled_from(REGIONS))
        market = draw(hs.sampled_from([Market.SPOT, Market.ON_DEMAND]))
        od = draw(hs.floats(0.5, 5.0))
        spot = draw(hs.floats(0.1, 3.0))
        o = offer(zone, region, prov, od, spot)
        cap = draw(hs.one_of(hs.none(), hs.floats(0.1, 3.0)))
        price = draw(hs.floats(0.1, 5.0))  # a stale or wrong placement price: re-checked
        placements.append(Placement(o, market, price, cap, score=float(rank), rank=rank + 1))
    errors = tuple(
        CapacityError(pl.offer.provider, pl.offer.location, pl.offer.instance_type, pl.market, NOW)
        for pl in placements
        if draw(hs.booleans()) and draw(hs.booleans())
    )
    n_alive = draw(hs.sampled_from([0, 0, 0, 1, 2]))
    insts = tuple(
        instance(i + 1, market=draw(hs.sampled_from([Market.SPOT, Market.ON_DEMAND])))
        for i in range(n_alive)
    )
    cur = None
    with_current = draw(hs.booleans())
    if insts and with_current:
        last = insts[-1]
        cur = AttemptView(
            n_alive, place(offer(last.zone), last.market), last.id, last.state, launched_at=T0
        )
    cooldowns = {("aws", "us-east-1a"): NOW + timedelta(minutes=10)} if draw(hs.booleans()) else {}
    view = job(
        p,
        work_done_h=draw(hs.floats(0.0, 47.0)),
        restarts=draw(hs.integers(0, 5)),
        attempt=n_alive,
        spent_usd=draw(hs.floats(0.0, 80.0)),
        current=cur,
        cooldowns=cooldowns,
    )
    now = NOW + timedelta(hours=draw(hs.floats(0.0, 20.0)))
    return (
        view,
        Observations(instances=insts, candidates=tuple(placements), capacity_errors=errors),
        now,
    )


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(situations())
def test_launch_invariants(sit: tuple[JobView, Observations, datetime]) -> None:
    j, obs, now = sit
    p = j.policy
    out = decide(j, obs, now)
    assert out, "decide always says something"
    launches = [a for a in out if isinstance(a, Launch)]
    assert len(launches) <= 1
    alive = {i.id for i in obs.instances if i.state.alive}
    for a in out:
        if isinstance(a, Terminate):
            alive.discard(a.instance_id)
        if isinstance(a, Launch):  # made before break: only beside the one it replaces
            assert alive <= {a.replaces}, "a Launch beside an instance it does not replace"
            alive.add(f"new-{a.attempt}")
    assert len(alive) <= 2, "never a third instance"
    if len([i for i in obs.instances if i.state.alive]) >= 2:  # one goes, or hands over
        handing = any(isinstance(a, Wait) and "handing over" in a.reason for a in out)
        assert handing or sum(isinstance(a, Terminate) for a in out) >= 1
    busy = {(e.provider, e.location, e.instance_type, e.market) for e in obs.capacity_errors}
    for a in launches:
        pl, o = a.placement, a.placement.offer
        price = max(pl.price_per_hour, o.price_for(pl.market) or 0.0)
        assert j.restarts < p.restart.max_restarts
        assert region_allowed(p, o.provider, o.region)
        assert (o.provider, o.location, o.instance_type, pl.market) not in busy
        if p.budget.max_price_per_hour is not None:
            assert price <= p.budget.max_price_per_hour + 1e-9
        if p.budget.max_total is not None:
            assert j.spent_usd + price * (48.0 - j.work_done_h) <= p.budget.max_total + 1e-6
        if pl.market is Market.SPOT:
            assert p.allows_spot
            original = next(c for c in obs.candidates if c.offer is o and c.market is pl.market)
            assert price <= spot_cap(p, original) + 1e-9
            if pl.bid_cap_per_hour is None:  # no cap at all: the market price is paid
                assert spot_cap(p, original) == float("inf")
            else:
                assert price <= pl.bid_cap_per_hour + 1e-9
            assert j.cooldowns.get(("aws", o.location), now) <= now
        else:
            assert p.allows_on_demand


def test_without_a_deadline_spot_else_on_demand() -> None:
    loose = JobView("j1", parse_policy("name: t\n"), T0, changeover_h=0.2, step_h=0.1)
    errs = (CapacityError("aws", "us-east-1a", "p3.2xlarge", Market.SPOT, NOW),)
    down = decide(loose, Observations(candidates=cands("us-east-1a"), capacity_errors=errs), NOW)
    assert isinstance(down[-1], Launch) and down[-1].placement.market is Market.ON_DEMAND
    up = decide(loose, Observations(candidates=cands("us-east-1a")), NOW)
    assert isinstance(up[-1], Launch) and up[-1].placement.market is Market.SPOT
    # on on-demand, back to spot only once capacity has lasted the break-even time
    cur, inst = running(1, market=Market.ON_DEMAND)
    on_od = JobView("j1", parse_policy("name: t\n"), T0, current=cur, attempt=1)
    fresh = Observations(
        instances=(inst,),
        candidates=cands("us-east-1a"),
        spot_up_since={("aws", "us-east-1a"): NOW},
    )
    assert kinds(decide(on_od, fresh, NOW)) == ["Wait"]
    old = Observations(
        instances=(inst,),
        candidates=cands("us-east-1a"),
        spot_up_since={("aws", "us-east-1a"): NOW - timedelta(hours=1)},
    )
    assert kinds(decide(on_od, old, NOW)) == ["Launch"]  # made before break
    waits = decide(
        loose,
        Observations(candidates=cands("us-east-1a"), capacity_errors=errs),
        NOW,
        strategy="greedy",
    )
    assert kinds(waits) == ["Wait"]
