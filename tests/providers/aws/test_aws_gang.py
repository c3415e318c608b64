"""AWS gangs beyond the placement contract: the cluster group and the EFA interface on the wire,
a group in use classified, one group whatever crashes between its create and its record, groups
in another region.

The real AWSProvider and boto3 against moto's server (tests/contract/harness_aws.py), with
EC2's placement-group actions added to moto by tests/fakes/aws_placement.py (moto has none).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("boto3")
pytest.importorskip("moto")

CONTRACT = Path(__file__).resolve().parents[2] / "contract"
if str(CONTRACT) not in sys.path:
    sys.path.insert(0, str(CONTRACT))

from fakes.aws_placement import placement_of  # noqa: E402
from harness_aws import ACCESS_KEY, REGION, SECRET, ZONE, AWSHarness, make_harness  # noqa: E402

from providers.aws import AWSProvider, classify  # noqa: E402
from providers.base import ErrorKind, ProviderError  # noqa: E402
from provisioner.core.models import (  # noqa: E402
    TAG_ATTEMPT,
    TAG_JOB,
    TAG_MANAGED,
    LaunchRequest,
    Market,
    placement_group_name,
)

OTHER_REGION = "us-west-2"
TAGS = {TAG_MANAGED: "true", TAG_JOB: "gang-x", TAG_ATTEMPT: "1"}
NAME = placement_group_name("gang-x", 1)


@pytest.fixture
def aws() -> Iterator[AWSHarness]:
    with make_harness() as h:
        yield h


def _ec2(aws: AWSHarness, region: str = REGION) -> Any:
    import boto3

    return boto3.client(
        "ec2",
        region_name=region,
        endpoint_url=aws.endpoint,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET,
    )


def _network(aws: AWSHarness) -> tuple[str, str]:
    """A subnet in ZONE and a security group in its VPC, made in moto."""
    ec2 = _ec2(aws)
    vpc = ec2.create_vpc(CidrBlock="10.20.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.20.1.0/24", AvailabilityZone=ZONE)
    group = ec2.create_security_group(GroupName="gang", Description="gang", VpcId=vpc)
    ec2.close()
    return subnet["Subnet"]["SubnetId"], group["GroupId"]


def _node(aws: AWSHarness, group: str | None, node: int, fabric: str = "") -> LaunchRequest:
    return LaunchRequest(
        job_id="gang-x",
        attempt=1,
        offer=aws.offer(Market.SPOT),
        market=Market.SPOT,
        bid_cap_per_hour=0.5,
        user_data="#!/bin/sh\ntrue\n",
        node=node,
        nodes=2,
        placement_group=group,
        fabric=fabric,
    )


def test_the_group_is_a_tagged_cluster_group_named_per_region(aws: AWSHarness) -> None:
    provider = aws.provider()
    gid = provider.ensure_placement_group(NAME, REGION, ZONE, TAGS)
    assert gid == f"{REGION}/{NAME}"

    sent = aws.sent("CreatePlacementGroup")
    assert len(sent) == 1
    assert sent[0]["GroupName"] == NAME
    assert sent[0]["Strategy"] == "cluster"
    assert sent[0]["TagSpecification.1.ResourceType"] == "placement-group"
    tags = {
        sent[0][f"TagSpecification.1.Tag.{i}.Key"]: sent[0][f"TagSpecification.1.Tag.{i}.Value"]
        for i in range(1, 4)
    }
    assert tags == TAGS
    # what EC2 keeps: the group, its strategy and tags
    ec2 = _ec2(aws)
    [group] = ec2.describe_placement_groups(GroupNames=[NAME])["PlacementGroups"]
    ec2.close()
    assert group["Strategy"] == "cluster"
    assert {t["Key"]: t["Value"] for t in group["Tags"]} == TAGS


def test_an_efa_node_gets_its_interface_with_the_subnet_and_groups_inside(
    aws: AWSHarness,
) -> None:
    subnet, sg = _network(aws)
    provider = aws.provider(subnet=subnet, security_groups=[sg])
    gid = provider.ensure_placement_group(NAME, REGION, ZONE, TAGS)
    instance = provider.launch(_node(aws, gid, 0, fabric="efa"))

    sent = aws.launch_requests()[-1]
    assert sent["NetworkInterface.1.DeviceIndex"] == "0"
    assert sent["NetworkInterface.1.InterfaceType"] == "efa"
    assert sent["NetworkInterface.1.SubnetId"] == subnet
    assert sent["NetworkInterface.1.SecurityGroupId.1"] == sg
    assert sent["NetworkInterface.1.DeleteOnTermination"] == "true"
    # EC2 refuses SubnetId or SecurityGroupIds beside an interface (InvalidParameterCombination)
    assert "SubnetId" not in sent
    assert not [k for k in sent if k.startswith("SecurityGroupId")]
    assert sent["Placement.GroupName"] == NAME
    assert sent["Placement.AvailabilityZone"] == ZONE

    ec2 = _ec2(aws)
    described = ec2.describe_instances(InstanceIds=[instance.id])["Reservations"][0]
    ec2.close()
    d = described["Instances"][0]
    assert d["Placement"]["GroupName"] == NAME
    assert [n["InterfaceType"] for n in d["NetworkInterfaces"]] == ["efa"]
    assert d["NetworkInterfaces"][0]["SubnetId"] == subnet
    assert [g["GroupId"] for g in d["NetworkInterfaces"][0]["Groups"]] == [sg]


def test_a_node_without_efa_keeps_the_subnet_and_groups_on_the_request(
    aws: AWSHarness,
) -> None:
    subnet, sg = _network(aws)
    provider = aws.provider(subnet=subnet, security_groups=[sg])
    gid = provider.ensure_placement_group(NAME, REGION, ZONE, TAGS)
    provider.launch(_node(aws, gid, 0))

    sent = aws.launch_requests()[-1]
    assert sent["SubnetId"] == subnet
    assert sent["SecurityGroupId.1"] == sg
    assert not [k for k in sent if k.startswith("NetworkInterface")]
    assert sent["Placement.GroupName"] == NAME


def test_a_group_in_use_raises_classified_and_is_not_retried(aws: AWSHarness) -> None:
    provider = aws.provider()
    gid = provider.ensure_placement_group(NAME, REGION, ZONE, TAGS)
    node = provider.launch(_node(aws, gid, 0))
    assert placement_of(node.id, REGION) == NAME

    with pytest.raises(ProviderError) as caught:
        provider.delete_placement_group(gid)
    assert caught.value.code == "InvalidPlacementGroup.InUse"
    assert caught.value.kind is ErrorKind.INVALID
    assert len(aws.sent("DeletePlacementGroup")) == 1  # the sweep tries again, not the call
    assert [g.id for g in provider.list_placement_groups({TAG_JOB: "gang-x"})] == [gid]

    provider.terminate([node.id])
    provider.delete_placement_group(gid)
    assert provider.list_placement_groups({TAG_JOB: "gang-x"}) == []


def test_the_error_codes_are_classified() -> None:
    from botocore.exceptions import ClientError

    def err(code: str) -> ClientError:
        body = {
            "Error": {"Code": code, "Message": "m"},
            "ResponseMetadata": {"HTTPStatusCode": 400},
        }
        return ClientError(body, "DeletePlacementGroup")

    kinds = {
        code: getattr(classify(err(code)), "kind", None)
        for code in (
            "InvalidPlacementGroup.InUse",
            "InvalidPlacementGroup.Duplicate",
            "InvalidPlacementGroup.Unknown",
        )
    }
    assert kinds == {
        "InvalidPlacementGroup.InUse": ErrorKind.INVALID,
        "InvalidPlacementGroup.Duplicate": ErrorKind.INVALID,
        "InvalidPlacementGroup.Unknown": ErrorKind.NOT_FOUND,
    }


def test_a_create_whose_answer_is_lost_gives_one_group(aws: AWSHarness) -> None:
    """The create reached EC2, its answer did not come back (a dropped connection): the retry
    meets InvalidPlacementGroup.Duplicate, and that group is the one returned."""
    from botocore.exceptions import ConnectionClosedError

    provider = aws.provider()
    lost = [True]

    def drop(**_: Any) -> None:
        if lost and lost.pop():
            raise ConnectionClosedError(endpoint_url=aws.endpoint)

    provider.client.ec2(REGION).meta.events.register("after-call.ec2.CreatePlacementGroup", drop)
    gid = provider.ensure_placement_group(NAME, REGION, ZONE, TAGS)

    assert gid == f"{REGION}/{NAME}"
    assert len(aws.sent("CreatePlacementGroup")) == 2  # sent, answer lost; sent again: Duplicate
    assert [g.id for g in provider.list_placement_groups({TAG_JOB: "gang-x"})] == [gid]


def test_a_crash_after_the_create_finds_the_group_again(aws: AWSHarness) -> None:
    """The process died after the create, before the attempt recorded the id: the next
    process's ensure finds the group by name and makes none."""
    first = aws.provider()
    gid = first.ensure_placement_group(NAME, REGION, ZONE, TAGS)
    first.close()

    after = aws.provider()
    assert after.ensure_placement_group(NAME, REGION, ZONE, TAGS) == gid
    assert len(aws.sent("CreatePlacementGroup")) == 1
    ec2 = _ec2(aws)
    assert len(ec2.describe_placement_groups()["PlacementGroups"]) == 1
    ec2.close()


def test_groups_in_another_region_are_found_and_deleted_there(aws: AWSHarness) -> None:
    provider = aws.provider(regions=[OTHER_REGION])
    gid = provider.ensure_placement_group(NAME, OTHER_REGION, f"{OTHER_REGION}a", TAGS)
    assert gid == f"{OTHER_REGION}/{NAME}"
    here = provider.ensure_placement_group(NAME, REGION, ZONE, TAGS)  # the name, per region
    assert here != gid

    found = {g.id: g.region for g in provider.list_placement_groups({TAG_JOB: "gang-x"})}
    assert found == {gid: OTHER_REGION, here: REGION}
    provider.delete_placement_group(gid)
    assert [g.id for g in provider.list_placement_groups({TAG_JOB: "gang-x"})] == [here]
    ec2 = _ec2(aws, OTHER_REGION)
    assert ec2.describe_placement_groups()["PlacementGroups"] == []
    ec2.close()


def test_a_launch_into_another_regions_group_is_refused_before_sending(
    aws: AWSHarness,
) -> None:
    provider = aws.provider(regions=[OTHER_REGION])
    gid = provider.ensure_placement_group(NAME, OTHER_REGION, f"{OTHER_REGION}a", TAGS)
    with pytest.raises(ProviderError) as caught:
        provider.launch(_node(aws, gid, 0))
    assert caught.value.kind is ErrorKind.INVALID
    assert aws.launch_requests() == []


def test_list_finds_only_managed_groups(aws: AWSHarness) -> None:
    provider = aws.provider()
    ec2 = _ec2(aws)
    ec2.create_placement_group(
        GroupName="someone-elses",
        Strategy="cluster",
        TagSpecifications=[
            {"ResourceType": "placement-group", "Tags": [{"Key": TAG_JOB, "Value": "gang-x"}]}
        ],
    )
    ec2.close()
    gid = provider.ensure_placement_group(NAME, REGION, ZONE, TAGS)
    assert [g.id for g in provider.list_placement_groups({TAG_JOB: "gang-x"})] == [gid]
    assert [g.name for g in provider.list_placement_groups()] == [NAME]
    filters = aws.sent("DescribePlacementGroups")[-1]
    names = {filters[k] for k in filters if k.startswith("Filter.") and k.endswith(".Name")}
    assert names == {f"tag:{TAG_MANAGED}"}


def test_an_unknown_group_is_not_an_error_to_delete(aws: AWSHarness) -> None:
    provider: AWSProvider = aws.provider()
    provider.delete_placement_group(f"{REGION}/never-made")
    provider.delete_placement_group("never-made-either")  # a bare name: the default region
    assert len(aws.sent("DeletePlacementGroup")) == 2


@pytest.mark.parametrize(
    ("itype", "cards", "primary"),
    [("p4d.24xlarge", [0, 1, 2, 3], "efa"), ("p5.48xlarge", list(range(32)), "efa")],
)
def test_an_efa_node_asks_for_every_efa_its_type_supports(
    aws: AWSHarness, itype: str, cards: list[int], primary: str
) -> None:
    """One EFA per network card, as many as DescribeInstanceTypes says the type supports
    (``EfaInfo.MaximumEfaInterfaces``): p4d.24xlarge 4, p5.48xlarge 32. It used to be one."""
    from dataclasses import replace

    subnet, sg = _network(aws)
    provider = aws.provider(subnet=subnet, security_groups=[sg])
    gid = provider.ensure_placement_group(NAME, REGION, ZONE, TAGS)
    req = _node(aws, gid, 0, fabric="efa")
    req = replace(req, offer=replace(req.offer, instance_type=itype))
    provider.launch(req)
    sent = aws.launch_requests()[-1]
    n = len(cards)
    got = [sent.get(f"NetworkInterface.{i}.NetworkCardIndex") for i in range(1, n + 2)]
    assert got == [str(c) for c in cards] + [None]
    kinds = [sent[f"NetworkInterface.{i}.InterfaceType"] for i in range(1, n + 1)]
    assert kinds == [primary] + ["efa-only"] * (n - 1)
    assert sent["NetworkInterface.1.DeviceIndex"] == "0"
    assert all(sent[f"NetworkInterface.{i}.DeviceIndex"] == "1" for i in range(2, n + 1))
    assert all(sent[f"NetworkInterface.{i}.SubnetId"] == subnet for i in range(1, n + 1))


def test_more_cards_than_efas_keeps_the_primary_a_plain_interface() -> None:
    from providers.aws.instances import efa_interfaces

    nics = efa_interfaces(17, 16)  # p6-b300.48xlarge: 17 network cards, 16 EFAs
    assert nics[0]["InterfaceType"] == "interface" and nics[0]["NetworkCardIndex"] == 0
    assert [n["NetworkCardIndex"] for n in nics[1:]] == list(range(1, 17))
    assert {n["InterfaceType"] for n in nics[1:]} == {"efa-only"}
    assert efa_interfaces(1, 1) == [
        {
            "DeviceIndex": 0,
            "DeleteOnTermination": True,
            "InterfaceType": "efa",
            "NetworkCardIndex": 0,
        }
    ]
