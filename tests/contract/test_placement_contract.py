"""The placement-group contract (issue 10), run against every cloud whose adapter places gangs.

A harness takes part by giving ``wire_placement(request)``: the placement construct a recorded
launch request carries on the wire, as the cloud reads it (the AWS ``Placement.GroupName``, the
GCP instance's ``resourcePolicies`` URL, the Azure VM's ``proximityPlacementGroup.id``, the
Alibaba ``DeploymentSetId``, the Tencent ``DisasterRecoverGroupIds``), or None where the request
names none. A harness without it, or an adapter that is not
:class:`providers.capabilities.PlacementGroups`, is skipped with the reason.

Each test drives the real adapter and SDK against the local server: the group is created once
whatever the number of calls, found again by its tags, named by every node's launch on the
wire, and deleted once the gang is gone (a second delete, or an unknown id, is not an error).
"""

from __future__ import annotations

from typing import Any

import pytest
from harness import Harness

from providers.base import ErrorKind, Provider, ProviderError
from providers.capabilities import PlacementGroups
from provisioner.core.models import (
    TAG_ATTEMPT,
    TAG_JOB,
    TAG_MANAGED,
    TAG_NODE,
    TAG_NODES,
    InstanceState,
    LaunchRequest,
    Market,
    placement_group_name,
)
from tests.waiting import until

pytestmark = pytest.mark.contract

USER_DATA = "#!/bin/sh\necho provisioner gang contract test\n"


def _placing(harness: Harness, provider: Provider) -> PlacementGroups:
    if not isinstance(provider, PlacementGroups):
        pytest.skip(f"{harness.name}: the adapter does not place gangs (no PlacementGroups)")
    if not hasattr(harness, "wire_placement"):
        pytest.skip(f"{harness.name}: the harness cannot read a placement off the wire")
    return provider


def _wire_placement(harness: Harness, request: dict[str, Any]) -> str | None:
    value: str | None = harness.wire_placement(request)  # type: ignore[attr-defined]
    return value


def _group(harness: Harness, provider: PlacementGroups, job: str = "gang-a") -> str:
    offer = harness.offer(Market.SPOT)
    tags = {TAG_MANAGED: "true", TAG_JOB: job, TAG_ATTEMPT: "1"}
    return provider.ensure_placement_group(
        placement_group_name(job, 1), offer.region, offer.zone, tags
    )


def _node(harness: Harness, group: str, node: int, nodes: int = 2) -> LaunchRequest:
    return LaunchRequest(
        job_id="gang-a",
        attempt=1,
        offer=harness.offer(Market.SPOT),
        market=Market.SPOT,
        bid_cap_per_hour=0.5,
        user_data=USER_DATA,
        node=node,
        nodes=nodes,
        placement_group=group,
    )


def _until_gone(provider: Provider, ids: list[str], *, within: float = 20.0) -> None:
    """Wait until the cloud reports each instance terminated, or gone altogether (NOT_FOUND:
    GCP and Azure delete it, as test_terminate allows): a cloud refuses to delete a group
    while a member is still shutting down (EC2's InvalidPlacementGroup.InUse)."""
    gone = until(lambda: {_state(provider, i) for i in ids} <= {InstanceState.TERMINATED}, within)
    assert gone, f"instances not terminated after {within}s: { {_state(provider, i) for i in ids} }"


def _state(provider: Provider, instance_id: str) -> InstanceState:
    try:
        return provider.get(instance_id).state
    except ProviderError as err:
        if err.kind is ErrorKind.NOT_FOUND:
            return InstanceState.TERMINATED
        raise


def test_ensure_is_idempotent_and_found_by_tags(harness: Harness, provider: Provider) -> None:
    placing = _placing(harness, provider)
    first = _group(harness, placing)
    second = _group(harness, placing)
    assert second == first, "a second ensure made a second group"

    found = placing.list_placement_groups({TAG_JOB: "gang-a"})
    assert [g.id for g in found] == [first]
    assert found[0].region == harness.offer(Market.SPOT).region
    assert found[0].tags.get(TAG_JOB) == "gang-a"
    assert found[0].tags.get(TAG_ATTEMPT) == "1"
    assert placing.list_placement_groups({TAG_JOB: "another-job"}) == []

    other = _group(harness, placing, job="gang-b")
    assert other != first
    assert {g.id for g in placing.list_placement_groups()} >= {first, other}


def test_every_node_of_the_gang_names_the_group_on_the_wire(
    harness: Harness, provider: Provider
) -> None:
    placing = _placing(harness, provider)
    group = _group(harness, placing)
    launched = [provider.launch(_node(harness, group, k)) for k in range(2)]

    assert len({i.id for i in launched}) == 2, "two nodes, two instances"
    assert [i.node for i in launched] == [0, 1]
    for inst in launched:
        assert inst.tags[TAG_NODES] == "2"
        assert inst.tags[TAG_JOB] == "gang-a"
    sent = harness.launch_requests()
    assert len(sent) == 2
    for request in sent:
        carried = _wire_placement(harness, request)
        assert carried is not None, f"a gang launch went out without its group: {request}"
        assert carried == group or carried.endswith("/" + group) or group.endswith(carried), (
            carried,
            group,
        )
    assert {i.tags[TAG_NODE] for i in provider.list({TAG_JOB: "gang-a"})} == {"0", "1"}

    # the same node launched twice (a crash between send and record) is still one instance
    again = provider.launch(_node(harness, group, 1))
    assert again.id == launched[1].id


def test_a_single_node_launch_names_no_group(harness: Harness, provider: Provider) -> None:
    _placing(harness, provider)
    provider.launch(
        LaunchRequest(
            job_id="solo",
            attempt=1,
            offer=harness.offer(Market.SPOT),
            market=Market.SPOT,
            bid_cap_per_hour=0.5,
            user_data=USER_DATA,
        )
    )
    assert _wire_placement(harness, harness.launch_requests()[-1]) is None


def test_delete_after_the_gang_is_gone(harness: Harness, provider: Provider) -> None:
    placing = _placing(harness, provider)
    group = _group(harness, placing)
    nodes = [provider.launch(_node(harness, group, k)) for k in range(2)]
    provider.terminate([i.id for i in nodes])
    _until_gone(provider, [i.id for i in nodes])

    placing.delete_placement_group(group)
    assert placing.list_placement_groups({TAG_JOB: "gang-a"}) == []
    placing.delete_placement_group(group)  # already gone: not an error
    # and a group made again under the same name after a delete is a fresh one that lists
    again = _group(harness, placing)
    assert [g.id for g in placing.list_placement_groups({TAG_JOB: "gang-a"})] == [again]
