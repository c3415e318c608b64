"""decide() on held capacity: a usable reservation before spot and on-demand, a job on one
stays, and a block's end is a known notice: the job moves before it, never stays past it."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from provisioner.core.decide import (
    AttemptView,
    Launch,
    Observations,
    Terminate,
    Wait,
    decide,
)
from provisioner.core.models import (
    InstanceState,
    Market,
    Placement,
    Reservation,
    ReservationKind,
)
from provisioner.core.reserved import block_tags, notice_at, usable, usable_end
from tests.core.test_decide import NOW, T0, cands, instance, job, offer, policy

RESERVED_FIRST = "market: reserved-then-spot-then-on-demand\n"


def block(
    ends: timedelta | None = timedelta(hours=20),
    free: int = 1,
    rid: str = "cb-1",
    starts: timedelta | None = None,
) -> Reservation:
    return Reservation(
        "aws",
        rid,
        "us-east-1",
        "us-east-1c",
        "p3.2xlarge",
        ReservationKind.ON_DEMAND if ends is None else ReservationKind.CAPACITY_BLOCK,
        total=2,
        free=free,
        starts_at=None if starts is None else NOW + starts,
        ends_at=None if ends is None else NOW + ends,
        held_usd_per_hour=3.06,
    )


def held(r: Reservation, rank: int = 1) -> Placement:
    return Placement(
        offer("us-east-1c"), Market.RESERVED, 0.0, None, score=0.0, rank=rank, reservation=r
    )


def on_block(r: Reservation, attempt: int = 1) -> tuple[AttemptView, object]:
    p = held(r)
    inst = instance(attempt, "us-east-1c", Market.RESERVED)
    inst = replace(inst, tags={**inst.tags, **block_tags(r)})
    at = AttemptView(attempt, p, inst.id, InstanceState.RUNNING, launched_at=T0)
    return at, inst


def test_launches_into_a_usable_reservation_before_spot() -> None:
    r = block()
    obs = Observations(candidates=(held(r), *cands("us-east-1a")))
    out = decide(job(policy(RESERVED_FIRST)), obs, NOW)
    assert [type(a) for a in out] == [Launch]
    launch = out[0]
    assert isinstance(launch, Launch)
    assert launch.placement.market is Market.RESERVED and "cb-1" in launch.reason


def test_not_into_one_the_policy_excludes_or_does_not_name() -> None:
    r = block()
    obs = Observations(candidates=(held(r), *cands("us-east-1a")))
    for extra in ("market: spot-then-on-demand\n", RESERVED_FIRST + "reservations: [cb-2]\n"):
        out = decide(job(policy(extra)), obs, NOW)
        assert all(not (isinstance(a, Launch) and a.placement.market is Market.RESERVED)
                   for a in out)  # fmt: skip


def test_not_into_one_ending_within_a_changeover() -> None:
    r = block(ends=timedelta(minutes=45))  # its notice in 5 minutes
    obs = Observations(candidates=(held(r), *cands("us-east-1a")))
    out = decide(job(policy(RESERVED_FIRST)), obs, NOW)
    launch = next(a for a in out if isinstance(a, Launch))
    assert launch.placement.market is Market.SPOT


def test_reserved_only_waits_when_nothing_is_usable() -> None:
    r = block(free=0)
    obs = Observations(candidates=(held(r),))
    out = decide(job(policy("market: reserved\n")), obs, NOW)
    assert [type(a) for a in out] == [Wait]


def test_a_job_on_a_reservation_stays() -> None:
    r = block(ends=None)
    att, inst = on_block(r)
    obs = Observations(instances=(inst,), candidates=(held(r), *cands("us-east-1a")))  # type: ignore[arg-type]
    out = decide(job(policy(RESERVED_FIRST), current=att), obs, NOW)
    assert [type(a) for a in out] == [Wait]


def test_moves_from_on_demand_into_a_reservation_made_before_break() -> None:
    r = block(ends=None)
    p = Placement(offer("us-east-1a"), Market.ON_DEMAND, 3.06, None, 1.0, 1)
    inst = instance(1, "us-east-1a", Market.ON_DEMAND)
    att = AttemptView(1, p, inst.id, InstanceState.RUNNING, launched_at=T0)
    obs = Observations(instances=(inst,), candidates=(held(r), *cands("us-east-1a")))
    out = decide(job(policy(RESERVED_FIRST), current=att), obs, NOW)
    launch = next(a for a in out if isinstance(a, Launch))
    assert launch.placement.market is Market.RESERVED and launch.replaces == inst.id


def test_a_blocks_end_is_a_notice_then_a_preemption() -> None:
    r = replace(block(), ends_at=NOW + timedelta(minutes=100))
    att, inst = on_block(r)
    j = job(policy(RESERVED_FIRST), current=att, boot_s=60.0)
    obs = Observations(instances=(inst,), candidates=cands("us-east-1a"))  # type: ignore[arg-type]
    # before its notice: stays
    assert [type(a) for a in decide(j, obs, NOW)] == [Wait]
    due, end = notice_at(r), usable_end(r)
    assert due is not None and end is not None
    # at the notice (AWS: 40 minutes before the end): the replacement goes, made before break
    out = decide(j, obs, due)
    launch = next(a for a in out if isinstance(a, Launch))
    assert launch.replaces == inst.id and "notice" in launch.reason  # type: ignore[attr-defined]
    # past the usable end: whatever is still there is stopped
    out = decide(j, obs, end + timedelta(seconds=1))
    assert any(isinstance(a, Terminate) and a.instance_id == inst.id for a in out)  # type: ignore[attr-defined]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    market=hs.sampled_from(
        ["reserved", "reserved-then-spot", "reserved-then-on-demand", "spot-then-on-demand"]
    ),
    named=hs.booleans(),
    free=hs.integers(0, 2),
    start_min=hs.one_of(hs.none(), hs.integers(-120, 120)),
    end_min=hs.one_of(hs.none(), hs.integers(-30, 600)),
    on_it=hs.booleans(),
    later_min=hs.integers(0, 700),
)
def test_properties(
    market: str,
    named: bool,
    free: int,
    start_min: int | None,
    end_min: int | None,
    on_it: bool,
    later_min: int,
) -> None:
    r = block(
        ends=None if end_min is None else timedelta(minutes=end_min),
        free=free,
        starts=None if start_min is None else timedelta(minutes=start_min),
    )
    pol = policy(f"market: {market}\nreservations: [{'cb-1' if named else 'cb-9'}]\n")
    now = NOW + timedelta(minutes=later_min)
    cand = (held(r), *cands("us-east-1a"))
    if on_it:
        att, inst = on_block(r)
        j = job(pol, current=att)
        obs = Observations(instances=(inst,), candidates=cand)  # type: ignore[arg-type]
    else:
        j = job(pol)
        obs = Observations(candidates=cand)
    out = decide(j, obs, now)
    for a in out:
        if isinstance(a, Launch) and a.placement.market is Market.RESERVED:
            # never when the policy excludes it or it is not usable
            assert "reserved" in market and named
            assert usable(r, now, j.changeover_h) is None
    end = usable_end(r)
    if on_it and end is not None and now >= end:
        # never an instance left on a block past its usable end
        assert any(isinstance(a, Terminate) and a.instance_id == "i-1" for a in out)
