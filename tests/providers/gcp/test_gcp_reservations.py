"""GCP held capacity and flex-start: the reservations and calendar-mode bookings the project
holds, a launch into each with ``reservationAffinity`` on the wire, and a flex-start VM's
scheduling fields.

The real google-cloud-compute SDK (REST transport) against tests/fakes/gcp_server.py with its
reservation routes (tests/fakes/gcp_reservations.py). Times come from the caller's clock.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

pytest.importorskip("google.cloud.compute_v1")

from fakes.gcp_server import GCPServer

from providers.base import ErrorKind, ProviderError, RetryPolicy
from providers.capabilities import HeldCapacity
from providers.gcp import GCPProvider
from provisioner.core.models import LaunchRequest, Market, Offer, Reservation, ReservationKind

PROJECT = "held-test"
ZONE = "us-central1-b"
TOKEN = "ya29.held-test-token-abcdef0123456789"
FAST = RetryPolicy(attempts=3, base_delay=0.0, max_delay=0.0)
NOW = datetime.now(UTC).replace(microsecond=0)


@pytest.fixture
def server() -> Iterator[GCPServer]:
    with GCPServer(PROJECT, token=TOKEN) as s:
        yield s


def make_provider(server: GCPServer, **kw: Any) -> GCPProvider:
    from google.oauth2.credentials import Credentials

    options: dict[str, Any] = {
        "project": PROJECT,
        "zones": [ZONE],
        "endpoint": server.endpoint,
        "credentials": Credentials(token=TOKEN),
        "retry": FAST,
    }
    options.update(kw)
    return GCPProvider(**options)


@pytest.fixture
def provider(server: GCPServer) -> Iterator[GCPProvider]:
    p = make_provider(server)
    yield p
    p.close()


def a3_offer() -> Offer:
    return Offer("gcp", "us-central1", ZONE, "a3-highgpu-8g", "H100", 8, 208, 1872, 88.25, 39.0)


def launch_request(held: Reservation | None, market: Market = Market.RESERVED) -> LaunchRequest:
    return LaunchRequest(
        "held-job", 1, a3_offer(), market, user_data="#!/bin/sh\ntrue\n", reservation=held
    )


def inserts(server: GCPServer) -> list[dict[str, Any]]:
    return [r.body for r in server.launch_requests()]


def test_reservations_lists_gpu_reservations_and_calendar_bookings(
    server: GCPServer, provider: GCPProvider
) -> None:
    assert isinstance(provider, HeldCapacity)
    server.add_reservation(ZONE, "team-a3", "a3-highgpu-8g", 4, in_use=1, required=False)
    server.add_reservation(
        ZONE, "cal-a3", "a3-highgpu-8g", 2, delete_at=NOW + timedelta(days=3)
    )  # a calendar-mode booking, delivered
    server.add_reservation(ZONE, "cpu-only", "n2-standard-8", 10)  # no GPU: left out
    server.add_reservation(ZONE, "going", "a3-highgpu-8g", 1, status="DELETING")  # not usable
    server.add_future_reservation(
        ZONE, "fr-next", "a3-highgpu-8g", 2, NOW + timedelta(days=7), NOW + timedelta(days=9),
        reservation_name="next-week",
    )  # fmt: skip
    server.add_future_reservation(
        ZONE,
        "fr-cal",
        "a3-highgpu-8g",
        2,
        NOW - timedelta(days=1),
        NOW + timedelta(days=3),
        procurement="FULFILLED",
        reservation_name="cal-a3",
    )  # fmt: skip  (delivered: listed once, by its reservation)
    server.add_future_reservation(
        ZONE, "fr-default", "a3-highgpu-8g", 2, NOW + timedelta(days=7), NOW + timedelta(days=9),
        mode="DEFAULT",
    )  # fmt: skip
    held = {r.id: r for r in provider.reservations()}
    assert set(held) == {"team-a3", "cal-a3", "next-week"}
    open_one = held["team-a3"]
    assert (open_one.kind, open_one.total, open_one.free) == (ReservationKind.ON_DEMAND, 4, 3)
    assert (open_one.zone, open_one.region, open_one.instance_type) == (
        ZONE,
        "us-central1",
        "a3-highgpu-8g",
    )
    assert not open_one.targeted and open_one.ends_at is None and open_one.usable_at(NOW)
    cal = held["cal-a3"]
    assert cal.kind is ReservationKind.CALENDAR and cal.ends_at == NOW + timedelta(days=3)
    assert cal.targeted and cal.free == 2
    ahead = held["next-week"]
    assert ahead.kind is ReservationKind.CALENDAR
    assert (ahead.starts_at, ahead.ends_at) == (NOW + timedelta(days=7), NOW + timedelta(days=9))
    assert not ahead.usable_at(NOW) and ahead.usable_at(NOW + timedelta(days=8))
    paths = [r.path for r in server.requests if r.method == "GET"]
    assert f"/compute/v1/projects/{PROJECT}/aggregated/reservations" in paths
    assert f"/compute/v1/projects/{PROJECT}/aggregated/futureReservations" in paths


def test_launch_into_a_reservation_names_it_in_reservation_affinity(
    server: GCPServer, provider: GCPProvider
) -> None:
    server.add_reservation(ZONE, "team-a3", "a3-highgpu-8g", 2)
    held = {r.id: r for r in provider.reservations()}["team-a3"]
    instance = provider.launch(launch_request(held))
    body = inserts(server)[-1]
    assert body["reservationAffinity"] == {
        "consumeReservationType": "SPECIFIC_RESERVATION",
        "key": "compute.googleapis.com/reservation-name",
        "values": ["team-a3"],
    }
    assert body["scheduling"]["provisioningModel"] == "STANDARD"
    assert "instanceTerminationAction" not in body["scheduling"]  # no spot field
    assert server.reservation(ZONE, "team-a3")["specificReservation"]["inUseCount"] == "1"
    assert instance.market is Market.RESERVED
    assert {r.id: r for r in provider.reservations()}["team-a3"].free == 1
    provider.terminate([instance.id])
    assert server.reservation(ZONE, "team-a3")["specificReservation"]["inUseCount"] == "0"


def test_launch_into_a_calendar_reservation_is_reservation_bound(
    server: GCPServer, provider: GCPProvider
) -> None:
    server.add_reservation(ZONE, "cal-a3", "a3-highgpu-8g", 1, delete_at=NOW + timedelta(days=2))
    held = {r.id: r for r in provider.reservations()}["cal-a3"]
    provider.launch(launch_request(held))
    body = inserts(server)[-1]
    assert body["reservationAffinity"]["values"] == ["cal-a3"]
    assert body["scheduling"]["provisioningModel"] == "RESERVATION_BOUND"
    assert body["scheduling"]["instanceTerminationAction"] == "DELETE"


def test_a_reserved_launch_that_does_not_fit_is_refused_before_the_wire(
    server: GCPServer, provider: GCPProvider
) -> None:
    server.add_reservation(ZONE, "team-a3", "a3-highgpu-8g", 1)
    held = {r.id: r for r in provider.reservations()}["team-a3"]
    for bad in (
        launch_request(None),
        launch_request(held, market=Market.ON_DEMAND),
        LaunchRequest(
            "held-job",
            1,
            Offer("gcp", "us-central1", "us-central1-a", "g2-standard-4", "L4", 1, 4, 16, 0.7, 0.3),
            Market.RESERVED,
            reservation=held,
        ),
    ):
        with pytest.raises(ProviderError) as caught:
            provider.launch(bad)
        assert (caught.value.kind, caught.value.code) == (ErrorKind.INVALID, "ReservationMismatch")
    assert inserts(server) == []


def test_flex_start_on_demand_launch_carries_dws_fields(server: GCPServer) -> None:
    p = make_provider(server, flex_start_hours=72, flex_start_wait_s=7200)
    try:
        instance = p.launch(launch_request(None, market=Market.ON_DEMAND))
    finally:
        p.close()
    body = inserts(server)[-1]
    scheduling = body["scheduling"]
    assert scheduling["provisioningModel"] == "FLEX_START"
    assert scheduling["maxRunDuration"] == {"seconds": str(72 * 3600)}
    assert scheduling["instanceTerminationAction"] == "DELETE"
    assert body["reservationAffinity"] == {"consumeReservationType": "NO_RESERVATION"}
    assert body["params"] == {"requestValidForDuration": {"seconds": "7200"}}
    assert instance.market is Market.ON_DEMAND


def test_flex_start_leaves_spot_launches_alone_and_is_bounded(server: GCPServer) -> None:
    p = make_provider(server, flex_start_hours=24)
    try:
        p.launch(
            LaunchRequest("spot-job", 1, a3_offer(), Market.SPOT, 50.0, user_data="#!/bin/sh\n")
        )
    finally:
        p.close()
    assert inserts(server)[-1]["scheduling"]["provisioningModel"] == "SPOT"
    with pytest.raises(ValueError, match="flex_start_hours"):
        make_provider(server, flex_start_hours=24 * 8)
