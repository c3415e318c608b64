"""Early signals in decide(): a rebalance recommendation on the running spot instance starts a
look before the notice, made before break, to another zone, when worth its overlap; never a
third instance, never above the caps (provisioner/core/decide/signals.py)."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as hs

from policies import parse_policy
from provisioner.core.decide import (
    AttemptView,
    CoolDown,
    Launch,
    Observations,
    Terminate,
    decide,
    signals,
)
from provisioner.core.models import Instance, InstanceState, Interruption, Market
from provisioner.core.rules import launch_price
from tests.core.test_decide import NOW, cands, instance, job, kinds, offer, place, policy, running


def rebalance(iid: str = "i-1") -> Interruption:
    return Interruption(iid, "aws", "us-east-1a", "rebalance", NOW - timedelta(seconds=30))


def obs(*extra: Interruption, zones: tuple[str, ...] = ("us-east-1a", "us-east-1b")):
    cur, inst = running(1)
    return cur, Observations(
        instances=(inst,), interruptions=(rebalance(), *extra), candidates=cands(*zones)
    )


def test_a_rebalance_launches_a_replacement_elsewhere_before_the_notice() -> None:
    cur, o = obs()
    out = decide(job(current=cur, attempt=1), o, NOW)
    assert kinds(out) == ["CoolDown", "Launch"], out
    cool, launch = out
    assert isinstance(cool, CoolDown) and isinstance(launch, Launch)
    assert cool.location == "us-east-1a" and cool.until == NOW + signals.COOLDOWN
    assert launch.replaces == "i-1" and launch.attempt == 2
    assert launch.placement.offer.zone == "us-east-1b"
    assert "rebalance recommendation for i-1" in launch.reason
    assert not any(isinstance(a, Terminate) for a in out)  # the old one works on


def test_without_the_signal_the_instance_stays() -> None:
    cur, inst = running(1)
    plain = Observations(instances=(inst,), candidates=cands("us-east-1a", "us-east-1b"))
    assert kinds(decide(job(current=cur, attempt=1), plain, NOW)) == ["Wait"]


def test_no_look_when_not_worth_it_or_not_allowed() -> None:
    cur, o = obs()
    # the work left is within a changeover: finishing here is cheaper
    near_done = job(current=cur, attempt=1, work_done_h=47.9)
    assert not any(isinstance(a, Launch) for a in decide(near_done, o, NOW))
    # a changeover no longer than the notice: a preemption would lose nothing
    short = job(current=cur, attempt=1, changeover_h=1.0 / 60.0)
    assert not any(isinstance(a, Launch) for a in decide(short, o, NOW))
    # the instance is still in its own changeover
    young = AttemptView(1, cur.placement, "i-1", InstanceState.RUNNING, launched_at=NOW)
    assert not any(isinstance(a, Launch) for a in decide(job(current=young, attempt=1), o, NOW))
    # no other zone: the replacement would go nowhere (on-demand is not worth it here)
    _, alone = obs(zones=("us-east-1a",))
    out = decide(job(current=cur, attempt=1), alone, NOW)
    assert [a.placement.market for a in out if isinstance(a, Launch)] in ([], [Market.ON_DEMAND])
    # restarts exhausted
    last = policy("restart:\n  max_restarts: 1\n")
    assert not any(
        isinstance(a, Launch) for a in decide(job(last, current=cur, attempt=1, restarts=1), o, NOW)
    )


def test_the_value_of_a_look() -> None:
    cur, inst = running(1)
    gain, cost = signals.look_value(job(current=cur, attempt=1), inst, 3.06, 0.97)
    # half the time it saves the changeover past the notice at on-demand's price; half the
    # time it wastes the overlap
    assert abs(gain - 0.5 * (0.2 - 2 / 60) * 3.06) < 1e-9
    assert abs(cost - 0.5 * 0.2 * 0.97) < 1e-9
    # no on-demand to make the time up on: the new spot price, and the look is not worth it
    gain, cost = signals.look_value(job(current=cur, attempt=1), inst, None, 0.5)
    assert gain < cost


def test_a_switch_in_flight_never_gets_a_third_instance() -> None:
    """The look was accepted (attempt 2 launched, i-1 handing over): the signal still on i-1
    launches nothing more."""
    p2 = place(offer("us-east-1b"))
    cur = AttemptView(2, p2, "i-2", InstanceState.RUNNING, launched_at=NOW)
    o = Observations(
        instances=(instance(1), instance(2, "us-east-1b")),
        interruptions=(rebalance("i-1"), rebalance("i-2")),
        candidates=cands("us-east-1a", "us-east-1b", "us-east-1c"),
    )
    out = decide(job(current=cur, attempt=2), o, NOW + timedelta(minutes=1))
    assert not any(isinstance(a, Launch) for a in out), out


def test_a_notice_wins_over_a_rebalance() -> None:
    notice = Interruption("i-1", "aws", "us-east-1a", "notice", NOW, NOW + timedelta(minutes=2))
    cur, o = obs(notice)
    out = decide(job(current=cur, attempt=1), o, NOW)
    launch = [a for a in out if isinstance(a, Launch)]
    assert len(launch) == 1 and "overlapping the notice of i-1" in launch[0].reason


def test_a_refused_look_leaves_the_instance_running() -> None:
    """The other zone refused the look (a capacity error): no launch there, nothing stopped."""
    from provisioner.core.views import CapacityError

    cur, o = obs()
    refused = CapacityError("aws", "us-east-1b", "p3.2xlarge", Market.SPOT, NOW)
    o2 = Observations(
        instances=o.instances,
        interruptions=o.interruptions,
        candidates=o.candidates,
        capacity_errors=(refused,),
    )
    out = decide(job(current=cur, attempt=1), o2, NOW)
    assert not any(isinstance(a, Terminate) for a in out), out
    assert not any(isinstance(a, Launch) and a.placement.offer.zone == "us-east-1b" for a in out)


@settings(max_examples=60, deadline=None)
@given(
    cap=hs.one_of(hs.none(), hs.floats(0.3, 5.0)),
    max_price=hs.one_of(hs.none(), hs.floats(0.3, 5.0)),
    regions=hs.sampled_from([None, "us-east-1", "eu-west-1"]),
    handing=hs.booleans(),
    done=hs.floats(0.0, 48.0),
    age_h=hs.floats(0.0, 3.0),
)
def test_a_look_respects_caps_residency_and_one_extra_instance(
    cap: float | None,
    max_price: float | None,
    regions: str | None,
    handing: bool,
    done: float,
    age_h: float,
) -> None:
    extra = ""
    if cap is not None:
        extra += f"bid_cap:\n  max_spot_price_per_hour: {cap}\n"
    if max_price is not None:
        extra += f"budget:\n  max_price_per_hour: {max_price}\n"
    if regions is not None:
        extra += f"residency:\n  allow_regions: [{regions}]\n"
    pol = policy(extra)
    at = NOW - timedelta(hours=age_h)
    cur, inst = running(1, at=at)
    insts: tuple[Instance, ...] = (inst,)
    view = job(pol, current=cur, attempt=1, work_done_h=done)
    if handing:  # a switch made before break in flight
        p2 = place(offer("us-east-1b"))
        cur = AttemptView(2, p2, "i-2", InstanceState.RUNNING, launched_at=NOW)
        insts = (inst, instance(2, "us-east-1b"))
        view = job(pol, current=cur, attempt=2, work_done_h=done)
    o = Observations(
        instances=insts,
        interruptions=(rebalance("i-1"),),
        candidates=(
            *cands("us-east-1a", "us-east-1b", "us-east-1c"),
            place(offer("eu-west-1a", "eu-west-1", spot=0.6), Market.SPOT, 5),
        ),
    )
    out = decide(view, o, NOW)
    launches = [a for a in out if isinstance(a, Launch)]
    assert len(launches) <= 1
    if handing:
        assert not launches  # never a third instance
    for a in launches:
        p = a.placement
        price = launch_price(p)
        if p.market is Market.SPOT and cap is not None:
            assert price <= cap + 1e-9
        if max_price is not None:
            assert price <= max_price + 1e-9
        if regions is not None:
            assert p.offer.region == regions
        assert a.replaces in (None, "i-1")


def test_after_a_refused_look_the_running_instance_stays_in_its_cooled_zone() -> None:
    """The daemon's view after a refused look: the failed attempt is the current one, the
    signalled zone cooled and left out of the planner's candidates, the other zone refused.
    The strategy sees the running instance's attempt as current (as the simulator has it):
    nothing is stopped, nothing launched in the zone it runs in."""
    from provisioner.core.views import CapacityError

    _, inst = running(1, at=NOW - timedelta(hours=1))
    failed = AttemptView(
        2, place(offer("us-east-1b")), None, InstanceState.TERMINATED, launched_at=NOW
    )
    short = parse_policy("name: t\njob:\n  compute_hours: 2\ndeadline: 22h\n")  # 12 h left at NOW
    view = job(
        short,
        current=failed,
        attempt=2,
        work_done_h=0.3,
        cooldowns={("aws", "us-east-1a"): NOW + signals.COOLDOWN},
    )
    o = Observations(
        instances=(inst,),
        interruptions=(rebalance(),),
        candidates=cands("us-east-1b"),  # us-east-1a cooled: not among the candidates
        capacity_errors=(CapacityError("aws", "us-east-1b", "p3.2xlarge", Market.SPOT, NOW),),
    )
    out = decide(view, o, NOW)
    assert not any(isinstance(a, Terminate) for a in out), out
    assert not any(isinstance(a, Launch) and a.placement.offer.zone == "us-east-1a" for a in out), (
        out
    )


def test_a_replacement_lost_in_its_overlap_leaves_the_old_one_in_its_zone() -> None:
    """The look's new instance was preempted during its changeover: the old one, in a zone
    cooled by the look, is the job's again and stays (no switch to the zone it runs in)."""
    _, inst = running(1, at=NOW - timedelta(hours=1))
    lost = AttemptView(
        2,
        place(offer("us-east-1b")),
        "i-2",
        InstanceState.PREEMPTED,
        launched_at=NOW - timedelta(minutes=6),
        ended_at=NOW,
    )
    view = job(current=lost, attempt=2, cooldowns={("aws", "us-east-1a"): NOW + signals.COOLDOWN})
    o = Observations(instances=(inst,), candidates=cands("us-east-1a", "us-east-1b"))
    out = decide(view, o, NOW)
    assert not any(isinstance(a, Terminate) and a.instance_id == "i-1" for a in out), out
    assert not any(isinstance(a, Launch) and a.placement.offer.zone == "us-east-1a" for a in out), (
        out
    )
