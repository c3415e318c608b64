"""AWS held capacity: the capacity reservations and capacity blocks the account holds, a launch
into each with EC2's targeting fields on the wire, and Capacity Block offerings bought.

The real AWSProvider and boto3 against moto's server (tests/contract/harness_aws.py), with
EC2's capacity actions added to moto by tests/fakes/aws_capacity.py (moto has none). Times
come from the caller's clock: the tests pass on any date.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

pytest.importorskip("boto3")
pytest.importorskip("moto")

CONTRACT = Path(__file__).resolve().parents[2] / "contract"
if str(CONTRACT) not in sys.path:
    sys.path.insert(0, str(CONTRACT))

from fakes import aws_capacity  # noqa: E402
from harness_aws import REGION, ZONE, AWSHarness, make_harness  # noqa: E402

from providers.aws.reservations import block_hours_ok  # noqa: E402
from providers.base import ErrorKind, ProviderError  # noqa: E402
from providers.capabilities import BooksCapacity, HeldCapacity  # noqa: E402
from provisioner.core.models import (  # noqa: E402
    LaunchRequest,
    Market,
    Offer,
    Reservation,
    ReservationKind,
)

NOW = datetime.now(UTC).replace(microsecond=0)


@pytest.fixture
def aws() -> Iterator[AWSHarness]:
    aws_capacity.install()
    with make_harness() as h:
        yield h


def _offer(itype: str = "p5.48xlarge", zone: str = ZONE) -> Offer:
    return Offer("aws", REGION, zone, itype, "H100", 8, 192, 2048, 98.32, 40.0)


def _request(
    held: Reservation | None, market: Market = Market.RESERVED, offer: Offer | None = None
) -> LaunchRequest:
    return LaunchRequest(
        job_id="held-1",
        attempt=1,
        offer=offer or _offer(),
        market=market,
        user_data="#!/bin/sh\ntrue\n",
        reservation=held,
    )


def _by_id(rows: list[Reservation]) -> dict[str, Reservation]:
    return {r.id: r for r in rows}


def test_the_adapter_has_both_capabilities(aws: AWSHarness) -> None:
    p = aws.provider()
    assert isinstance(p, HeldCapacity) and isinstance(p, BooksCapacity)


def test_reservations_lists_held_gpu_capacity_with_what_is_free(aws: AWSHarness) -> None:
    odcr = aws_capacity.seed_reservation(REGION, ZONE, "p5.48xlarge", 4, available=3, match="open")
    block = aws_capacity.seed_reservation(
        REGION,
        ZONE,
        "p5.48xlarge",
        2,
        kind="capacity-block",
        state="scheduled",
        start=NOW + timedelta(days=2),
        end=NOW + timedelta(days=5),
    )
    aws_capacity.seed_reservation(REGION, ZONE, "m5.large", 10)  # no GPU: left out
    aws_capacity.seed_reservation(REGION, ZONE, "p5.48xlarge", 1, state="expired")  # ended
    held = _by_id(aws.provider().reservations())
    assert set(held) == {odcr, block}
    r = held[odcr]
    assert (r.kind, r.total, r.free, r.targeted) == (ReservationKind.ON_DEMAND, 4, 3, False)
    assert (r.region, r.zone, r.instance_type) == (REGION, ZONE, "p5.48xlarge")
    assert r.starts_at is None and r.ends_at is None and r.ref.endswith(odcr)
    assert r.usable_at(NOW)
    b = held[block]
    assert (b.kind, b.total, b.free, b.targeted) == (ReservationKind.CAPACITY_BLOCK, 2, 2, True)
    assert b.starts_at == NOW + timedelta(days=2) and b.ends_at == NOW + timedelta(days=5)
    assert not b.usable_at(NOW) and b.usable_at(NOW + timedelta(days=3))
    # the state filter went on the wire
    sent = aws.sent("DescribeCapacityReservations")[-1]
    assert sent["Filter.1.Name"] == "state"
    assert "active" in [v for k, v in sent.items() if k.startswith("Filter.1.Value.")]


def test_launch_into_a_capacity_reservation_targets_it_on_the_wire(aws: AWSHarness) -> None:
    rid = aws_capacity.seed_reservation(REGION, ZONE, "p5.48xlarge", 2)
    p = aws.provider()
    held = _by_id(p.reservations())[rid]
    instance = p.launch(_request(held))
    wire = aws.launch_requests()[-1]
    key = "CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId"
    assert wire[key] == rid
    assert not any(k.startswith("InstanceMarketOptions") for k in wire)  # no spot field
    assert aws_capacity.placed_in(REGION, instance.id) == rid
    assert aws_capacity.reservation_of(REGION, rid)["AvailableInstanceCount"] == 1
    assert _by_id(p.reservations())[rid].free == 1


def test_launch_into_a_capacity_block_uses_the_capacity_block_market(aws: AWSHarness) -> None:
    rid = aws_capacity.seed_reservation(
        REGION,
        ZONE,
        "p5.48xlarge",
        1,
        kind="capacity-block",
        start=NOW - timedelta(hours=1),
        end=NOW + timedelta(days=1),
    )
    p = aws.provider()
    held = _by_id(p.reservations())[rid]
    assert held.kind is ReservationKind.CAPACITY_BLOCK
    instance = p.launch(_request(held))
    wire = aws.launch_requests()[-1]
    assert wire["InstanceMarketOptions.MarketType"] == "capacity-block"
    key = "CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId"
    assert wire[key] == rid
    assert not any("SpotOptions" in k for k in wire)
    assert aws_capacity.placed_in(REGION, instance.id) == rid


def test_a_full_reservation_is_capacity_the_next_offer_is_tried(aws: AWSHarness) -> None:
    rid = aws_capacity.seed_reservation(REGION, ZONE, "p5.48xlarge", 1, available=0)
    p = aws.provider()
    held = _by_id(p.reservations())[rid]
    with pytest.raises(ProviderError) as caught:
        p.launch(_request(held))
    assert (caught.value.kind, caught.value.code) == (
        ErrorKind.CAPACITY,
        "ReservationCapacityExceeded",
    )


def test_a_reserved_launch_that_does_not_fit_its_reservation_is_refused_before_the_wire(
    aws: AWSHarness,
) -> None:
    rid = aws_capacity.seed_reservation(REGION, ZONE, "p5.48xlarge", 1)
    p = aws.provider()
    held = _by_id(p.reservations())[rid]
    bad = [
        _request(None),  # reserved, but no reservation
        _request(held, market=Market.ON_DEMAND),  # a reservation on another market
        _request(held, offer=_offer(zone=f"{REGION}b")),  # another zone
        _request(held, offer=_offer(itype="p4d.24xlarge")),  # another type
    ]
    for request in bad:
        with pytest.raises(ProviderError) as caught:
            p.launch(request)
        assert (caught.value.kind, caught.value.code) == (ErrorKind.INVALID, "ReservationMismatch")
    assert aws.launch_requests() == []


def test_capacity_block_offerings_are_listed_with_their_price_and_bought(aws: AWSHarness) -> None:
    start = NOW + timedelta(days=1)
    cheap = aws_capacity.seed_offering(REGION, ZONE, "p5.48xlarge", 1, start, 72, "2364.48")
    later = aws_capacity.seed_offering(
        REGION, f"{REGION}b", "p5.48xlarge", 1, start + timedelta(days=3), 72, "2500.00"
    )
    aws_capacity.seed_offering(REGION, ZONE, "p5.48xlarge", 2, start, 72, "4700.00")  # 2 nodes
    aws_capacity.seed_offering(REGION, ZONE, "p5.48xlarge", 1, NOW, 72, "2000.00")  # too early
    p = aws.provider()
    offers = p.capacity_offerings("p5.48xlarge", 1, 72, start_after=start)
    assert [o.id for o in offers] == [cheap, later]
    o = offers[0]
    assert (o.upfront_usd, o.currency, o.count, o.hours) == (2364.48, "USD", 1, 72.0)
    assert o.starts_at == start and o.zone == ZONE
    assert o.usd_per_instance_hour == pytest.approx(2364.48 / 72)
    sent = aws.sent("DescribeCapacityBlockOfferings")[-1]
    assert (sent["InstanceType"], sent["InstanceCount"], sent["CapacityDurationHours"]) == (
        "p5.48xlarge",
        "1",
        "72",
    )
    assert sent["StartDateRange"].startswith(start.strftime("%Y-%m-%dT%H:%M"))
    assert aws.sent("PurchaseCapacityBlock") == []  # listing buys nothing

    held = p.book(o)
    bought = aws.sent("PurchaseCapacityBlock")
    assert bought == [
        {
            "Action": "PurchaseCapacityBlock",
            "Version": bought[0]["Version"],
            "CapacityBlockOfferingId": cheap,
            "InstancePlatform": "Linux/UNIX",
        }
    ]
    assert held.kind is ReservationKind.CAPACITY_BLOCK and held.id.startswith("cr-")
    assert (held.starts_at, held.ends_at) == (start, start + timedelta(hours=72))
    assert held.held_usd_per_hour == pytest.approx(2364.48 / 72)
    assert held.id in _by_id(p.reservations())


def test_block_durations_are_the_ones_ec2_sells(aws: AWSHarness) -> None:
    assert [h for h in (24, 72, 336, 504, 4368) if block_hours_ok(h)] == [24, 72, 336, 504, 4368]
    assert not any(block_hours_ok(h) for h in (0, 12, 25, 360, 4392))
    with pytest.raises(ProviderError) as caught:
        aws.provider().capacity_offerings("p5.48xlarge", 1, 30)
    assert caught.value.kind is ErrorKind.INVALID
    assert aws.sent("DescribeCapacityBlockOfferings") == []


def test_plan_ranks_the_accounts_reservation_first_at_zero_marginal(aws: AWSHarness) -> None:
    """What `plan --held aws` does: the adapter lists what the account holds (on the wire, from
    the fake), the planner ranks the matching reservation first at a marginal $0/h, named;
    a reservation of another type is not offered."""
    from policies import parse_policy
    from provisioner.core.catalog import Catalog
    from provisioner.core.planner import PlanContext, plan_offers

    rid = aws_capacity.seed_reservation(REGION, ZONE, "p5.48xlarge", 2, available=2)
    aws_capacity.seed_reservation(REGION, ZONE, "p4d.24xlarge", 1)  # not a type the policy wants
    held = tuple(aws.provider().reservations())
    assert {r.id for r in held} >= {rid}
    policy = parse_policy(
        "name: held\nresources: {gpus: [H100], gpu_count: 8}\n"
        "market: reserved-then-spot-then-on-demand\n"
    )
    offers = [_offer(zone=ZONE), _offer(zone="us-east-1b")]
    result = plan_offers(
        policy, Catalog.from_offers(offers), PlanContext(now=NOW, reservations=held), top=None
    )
    first, rest = result.placements[0], result.placements[1:]
    assert first.market is Market.RESERVED and first.price_per_hour == 0.0
    assert first.reservation is not None and first.reservation.id == rid
    assert (first.offer.zone, first.offer.instance_type) == (ZONE, "p5.48xlarge")
    assert any(rid in why for why in first.reasons)
    assert all(p.market is not Market.RESERVED for p in rest)
    assert [p.market for p in rest[:1]] == [Market.SPOT]  # then the markets the policy names
