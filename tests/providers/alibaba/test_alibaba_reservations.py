"""Alibaba held capacity: the capacity reservations (private pools) the account holds with what
is free in each, and a launch into one with ``PrivatePoolOptions`` on the wire.

The real adapter and alibabacloud SDK against tests/fakes/alibaba_server.py with its capacity
reservations (tests/fakes/alibaba_capacity.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

pytest.importorskip("alibabacloud_ecs20140526")

from fakes.alibaba_server import AlibabaFakeServer

from providers.alibaba import AlibabaProvider
from providers.base import ErrorKind, ProviderError, RetryPolicy
from providers.capabilities import HeldCapacity
from provisioner.core.models import LaunchRequest, Market, Offer, Reservation, ReservationKind

FAST = RetryPolicy(attempts=3, base_delay=0.0005, max_delay=0.002)
A10 = "ecs.gn7i-c8g1.2xlarge"
ZONE = "cn-hangzhou-h"


@pytest.fixture
def server() -> Iterator[AlibabaFakeServer]:
    with AlibabaFakeServer() as srv:
        yield srv


@pytest.fixture
def provider(server: AlibabaFakeServer) -> Iterator[AlibabaProvider]:
    p = AlibabaProvider(
        region=server.region,
        endpoint=server.endpoint,
        credentials={"access_key_id": "LTAI5tHeldTestKeyId01", "access_key_secret": "held-s3cret"},
        image_id="ubuntu_22_04_x64_20G_alibase_20240101.vhd",
        vswitch_id="vsw-bp1test",
        security_group_id="sg-bp1test",
        retry=FAST,
    )
    p.client.page = 2  # a small page: the list crosses pages
    yield p
    p.close()


def a10_offer(zone: str = ZONE) -> Offer:
    return Offer("alibaba", "cn-hangzhou", zone, A10, "A10", 1, 8, 30, 1.2, 0.36)


def launch_request(
    held: Reservation | None, market: Market = Market.RESERVED, zone: str = ZONE
) -> LaunchRequest:
    return LaunchRequest(
        "held-job", 1, a10_offer(zone), market, user_data="#!/bin/sh\ntrue\n", reservation=held
    )


def test_reservations_lists_gpu_private_pools_with_what_is_free(
    server: AlibabaFakeServer, provider: AlibabaProvider
) -> None:
    assert isinstance(provider, HeldCapacity)
    target = server.add_capacity_reservation(server.region, ZONE, A10, 4, used=1)
    limited = server.add_capacity_reservation(
        server.region, ZONE, A10, 2, match="Open", end="2027-02-01T00:00:00Z"
    )
    server.add_capacity_reservation(server.region, ZONE, "ecs.g7.xlarge", 8)  # no GPU
    server.add_capacity_reservation(server.region, ZONE, A10, 2, status="Released")  # ended
    held = {r.id: r for r in provider.reservations()}
    assert set(held) == {target, limited}
    r = held[target]
    assert (r.kind, r.total, r.free, r.targeted) == (ReservationKind.ON_DEMAND, 4, 3, True)
    assert (r.region, r.zone, r.instance_type, r.ends_at) == ("cn-hangzhou", ZONE, A10, None)
    o = held[limited]
    assert not o.targeted and o.ends_at == datetime(2027, 2, 1, tzinfo=UTC)
    calls = server.calls("DescribeCapacityReservations")
    assert len(calls) >= 2  # four pools at two a page: the pages are walked
    assert all(c.params["RegionId"] == "cn-hangzhou" for c in calls)


def test_launch_into_a_private_pool_names_it_on_the_wire(
    server: AlibabaFakeServer, provider: AlibabaProvider
) -> None:
    pool = server.add_capacity_reservation(server.region, ZONE, A10, 2)
    held = {r.id: r for r in provider.reservations()}[pool]
    instance = provider.launch(launch_request(held))
    run = server.calls("RunInstances")[-1].params
    assert run["PrivatePoolOptions.MatchCriteria"] == "Target"
    assert run["PrivatePoolOptions.Id"] == pool
    assert run["SpotStrategy"] == "NoSpot" and "SpotPriceLimit" not in run  # no spot field
    assert instance.market is Market.RESERVED
    assert {r.id: r for r in provider.reservations()}[pool].free == 1
    provider.terminate([instance.id])
    assert {r.id: r for r in provider.reservations()}[pool].free == 2


def test_a_reserved_launch_that_does_not_fit_is_refused_before_the_wire(
    server: AlibabaFakeServer, provider: AlibabaProvider
) -> None:
    pool = server.add_capacity_reservation(server.region, ZONE, A10, 2)
    held = {r.id: r for r in provider.reservations()}[pool]
    for bad in (
        launch_request(None),
        launch_request(held, market=Market.SPOT),
        launch_request(held, zone="cn-hangzhou-i"),
    ):
        with pytest.raises(ProviderError) as caught:
            provider.launch(bad)
        assert (caught.value.kind, caught.value.code) == (ErrorKind.INVALID, "ReservationMismatch")
    assert server.calls("RunInstances") == []
