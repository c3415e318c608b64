"""Gangs in the pure core (issue 10): fold(), and decide() on a gang's units.

A gang's N instances fold into one unit per attempt; a lost node breaks the whole gang;
decide() answers a unit as it answers one instance, and its Terminate reaches every member.
A property test checks that, whatever the nodes report, decide() never launches a second
gang beside a live one and never launches a gang whose hour (nodes x price) is above the
policy's hourly budget or whose per-node spot bid is above the cap.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from policies import parse_policy
from policies.model import Policy
from provisioner.core import gang
from provisioner.core.decide import (
    AttemptView,
    CoolDown,
    JobView,
    Launch,
    Observations,
    Terminate,
    decide,
)
from provisioner.core.models import (
    TAG_ATTEMPT,
    TAG_JOB,
    TAG_NODE,
    TAG_NODES,
    Instance,
    InstanceState,
    Interruption,
    Market,
    Offer,
    Placement,
)

T0 = datetime(2026, 12, 1, 0, 0, tzinfo=UTC)
NOW = T0 + timedelta(hours=2)
R = InstanceState.RUNNING
P = InstanceState.PREEMPTED
X = InstanceState.TERMINATED


def node(
    attempt: int,
    rank: int,
    state: InstanceState = R,
    zone: str = "us-east-1a",
    nodes: int = 2,
    job: str = "j1",
) -> Instance:
    return Instance(
        f"i-{attempt}-{rank}",
        "aws",
        "us-east-1",
        zone,
        "p4d.24xlarge",
        Market.SPOT,
        state,
        state_reason="Server.SpotInstanceTermination" if state is P else "",
        tags={
            TAG_JOB: job,
            TAG_ATTEMPT: str(attempt),
            TAG_NODE: str(rank),
            TAG_NODES: str(nodes),
        },
    )


# -- fold -------------------------------------------------------------------------------------


def test_a_whole_running_gang_is_one_running_unit() -> None:
    g = gang.fold([node(1, 1), node(1, 0)], [], 2, NOW)
    assert [u.id for u in g.units] == ["i-1-0"]  # node 0 leads
    unit = g.units[0]
    assert unit.state is R
    assert TAG_NODE not in unit.tags and TAG_NODES not in unit.tags
    assert g.members == {"i-1-0": ("i-1-0", "i-1-1")}
    assert g.broken == {}
    assert g.expand("i-1-0") == ["i-1-0", "i-1-1"]
    assert g.expand("i-other") == ["i-other"]


def test_folding_twice_changes_nothing() -> None:
    once = gang.fold([node(1, 0), node(1, 1, P)], [], 2, NOW)
    twice = gang.fold(list(once.units), once.interruptions, 2, NOW)
    assert twice.units == once.units
    assert twice.interruptions == once.interruptions


def test_one_preempted_node_breaks_the_gang_in_its_zone() -> None:
    g = gang.fold([node(1, 0), node(1, 1, P, zone="us-east-1b")], [], 2, NOW)
    unit = g.units[0]
    assert unit.state.alive, "the rest still runs: decide() must stop it"
    assert "node 1 preempted" in g.broken[unit.id]
    [lost] = g.interruptions
    assert (lost.instance_id, lost.kind, lost.zone) == (unit.id, "preempted", "us-east-1b")


def test_every_node_gone_after_a_preemption_is_a_preempted_unit() -> None:
    g = gang.fold([node(1, 0, X), node(1, 1, P, zone="us-east-1c")], [], 2, NOW)
    unit = g.units[0]
    assert unit.state is P and unit.zone == "us-east-1c"
    assert g.interruptions == ()  # nothing alive to stop; the unit itself says preempted


def test_a_missing_node_is_coming_while_young_and_lost_after() -> None:
    only_leader = [node(1, 0)]
    young = gang.young_attempts(1, NOW - timedelta(seconds=10), NOW)
    assert young == frozenset({1})
    assert gang.fold(only_leader, [], 2, NOW, young=young).broken == {}
    old = gang.young_attempts(1, NOW - gang.LIST_LAG, NOW)
    assert old == frozenset()
    g = gang.fold(only_leader, [], 2, NOW, young=old)
    assert "only 1 of 2 nodes alive (node 1 gone)" in g.broken["i-1-0"]


def test_a_node_terminated_behind_our_back_breaks_even_a_young_gang() -> None:
    young = frozenset({1})
    g = gang.fold([node(1, 0), node(1, 1, X)], [], 2, NOW, young=young)
    assert "only 1 of 2" in g.broken["i-1-0"]


def test_a_notice_on_any_node_is_the_units_and_is_kept_once() -> None:
    notes = [
        Interruption("i-1-1", "aws", "us-east-1a", "notice", NOW, deadline=NOW),
        Interruption(
            "i-1-0", "aws", "us-east-1a", "notice", NOW + timedelta(seconds=1), deadline=NOW
        ),
    ]
    g = gang.fold([node(1, 0), node(1, 1)], notes, 2, NOW)
    assert [(x.instance_id, x.kind, x.at) for x in g.interruptions] == [("i-1-0", "notice", NOW)]


def test_the_recorded_leader_keeps_the_units_id() -> None:
    g = gang.fold([node(1, 1), node(1, 0, X)], [], 2, NOW, leaders={1: "i-1-0"})
    assert g.units[0].id == "i-1-0"


def test_attempts_fold_apart_and_single_instances_pass_through() -> None:
    solo = Instance(
        "i-solo", "aws", "us-east-1", "us-east-1a", "p4d.24xlarge", Market.SPOT, R,
        tags={TAG_JOB: "j1", TAG_ATTEMPT: "9"},
    )  # fmt: skip
    g = gang.fold([node(1, 0), node(1, 1), node(2, 0), node(2, 1), solo], [], 2, NOW)
    assert sorted(u.id for u in g.units) == ["i-1-0", "i-2-0", "i-solo"]
    assert gang.fold([solo], [], 1, NOW).units == (solo,)


# -- decide on gangs ---------------------------------------------------------------------------


def gang_policy(extra: str = "") -> Policy:
    return parse_policy(
        "name: g\njob:\n  compute_hours: 48\ndeadline: 120h\n"
        "resources:\n  nodes: 2\n"
        "bid_cap:\n  max_spot_price_per_gpu_hour: 2.0\n"
        "budget:\n  max_price_per_hour: 40\n" + extra
    )


def offer(zone: str, spot: float = 9.0, od: float = 32.77) -> Offer:
    return Offer("aws", "us-east-1", zone, "p4d.24xlarge", "A100", 8, 40, 1152, od, spot)


def place(o: Offer, market: Market = Market.SPOT, rank: int = 1) -> Placement:
    price = o.price_for(market)
    assert price is not None
    cap = 16.0 if market is Market.SPOT else None
    return Placement(o, market, price, cap, score=float(rank), rank=rank, nodes=2)


def cands(*zones: str) -> tuple[Placement, ...]:
    return tuple(place(offer(z), rank=i + 1) for i, z in enumerate(zones))


def gang_job(p: Policy, cur: AttemptView | None = None, attempt: int = 0) -> JobView:
    return JobView.new(
        "j1", p, T0, current=cur, attempt=attempt, restarts=0, changeover_h=0.2, step_h=0.1
    )


def test_a_running_gang_is_kept_without_a_second_gang() -> None:
    cur = AttemptView(1, place(offer("us-east-1a")), "i-1-0", R, launched_at=T0)
    obs = Observations(instances=(node(1, 0), node(1, 1)), candidates=cands("us-east-1a"))
    out = decide(gang_job(gang_policy(), cur, 1), obs, NOW)
    assert not any(isinstance(a, Launch | Terminate) for a in out), out


def test_one_node_preempted_stops_the_gang_cools_its_zone_and_relaunches_elsewhere() -> None:
    cur = AttemptView(1, place(offer("us-east-1a")), "i-1-0", R, launched_at=T0)
    obs = Observations(
        instances=(node(1, 0), node(1, 1, P)),
        candidates=cands("us-east-1a", "us-east-1b"),
    )
    out = decide(gang_job(gang_policy(), cur, 1), obs, NOW)
    stops = [a.instance_id for a in out if isinstance(a, Terminate)]
    assert stops == ["i-1-0"], out  # the unit: the control loop stops every member
    assert any(isinstance(a, CoolDown) and a.location == "us-east-1a" for a in out)
    launches = [a for a in out if isinstance(a, Launch)]
    assert all(a.placement.offer.zone != "us-east-1a" for a in launches)


def test_a_gang_is_never_overlapped_on_a_long_notice() -> None:
    cur = AttemptView(1, place(offer("us-east-1a")), "i-1-0", R, launched_at=T0)
    note = Interruption(
        "i-1-1", "aws", "us-east-1a", "notice", NOW, deadline=NOW + timedelta(minutes=2)
    )
    obs = Observations(
        instances=(node(1, 0), node(1, 1)),
        interruptions=(note,),
        candidates=cands("us-east-1a", "us-east-1b"),
    )
    out = decide(gang_job(gang_policy(), cur, 1), obs, NOW)
    assert not any(isinstance(a, Launch) for a in out), "one gang at a time, even on notice"


STATES = hs.sampled_from([R, InstanceState.PENDING, P, X, InstanceState.STOPPING])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    states=hs.lists(hs.tuples(STATES, STATES), min_size=0, max_size=3),
    spot=hs.floats(min_value=1.0, max_value=40.0),
    budget=hs.floats(min_value=5.0, max_value=80.0),
    noticed=hs.booleans(),
)
def test_never_two_gangs_and_never_above_the_gangs_budget_or_cap(
    states: list[tuple[InstanceState, InstanceState]],
    spot: float,
    budget: float,
    noticed: bool,
) -> None:
    p = parse_policy(
        "name: g\njob:\n  compute_hours: 48\ndeadline: 120h\nresources:\n  nodes: 2\n"
        "bid_cap:\n  max_spot_price_per_gpu_hour: 2.0\n"
        f"budget:\n  max_price_per_hour: {budget}\n"
    )
    instances = [node(a + 1, k, s) for a, pair in enumerate(states) for k, s in enumerate(pair)]
    attempt = len(states)
    cur = None
    if attempt:
        cur = AttemptView(
            attempt, place(offer("us-east-1a", spot)), f"i-{attempt}-0", R, launched_at=T0
        )
    notes = ()
    if noticed and instances:
        notes = (
            Interruption(
                instances[-1].id,
                "aws",
                "us-east-1a",
                "notice",
                NOW,
                deadline=NOW + timedelta(minutes=2),
            ),
        )
    cs = tuple(
        place(offer(z, spot), m, i + 1)
        for i, (z, m) in enumerate(
            [
                ("us-east-1a", Market.SPOT),
                ("us-east-1b", Market.SPOT),
                ("us-east-1a", Market.ON_DEMAND),
            ]
        )
    )
    out = decide(
        gang_job(p, cur, attempt),
        Observations(instances=tuple(instances), interruptions=notes, candidates=cs),
        NOW,
    )
    launches = [a for a in out if isinstance(a, Launch)]
    assert len(launches) <= 1
    stopped = {a.instance_id for a in out if isinstance(a, Terminate)}
    units = gang.fold(instances, notes, 2, NOW, {attempt: f"i-{attempt}-0"} if attempt else {})
    alive_after = [u for u in units.units if u.state.alive and u.id not in stopped]
    if launches:
        assert not alive_after, f"a gang launched beside a live one: {alive_after}"
        pl = launches[0].placement
        assert pl.nodes == 2
        assert pl.price_per_hour * pl.nodes <= budget + 1e-9, "the gang's hour is over budget"
        if pl.market is Market.SPOT:
            assert pl.bid_cap_per_hour is not None
            assert pl.bid_cap_per_hour <= 2.0 * pl.offer.gpu_count + 1e-9
