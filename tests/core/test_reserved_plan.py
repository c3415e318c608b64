"""Held capacity in the planner: a reservation the policy allows, usable now and matching an
offer that passes the hard rules, ranks first at a marginal $0/h, named."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies import parse_policy
from provisioner.core.catalog import Catalog
from provisioner.core.models import Market, Offer, Reservation, ReservationKind
from provisioner.core.planner import PlanContext, plan_offers
from provisioner.core.reserved import END_MARGINS, notice_at, usable, usable_end

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def offer(zone: str = "us-east-1a", itype: str = "p4d.24xlarge", gpu: str = "A100") -> Offer:
    return Offer("aws", zone[:-1], zone, itype, gpu, 8, 96, 1152, 32.77, 12.0, "2026-11-30")


def resv(
    rid: str = "cr-1",
    zone: str = "us-east-1a",
    itype: str = "p4d.24xlarge",
    kind: ReservationKind = ReservationKind.ON_DEMAND,
    free: int = 1,
    starts: timedelta | None = None,
    ends: timedelta | None = None,
) -> Reservation:
    return Reservation(
        "aws",
        rid,
        zone[:-1],
        zone,
        itype,
        kind,
        total=2,
        free=free,
        starts_at=None if starts is None else NOW + starts,
        ends_at=None if ends is None else NOW + ends,
        held_usd_per_hour=32.77,
    )


def plan(yaml: str, offers: list[Offer], held: list[Reservation]) -> object:
    return plan_offers(
        parse_policy("name: r\nresources: {gpus: [A100], gpu_count: 8}\n" + yaml),
        Catalog.from_offers(offers),
        PlanContext(now=NOW, reservations=tuple(held)),
        top=None,
    )


def test_a_matching_reservation_ranks_first_at_zero_marginal_naming_it() -> None:
    offers = [offer("us-east-1a"), offer("us-east-1b")]
    p = plan("market: reserved-then-spot-then-on-demand\n", offers, [resv()])
    best = p.placements[0]  # type: ignore[attr-defined]
    assert best.market is Market.RESERVED and best.rank == 1
    assert best.price_per_hour == 0.0 and best.reservation.id == "cr-1"
    assert "cr-1" in best.reasons[0] and "$0/h" in best.reasons[0]
    d = best.as_dict()
    assert d["reservation"]["free"] == 1 and d["reservation"]["held_usd_per_hour"] == 32.77
    assert [x.rank for x in p.placements] == list(range(1, len(p.placements) + 1))  # type: ignore[attr-defined]
    assert p.eligible + sum(p.rejected.values()) == p.candidates  # type: ignore[attr-defined]


def test_not_offered_without_reserved_market_or_not_named() -> None:
    offers = [offer()]
    p = plan("market: spot-then-on-demand\n", offers, [resv()])
    assert all(x.market is not Market.RESERVED for x in p.placements)  # type: ignore[attr-defined]
    p = plan("market: reserved-then-spot\nreservations: [cr-9]\n", offers, [resv()])
    assert all(x.market is not Market.RESERVED for x in p.placements)  # type: ignore[attr-defined]
    assert p.rejected["reservation"] == 1  # type: ignore[attr-defined]
    assert p.eligible + sum(p.rejected.values()) == p.candidates  # type: ignore[attr-defined]


def test_not_usable_ones_are_rejected_with_why() -> None:
    offers = [offer()]
    held = [
        resv("cr-full", free=0),
        resv("cr-later", starts=timedelta(hours=5)),
        resv("cb-ending", kind=ReservationKind.CAPACITY_BLOCK, ends=timedelta(minutes=45)),
    ]
    p = plan("market: reserved\n", offers, held)
    assert p.placements == []  # type: ignore[attr-defined]
    assert p.rejected == {"reservation": 3}  # type: ignore[attr-defined]


def test_a_reservation_must_pass_the_offers_hard_rules() -> None:
    # the policy's residency keeps the EU only: a US reservation is not usable by it
    p = plan(
        "market: reserved-then-on-demand\nresidency: {allow_regions: [eu-west-1]}\n",
        [offer()],
        [resv()],
    )
    assert all(x.market is not Market.RESERVED for x in p.placements)  # type: ignore[attr-defined]
    assert p.rejected.get("denied_region", 0) >= 1  # type: ignore[attr-defined]
    # a type of another GPU than the policy's
    p = plan(
        "market: reserved\n", [offer(itype="g5.xlarge", gpu="A10G")], [resv(itype="g5.xlarge")]
    )
    assert p.placements == []  # type: ignore[attr-defined]


def test_aws_block_margins_are_the_documented_ones() -> None:
    m = END_MARGINS["aws"]
    assert (m.warn_s, m.stop_s) == (2400.0, 1800.0) and "capacity-blocks" in m.docs
    b = resv(kind=ReservationKind.CAPACITY_BLOCK, ends=timedelta(hours=10))
    assert usable_end(b) == NOW + timedelta(hours=10, minutes=-30)
    assert notice_at(b) == NOW + timedelta(hours=10, minutes=-40)
    assert usable(b, NOW, 0.2) is None
    assert usable(b, NOW + timedelta(hours=9, minutes=40), 0.2) is not None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    free=st.integers(0, 3),
    start_h=st.one_of(st.none(), st.floats(-5, 5)),
    end_h=st.one_of(st.none(), st.floats(-1, 20)),
    named=st.booleans(),
    market=st.sampled_from(["reserved", "reserved-then-spot", "spot-then-on-demand"]),
)
def test_a_reserved_placement_is_always_allowed_and_usable(
    free: int, start_h: float | None, end_h: float | None, named: bool, market: str
) -> None:
    r = resv(
        kind=ReservationKind.ON_DEMAND if end_h is None else ReservationKind.CAPACITY_BLOCK,
        free=free,
        starts=None if start_h is None else timedelta(hours=start_h),
        ends=None if end_h is None else timedelta(hours=end_h),
    )
    names = "cr-1" if named else "cr-2"
    pol = f"market: {market}\nreservations: [{names}]\n"
    p = plan(pol, [offer()], [r])
    for x in p.placements:  # type: ignore[attr-defined]
        if x.market is Market.RESERVED:
            assert named and "reserved" in market
            assert usable(r, NOW, 0.2) is None
            assert x.price_per_hour == 0.0
    assert p.eligible + sum(p.rejected.values()) == p.candidates  # type: ignore[attr-defined]
