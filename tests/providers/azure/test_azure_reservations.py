"""Azure held capacity: the capacity reservation groups the subscription holds with what is
free in each, and a launch into one with ``capacityReservation`` on the wire.

The real azure-mgmt-compute / azure-mgmt-network SDKs against tests/fakes/azure_server.py with
its capacity reservation routes (tests/fakes/azure_reservations.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

pytest.importorskip("azure.mgmt.compute")
pytest.importorskip("azure.mgmt.network")

from fakes.azure_server import AzureServer

from providers.azure import AzureProvider
from providers.base import ErrorKind, ProviderError, RetryPolicy
from providers.capabilities import HeldCapacity
from provisioner.core.models import LaunchRequest, Market, Offer, Reservation, ReservationKind

TOKEN = "eyJ0eXAi.held-test-azure-token.0123456789"
FAST = RetryPolicy(attempts=3, base_delay=0.0, max_delay=0.0)
H100 = "Standard_ND96isr_H100_v5"


@pytest.fixture
def server() -> Iterator[AzureServer]:
    with AzureServer(token=TOKEN) as s:
        yield s


@pytest.fixture
def provider(server: AzureServer) -> Iterator[AzureProvider]:
    p = AzureProvider(
        subscription_id=server.subscription_id,
        resource_group=server.resource_group,
        location="eastus",
        subnet_id=server.subnet_id,
        endpoint=server.endpoint,
        credentials=TOKEN,
        ssh_public_key="ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFake test@provisioner",
        retry=FAST,
        polling_interval=0,
    )
    yield p
    p.close()


def h100_offer(zone: str = "eastus-1") -> Offer:
    return Offer("azure", "eastus", zone, H100, "H100", 8, 96, 1900.0, 98.32, 39.0)


def launch_request(held: Reservation | None, market: Market = Market.RESERVED) -> LaunchRequest:
    return LaunchRequest(
        "held-job", 1, h100_offer(), market, user_data="#!/bin/sh\ntrue\n", reservation=held
    )


def _seed(server: AzureServer) -> None:
    server.add_group("crg-h100", "eastus", ["1"])
    server.add_reservation("crg-h100", "cr-h100", H100, 2, "1")
    server.add_reservation("crg-h100", "cr-cpu", "Standard_D4s_v5", 8, "1")  # no GPU: left out
    server.add_group("crg-block", "eastus", ["1"], reservation_type="Block")
    server.add_reservation("crg-block", "blk", H100, 4, "1", start="2027-03-01", end="2027-03-08")
    server.add_group("crg-open", "eastus", ["2"], reservation_type="Open")
    server.add_reservation("crg-open", "open-1", H100, 1, "2")
    server.add_group("crg-west", "westus2", ["1"])  # another location: left out
    server.add_reservation("crg-west", "w", H100, 1, "1")


def test_reservations_lists_gpu_capacity_reservations_with_what_is_free(
    server: AzureServer, provider: AzureProvider
) -> None:
    assert isinstance(provider, HeldCapacity)
    _seed(server)
    held = {r.id: r for r in provider.reservations()}
    assert set(held) == {"crg-h100", "crg-block", "crg-open"}
    r = held["crg-h100"]
    assert (r.kind, r.total, r.free, r.targeted) == (ReservationKind.ON_DEMAND, 2, 2, True)
    assert (r.region, r.zone, r.instance_type) == ("eastus", "eastus-1", H100)
    assert r.ref.endswith("/capacityReservationGroups/crg-h100") and r.ends_at is None
    b = held["crg-block"]
    assert b.kind is ReservationKind.CAPACITY_BLOCK and b.total == 4
    assert (b.starts_at, b.ends_at) == (
        datetime(2027, 3, 1, tzinfo=UTC),
        datetime(2027, 3, 8, tzinfo=UTC),
    )
    assert not held["crg-open"].targeted and held["crg-open"].zone == "eastus-2"
    gets = [r for r in server.requests if r.method == "GET" and "/capacityReservations/" in r.path]
    assert gets and all(g.query.get("$expand") == "instanceView" for g in gets)


def test_launch_into_a_capacity_reservation_group_names_it_on_the_wire(
    server: AzureServer, provider: AzureProvider
) -> None:
    _seed(server)
    held = {r.id: r for r in provider.reservations()}["crg-h100"]
    instance = provider.launch(launch_request(held))
    vm = [r for r in server.requests if r.method == "PUT" and "/virtualMachines/" in r.path][-1]
    props = vm.body["properties"]
    assert props["capacityReservation"] == {"capacityReservationGroup": {"id": held.ref}}
    assert props["priority"] == "Regular"
    assert "billingProfile" not in props and "evictionPolicy" not in props  # no spot field
    assert vm.body["zones"] == ["1"]
    assert instance.market is Market.RESERVED
    view = server.capacity_reservation("crg-h100", "cr-h100")
    allocated = view["properties"]["instanceView"]["utilizationInfo"]["virtualMachinesAllocated"]
    assert [a["id"] for a in allocated] == [instance.id]
    assert {r.id: r for r in provider.reservations()}["crg-h100"].free == 1
    provider.terminate([instance.id])
    assert {r.id: r for r in provider.reservations()}["crg-h100"].free == 2


def test_a_reserved_launch_that_does_not_fit_is_refused_before_the_wire(
    server: AzureServer, provider: AzureProvider
) -> None:
    _seed(server)
    held = {r.id: r for r in provider.reservations()}["crg-open"]  # zone 2, the offer zone 1
    for bad in (
        launch_request(None),
        launch_request(held),
        launch_request(held, market=Market.SPOT),
    ):
        with pytest.raises(ProviderError) as caught:
            provider.launch(bad)
        assert (caught.value.kind, caught.value.code) == (ErrorKind.INVALID, "ReservationMismatch")
    assert not [r for r in server.requests if r.method == "PUT"]
