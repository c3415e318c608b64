"""AWS placement groups (issue 10): a gang's nodes in one EC2 *cluster* placement group.

- ``ensure_placement_group`` looks the group up by name first (``DescribePlacementGroups`` with
  the ``group-name`` filter: an absent group is an empty answer, not an error), and creates it
  only when it is not there: ``CreatePlacementGroup`` with ``Strategy=cluster`` and the tags in
  ``TagSpecification`` (``ResourceType=placement-group``), so the group is never seen untagged.
  A create whose answer was lost (a crash, a dropped connection and the retry) meets
  ``InvalidPlacementGroup.Duplicate``: the group is there, and it is the one returned.
- EC2 names a group once per region, so the id is ``<region>/<name>``: delete and launch know
  where it is. A cluster group lives in one Availability Zone, fixed by its first instance;
  launches keep ``Placement.AvailabilityZone`` beside ``Placement.GroupName``.
- ``delete_placement_group``: ``DeletePlacementGroup``; ``InvalidPlacementGroup.Unknown`` (gone
  already, or never made) is not an error; ``InvalidPlacementGroup.InUse`` (an instance in it
  is not terminated yet, shutting-down included) raises, classified by the error table, and the
  caller tries again at a later pass.
- ``list_placement_groups``: ``DescribePlacementGroups`` filtered by ``tag:<key>`` in every
  configured region (the action has no pages), groups being deleted left out.
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Mapping
from typing import Any

from providers.aws.client import AWSClient, EC2Client
from providers.base import ErrorKind, ProviderError
from providers.capabilities import PlacementGroup
from provisioner.core.models import TAG_MANAGED

log = logging.getLogger("provisioner.providers.aws")

#: the strategy of every group this adapter makes (instances close together, one zone)
STRATEGY = "cluster"
#: group states that count as "there" (``deleting`` and ``deleted`` do not)
LIVE_STATES = ("pending", "available")
DUPLICATE = "InvalidPlacementGroup.Duplicate"
UNKNOWN = "InvalidPlacementGroup.Unknown"


def group_id(region: str, name: str) -> str:
    return f"{region}/{name}"


def split_group_id(gid: str, default_region: str) -> tuple[str, str]:
    """``(region, name)`` of an id this adapter returned (a bare name: ``default_region``)."""
    region, _, name = gid.rpartition("/")
    return region or default_region, name


class AWSPlacement:
    """The placement-group operations (:class:`providers.capabilities.PlacementGroups`)."""

    def __init__(self, client: AWSClient) -> None:
        self.client = client

    def ensure_placement_group(
        self, name: str, region: str, zone: str, tags: Mapping[str, str]
    ) -> str:
        region = region or self.client.region
        if self._groups(region, [{"Name": "group-name", "Values": [name]}]):
            return group_id(region, name)
        params: dict[str, Any] = {
            "GroupName": name,
            "Strategy": STRATEGY,
            "TagSpecifications": [
                {
                    "ResourceType": "placement-group",
                    "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
                }
            ],
        }
        try:
            self.client.call(
                region,
                "CreatePlacementGroup",
                lambda ec2: ec2.create_placement_group(**params),
            )
        except ProviderError as err:
            if err.code != DUPLICATE:
                raise
            by_name = [{"Name": "group-name", "Values": [name]}]
            if not self._groups(region, by_name) and self._groups(region, by_name, live=False):
                raise ProviderError(  # the name is taken by a group on its way out
                    ErrorKind.TRANSIENT,
                    "PlacementGroupDeleting",
                    f"placement group {name} in {region} is being deleted; try again",
                    provider="aws",
                ) from None
            log.info("aws: placement group %s in %s was there already", name, region)
            return group_id(region, name)
        log.info("aws: created cluster placement group %s in %s", name, region)
        return group_id(region, name)

    def delete_placement_group(self, group_id: str) -> None:
        region, name = split_group_id(group_id, self.client.region)
        try:
            self.client.call(
                region,
                "DeletePlacementGroup",
                lambda ec2: ec2.delete_placement_group(GroupName=name),
            )
        except ProviderError as err:
            if err.code == UNKNOWN or err.kind is ErrorKind.NOT_FOUND:
                return
            raise
        log.info("aws: deleted placement group %s in %s", name, region)

    def list_placement_groups(
        self, tags: Mapping[str, str] | None = None
    ) -> builtins.list[PlacementGroup]:
        wanted = {TAG_MANAGED: "true", **(tags or {})}
        filters = [{"Name": f"tag:{k}", "Values": [v]} for k, v in wanted.items()]
        out: builtins.list[PlacementGroup] = []
        for region in self.client.regions:
            for g in self._groups(region, filters):
                name = str(g.get("GroupName", ""))
                found = {t["Key"]: t["Value"] for t in g.get("Tags", [])}
                out.append(PlacementGroup(group_id(region, name), name, region, found))
        return out

    def _groups(
        self, region: str, filters: builtins.list[dict[str, Any]], *, live: bool = True
    ) -> builtins.list[dict[str, Any]]:
        """``DescribePlacementGroups`` in ``region`` with ``filters`` (with ``live``, groups
        being deleted left out)."""

        def fetch(ec2: EC2Client) -> builtins.list[dict[str, Any]]:
            groups: builtins.list[dict[str, Any]] = ec2.describe_placement_groups(Filters=filters)[
                "PlacementGroups"
            ]
            return groups

        found = self.client.call(region, "DescribePlacementGroups", fetch)
        return [g for g in found if not live or g.get("State", "available") in LIVE_STATES]
