"""Alibaba deployment sets and Tencent placement groups (issue 10), beyond the placement
contract: what each cloud is sent to create the group, a delete refused while nodes are in it
(classified, not taken as gone), and a launch into another region's group refused before
anything is sent."""

from __future__ import annotations

import json

import pytest
from harness import Harness

from providers.base import ErrorKind, Provider, ProviderError
from providers.capabilities import PlacementGroups
from provisioner.core.models import (
    TAG_ATTEMPT,
    TAG_JOB,
    TAG_MANAGED,
    LaunchRequest,
    Market,
    placement_group_name,
)

pytestmark = pytest.mark.contract

CREATE = {"alibaba": "CreateDeploymentSet", "tencent": "CreateDisasterRecoverGroup"}


def _regional(harness: Harness, provider: Provider) -> PlacementGroups:
    if harness.name not in CREATE:
        pytest.skip("Alibaba and Tencent only")
    assert isinstance(provider, PlacementGroups)
    return provider


def _group(harness: Harness, provider: PlacementGroups) -> str:
    o = harness.offer(Market.SPOT)
    tags = {TAG_MANAGED: "true", TAG_JOB: "gang-r", TAG_ATTEMPT: "3"}
    return provider.ensure_placement_group(
        placement_group_name("gang-r", 3), o.region, o.zone, tags
    )


def _node(harness: Harness, group: str, node: int) -> LaunchRequest:
    return LaunchRequest(
        job_id="gang-r",
        attempt=3,
        offer=harness.offer(Market.SPOT),
        market=Market.SPOT,
        bid_cap_per_hour=0.5,
        user_data="#!/bin/sh\ntrue\n",
        node=node,
        nodes=2,
        placement_group=group,
    )


def test_the_group_is_created_close_packed_and_tagged(harness: Harness, provider: Provider) -> None:
    placing = _regional(harness, provider)
    gid = _group(harness, placing)
    region = harness.offer(Market.SPOT).region
    assert gid.startswith(region + "/")
    [sent] = [r for r in harness.server.calls(CREATE[harness.name])]  # type: ignore[attr-defined]
    params = sent.params
    name = placement_group_name("gang-r", 3)
    if harness.name == "alibaba":
        assert params["DeploymentSetName"] == name
        assert params["Strategy"] == "LowLatency"
        assert json.loads(params["Description"])["provisioner-tags"][TAG_JOB] == "gang-r"
    else:
        assert params["Name"] == name and params["Type"] == "HOST"
        [spec] = params["TagSpecification"]
        assert spec["ResourceType"] == "ps"
        assert {"Key": TAG_ATTEMPT, "Value": "3"} in spec["Tags"]
    assert params["ClientToken"] == name
    [found] = placing.list_placement_groups({TAG_JOB: "gang-r"})
    assert found.tags[TAG_ATTEMPT] == "3" and found.name == name


def test_a_group_in_use_is_refused_not_taken_as_gone(harness: Harness, provider: Provider) -> None:
    placing = _regional(harness, provider)
    gid = _group(harness, placing)
    provider.launch(_node(harness, gid, 0))
    with pytest.raises(ProviderError) as err:
        placing.delete_placement_group(gid)
    assert err.value.kind is not ErrorKind.NOT_FOUND
    assert not err.value.kind.retryable
    assert [g.id for g in placing.list_placement_groups({TAG_JOB: "gang-r"})] == [gid]


def test_a_node_is_not_sent_into_another_regions_group(
    harness: Harness, provider: Provider
) -> None:
    _regional(harness, provider)
    before = len(harness.launch_requests())
    with pytest.raises(ProviderError) as err:
        provider.launch(_node(harness, "elsewhere-1/ps-or-ds-id", 0))
    assert err.value.kind is ErrorKind.INVALID
    assert len(harness.launch_requests()) == before
