"""GCP gangs beyond the placement contract: the compact placement policy and a node's
``resourcePolicies`` on the wire, a policy in use classified, one policy whatever crashes between
its insert and its record, tags kept in the description and listed by them.

The real google-cloud-compute SDK (REST transport) against tests/fakes/gcp_server.py, whose
resource policies follow the Compute Engine REST reference (tests/fakes/gcp_policies.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

pytest.importorskip("google.cloud.compute_v1")

from fakes.gcp_server import GCPServer

from providers.base import ErrorKind, ProviderError, RetryPolicy
from providers.gcp import GCPProvider, classify
from provisioner.core.models import (
    TAG_ATTEMPT,
    TAG_JOB,
    TAG_MANAGED,
    LaunchRequest,
    Market,
    Offer,
    placement_group_name,
)

PROJECT = "gang-test"
ZONE = "us-central1-a"
REGION = "us-central1"
TOKEN = "ya29.gang-test-token-0123456789abcdef"
FAST = RetryPolicy(attempts=3, base_delay=0.0, max_delay=0.0)
TAGS = {TAG_MANAGED: "true", TAG_JOB: "gang-x", TAG_ATTEMPT: "1"}
NAME = placement_group_name("gang-x", 1)
PATH = f"projects/{PROJECT}/regions/{REGION}/resourcePolicies/{NAME}"


@pytest.fixture
def server() -> Iterator[GCPServer]:
    with GCPServer(PROJECT, token=TOKEN) as s:
        yield s


def make_provider(server: GCPServer) -> GCPProvider:
    from google.oauth2.credentials import Credentials

    return GCPProvider(
        project=PROJECT,
        zones=[ZONE],
        endpoint=server.endpoint,
        credentials=Credentials(token=TOKEN),
        retry=FAST,
    )


@pytest.fixture
def provider(server: GCPServer) -> Iterator[GCPProvider]:
    p = make_provider(server)
    yield p
    p.close()


def _offer(zone: str = ZONE) -> Offer:
    return Offer("gcp", zone.rsplit("-", 1)[0], zone, "g2-standard-4", "L4", 1, 4, 16.0, 0.7, 0.39)


def _node(group: str | None, node: int, zone: str = ZONE) -> LaunchRequest:
    return LaunchRequest(
        job_id="gang-x",
        attempt=1,
        offer=_offer(zone),
        market=Market.SPOT,
        user_data="#!/bin/sh\ntrue\n",
        node=node,
        nodes=2,
        placement_group=group,
    )


def _sent(server: GCPServer, method: str, suffix: str) -> list[dict[str, object]]:
    return [
        {"query": r.query, "body": r.body}
        for r in server.requests
        if r.method == method and r.path.endswith(suffix)
    ]


def test_the_policy_is_compact_with_the_tags_in_its_description(
    server: GCPServer, provider: GCPProvider
) -> None:
    gid = provider.ensure_placement_group(NAME, REGION, ZONE, TAGS)
    assert gid == PATH

    [insert] = _sent(server, "POST", f"/regions/{REGION}/resourcePolicies")
    body = insert["body"]
    assert isinstance(body, dict)
    assert body["name"] == NAME
    assert body["groupPlacementPolicy"] == {"collocation": "COLLOCATED"}  # no vmCount
    assert json.loads(body["description"]) == TAGS
    assert insert["query"]["requestId"]  # type: ignore[index]
    # the regional operation was waited on, and the policy is ready
    assert [r.path for r in server.requests if r.path.endswith("/wait")][-1].startswith(
        f"/compute/v1/projects/{PROJECT}/regions/{REGION}/operations/"
    )
    stored = server.policy(NAME, REGION)
    assert stored is not None and stored["status"] == "READY"


def test_a_node_names_the_policy_and_the_instance_keeps_it(
    server: GCPServer, provider: GCPProvider
) -> None:
    gid = provider.ensure_placement_group(NAME, REGION, ZONE, TAGS)
    instance = provider.launch(_node(gid, 0))

    body = server.launch_requests()[-1].body
    assert body["resourcePolicies"] == [PATH]
    assert body["scheduling"]["onHostMaintenance"] == "TERMINATE"  # compact policies need it
    kept = server.instance(instance.id.rsplit("/", 1)[-1], ZONE)
    assert kept is not None
    assert kept["resourcePolicies"] == [f"{server.endpoint}/compute/v1/{PATH}"]


def test_a_single_node_names_no_policy(server: GCPServer, provider: GCPProvider) -> None:
    provider.launch(
        LaunchRequest(job_id="solo", attempt=1, offer=_offer(), market=Market.SPOT, user_data="x")
    )
    assert "resourcePolicies" not in server.launch_requests()[-1].body


def test_a_policy_in_use_raises_classified_and_is_not_retried(
    server: GCPServer, provider: GCPProvider
) -> None:
    gid = provider.ensure_placement_group(NAME, REGION, ZONE, TAGS)
    node = provider.launch(_node(gid, 0))

    with pytest.raises(ProviderError) as caught:
        provider.delete_placement_group(gid)
    assert caught.value.code == "resourceInUseByAnotherResource"
    assert caught.value.kind is ErrorKind.INVALID
    assert len(_sent(server, "DELETE", f"/resourcePolicies/{NAME}")) == 1
    assert [g.id for g in provider.list_placement_groups({TAG_JOB: "gang-x"})] == [gid]

    provider.terminate([node.id])
    provider.delete_placement_group(gid)
    assert server.policy(NAME, REGION) is None
    assert provider.list_placement_groups({TAG_JOB: "gang-x"}) == []


def test_the_in_use_error_is_classified_by_the_table() -> None:
    from google.api_core import exceptions as gexc

    err = gexc.BadRequest(
        "in use",
        errors=[{"reason": "resourceInUseByAnotherResource", "message": "in use"}],
    )
    classified = classify(err)
    assert classified is not None and classified.kind is ErrorKind.INVALID
    assert classified.code == "resourceInUseByAnotherResource"


def test_an_insert_whose_answer_is_lost_gives_one_policy(
    server: GCPServer, provider: GCPProvider
) -> None:
    """The insert took effect and its answer was lost (503): the retry carries the same
    requestId, Compute Engine answers the same operation, and there is one policy."""
    server.lose_answer("policy-insert")
    gid = provider.ensure_placement_group(NAME, REGION, ZONE, TAGS)

    inserts = _sent(server, "POST", f"/regions/{REGION}/resourcePolicies")
    assert len(inserts) == 2
    assert inserts[0]["query"] == inserts[1]["query"]  # one requestId
    assert [p["name"] for p in server.policies()] == [NAME]
    assert [g.id for g in provider.list_placement_groups({TAG_JOB: "gang-x"})] == [gid]


def test_a_crash_after_the_insert_finds_the_policy_again(server: GCPServer) -> None:
    first = make_provider(server)
    gid = first.ensure_placement_group(NAME, REGION, ZONE, TAGS)
    first.close()

    after = make_provider(server)
    assert after.ensure_placement_group(NAME, REGION, ZONE, TAGS) == gid
    after.close()
    assert len(_sent(server, "POST", f"/regions/{REGION}/resourcePolicies")) == 1
    assert len(server.policies()) == 1


def test_already_exists_at_insert_means_it_is_there(
    server: GCPServer, provider: GCPProvider
) -> None:
    """Another process made it between our get and our insert: 409 alreadyExists."""
    provider.ensure_placement_group(NAME, REGION, ZONE, TAGS)
    server.inject_error("notFound", operation="policy-get")
    assert provider.ensure_placement_group(NAME, REGION, ZONE, TAGS) == PATH
    assert len(_sent(server, "POST", f"/regions/{REGION}/resourcePolicies")) == 2
    assert len(server.policies()) == 1


def test_list_reads_the_tags_from_the_description(server: GCPServer, provider: GCPProvider) -> None:
    mine = provider.ensure_placement_group(NAME, REGION, ZONE, TAGS)
    other = provider.ensure_placement_group(
        placement_group_name("gang-y", 2),
        "europe-west4",
        "europe-west4-a",
        {**TAGS, TAG_JOB: "gang-y"},
    )
    from google.cloud import compute_v1

    c = provider.client.clients()
    c.resource_policies.insert(  # someone else's policy, no tags of ours
        project=PROJECT,
        region=REGION,
        resource_policy_resource=compute_v1.ResourcePolicy(
            name="theirs", description="a policy of someone else's"
        ),
    )

    found = {g.id: (g.region, g.tags) for g in provider.list_placement_groups()}
    assert found == {mine: (REGION, TAGS), other: ("europe-west4", {**TAGS, TAG_JOB: "gang-y"})}
    assert [g.name for g in provider.list_placement_groups({TAG_JOB: "gang-y"})] == [
        placement_group_name("gang-y", 2)
    ]
    listed = _sent(server, "GET", "/aggregated/resourcePolicies")[-1]
    assert listed["query"]["filter"] == f'description eq ".*{TAG_MANAGED}.*"'  # type: ignore[index]


def test_a_launch_into_another_regions_policy_is_refused_before_sending(
    server: GCPServer, provider: GCPProvider
) -> None:
    gid = provider.ensure_placement_group(NAME, "europe-west4", "europe-west4-a", TAGS)
    with pytest.raises(ProviderError) as caught:
        provider.launch(_node(gid, 0))
    assert caught.value.kind is ErrorKind.INVALID
    assert server.launch_requests() == []


def test_an_unknown_policy_is_not_an_error_to_delete(
    server: GCPServer, provider: GCPProvider
) -> None:
    provider.delete_placement_group(f"projects/{PROJECT}/regions/{REGION}/resourcePolicies/gone")
    provider.delete_placement_group("not-an-id-of-ours")  # nothing sent for it
    assert len(_sent(server, "DELETE", "/resourcePolicies/gone")) == 1


def test_the_fake_refuses_an_instance_naming_a_missing_policy(
    server: GCPServer, provider: GCPProvider
) -> None:
    with pytest.raises(ProviderError) as caught:
        provider.launch(_node(f"projects/{PROJECT}/regions/{REGION}/resourcePolicies/nope", 0))
    assert caught.value.kind is ErrorKind.NOT_FOUND
