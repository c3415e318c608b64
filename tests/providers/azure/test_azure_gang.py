"""Azure gangs beyond the placement contract: the proximity placement group on the wire (its
type, region, zone hint and tags), the group's ARM id on each node's VM body, Azure's refusal to
delete a group VMs still reference (classified, not retried, kept by the sweep), an absent group
(404 or 204) on delete, the managed tag on list, and an InfiniBand size launched as asked.

The real azure-mgmt-compute / azure-mgmt-network SDKs against tests/fakes/azure_server.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("azure.mgmt.compute")
pytest.importorskip("azure.mgmt.network")

from fakes.azure_server import AzureServer, Recorded

from providers.azure import AzureProvider
from providers.azure.placement import _group_and_name
from providers.base import ErrorKind, ProviderError, RetryPolicy
from providers.capabilities import PlacementGroups
from provisioner.core.models import (
    TAG_ATTEMPT,
    TAG_JOB,
    TAG_MANAGED,
    LaunchRequest,
    Market,
    Offer,
    placement_group_name,
)

TOKEN = "eyJ0eXAi.gang-test-azure-token.0123456789"
FAST = RetryPolicy(attempts=3, base_delay=0.0, max_delay=0.0)
TAGS = {TAG_JOB: "gang-a", TAG_ATTEMPT: "1"}
NAME = placement_group_name("gang-a", 1)


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


def nd_offer(zone: str = "eastus-2") -> Offer:
    return Offer(
        "azure", "eastus", zone, "Standard_ND96asr_v4", "A100", 8, 96, 900.0, 27.197, 5.4394
    )


def node(group: str | None, k: int, *, fabric: str = "", zone: str = "eastus-2") -> LaunchRequest:
    return LaunchRequest(
        "gang-a",
        1,
        nd_offer(zone),
        Market.SPOT,
        bid_cap_per_hour=9.0,
        user_data="#!/bin/sh\necho gang\n",
        node=k,
        nodes=2,
        placement_group=group,
        fabric=fabric,
    )


def ppg_requests(server: AzureServer, method: str) -> list[Recorded]:
    return [
        r for r in server.requests if r.method == method and "/proximityPlacementGroups" in r.path
    ]


def vm_body(server: AzureServer, name: str) -> dict[str, Any]:
    body: dict[str, Any] = next(
        r.body for r in server.launch_requests() if r.path.endswith(f"/virtualMachines/{name}")
    )
    return body


def test_the_adapter_places_gangs(provider: AzureProvider) -> None:
    assert isinstance(provider, PlacementGroups)


def test_the_group_is_a_standard_ppg_in_the_region_with_the_zone_hint_and_the_tags(
    server: AzureServer, provider: AzureProvider
) -> None:
    gid = provider.ensure_placement_group(NAME, "eastus", "eastus-2", TAGS)

    assert gid == server.ppg(NAME)["id"]  # type: ignore[index]
    assert gid.endswith(
        f"/resourceGroups/{server.resource_group}/providers/Microsoft.Compute/proximityPlacementGroups/{NAME}"
    )
    (put,) = ppg_requests(server, "PUT")
    assert put.path.endswith(f"/proximityPlacementGroups/{NAME}")
    assert put.body["location"] == "eastus"
    assert put.body["zones"] == ["2"]
    assert put.body["properties"]["proximityPlacementGroupType"] == "Standard"
    assert put.body["tags"] == {TAG_MANAGED: "true", **TAGS}

    # a second ensure finds it (a GET) and puts nothing
    assert provider.ensure_placement_group(NAME, "eastus", "eastus-2", TAGS) == gid
    assert len(ppg_requests(server, "PUT")) == 1


def test_an_offer_without_a_zone_gives_a_regional_group(
    server: AzureServer, provider: AzureProvider
) -> None:
    provider.ensure_placement_group(NAME, "eastus", "", TAGS)
    (put,) = ppg_requests(server, "PUT")
    assert "zones" not in put.body
    assert "zones" not in (server.ppg(NAME) or {})


def test_each_node_vm_names_the_group_by_its_arm_id_and_infiniband_launches_as_asked(
    server: AzureServer, provider: AzureProvider
) -> None:
    gid = provider.ensure_placement_group(NAME, "eastus", "eastus-2", TAGS)
    nodes = [provider.launch(node(gid, k, fabric="infiniband")) for k in range(2)]

    for k, inst in enumerate(nodes):
        body = vm_body(server, node(gid, k).name)
        props = body["properties"]
        assert props["proximityPlacementGroup"] == {"id": gid}
        assert props["hardwareProfile"]["vmSize"] == "Standard_ND96asr_v4"  # the IB size
        assert body["zones"] == ["2"]  # the zone of the group's hint
        assert inst.instance_type == "Standard_ND96asr_v4"
    group = server.ppg(NAME) or {}
    assert sorted(v["id"] for v in group["properties"]["virtualMachines"]) == sorted(
        i.id for i in nodes
    )


def test_a_bare_group_name_is_put_as_the_arm_id(
    server: AzureServer, provider: AzureProvider
) -> None:
    gid = provider.ensure_placement_group(NAME, "eastus", "eastus-2", TAGS)
    provider.launch(node(NAME, 0))
    assert vm_body(server, node(NAME, 0).name)["properties"]["proximityPlacementGroup"] == {
        "id": gid
    }


def test_a_vm_naming_a_missing_group_is_refused_and_cleaned_up(
    server: AzureServer, provider: AzureProvider
) -> None:
    with pytest.raises(ProviderError) as caught:
        provider.launch(node(provider.client.ppg_id("no-such-group"), 0))
    assert caught.value.kind is ErrorKind.INVALID
    assert caught.value.code == "InvalidResourceReference"
    assert server.nic(f"{node(None, 0).name}-nic") is None  # the NIC made for it is gone


def test_deleting_a_group_vms_still_reference_is_refused_classified_and_not_retried(
    server: AzureServer, provider: AzureProvider
) -> None:
    gid = provider.ensure_placement_group(NAME, "eastus", "eastus-2", TAGS)
    inst = provider.launch(node(gid, 0))

    with pytest.raises(ProviderError) as caught:
        provider.delete_placement_group(gid)
    assert caught.value.kind is ErrorKind.INVALID  # not NOT_FOUND (which would read as gone)
    assert caught.value.code == "OperationNotAllowed"
    assert len(ppg_requests(server, "DELETE")) == 1, "a refusal is not retried"
    assert [g.id for g in provider.list_placement_groups({TAG_JOB: "gang-a"})] == [gid]

    provider.terminate([inst.id])
    provider.delete_placement_group(gid)
    assert server.ppg(NAME) is None
    assert provider.list_placement_groups({TAG_JOB: "gang-a"}) == []


def test_an_absent_group_is_not_an_error_on_delete(
    server: AzureServer, provider: AzureProvider
) -> None:
    provider.delete_placement_group(provider.client.ppg_id("never-made"))  # the fake: 204
    gid = provider.ensure_placement_group(NAME, "eastus", "eastus-2", TAGS)
    server.inject_error("ResourceNotFound", operation="ppg.delete", status=404)
    provider.delete_placement_group(gid)  # a 404 ResourceNotFound: gone already
    assert server.ppg(NAME) is not None  # (the injected 404 deleted nothing)
    provider.delete_placement_group(NAME)  # a bare name, in the adapter's resource group
    assert server.ppg(NAME) is None


def test_list_keeps_only_managed_groups_with_every_tag(
    server: AzureServer, provider: AzureProvider
) -> None:
    gid = provider.ensure_placement_group(NAME, "eastus", "eastus-2", TAGS)
    other = provider.ensure_placement_group(
        placement_group_name("gang-a", 2),
        "eastus",
        "eastus-2",
        {TAG_JOB: "gang-a", TAG_ATTEMPT: "2"},
    )
    # a group someone else made in the resource group, carrying our job tag but not managed
    provider.client.compute.proximity_placement_groups.create_or_update(
        server.resource_group, "hand-made", {"location": "eastus", "tags": {TAG_JOB: "gang-a"}}
    )

    found = provider.list_placement_groups({TAG_JOB: "gang-a"})
    assert sorted(g.id for g in found) == sorted([gid, other])
    assert {g.region for g in found} == {"eastus"}
    assert [g.name for g in provider.list_placement_groups({TAG_ATTEMPT: "2"})] == [
        placement_group_name("gang-a", 2)
    ]
    assert {g.id for g in provider.list_placement_groups()} == {gid, other}


def test_throttling_on_create_is_retried_and_auth_is_not(
    server: AzureServer, provider: AzureProvider
) -> None:
    server.inject_error("TooManyRequests", operation="ppg.put")
    gid = provider.ensure_placement_group(NAME, "eastus", "eastus-2", TAGS)
    assert gid and len(ppg_requests(server, "PUT")) == 2

    server.inject_error("AuthorizationFailed", operation="ppg.list")
    with pytest.raises(ProviderError) as caught:
        provider.list_placement_groups()
    assert caught.value.kind is ErrorKind.AUTH
    assert TOKEN not in str(caught.value)


def test_group_and_name_of_an_id() -> None:
    gid = (
        "/subscriptions/s/resourceGroups/rg-other/providers/Microsoft.Compute/"
        "proximityPlacementGroups/prov-a-a1"
    )
    assert _group_and_name(gid, "rg") == ("rg-other", "prov-a-a1")
    assert _group_and_name("prov-a-a1", "rg") == ("rg", "prov-a-a1")
