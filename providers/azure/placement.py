"""Azure proximity placement groups: a gang's VMs placed close together (issue 10).

One group per gang attempt, named by the caller (:func:`provisioner.core.models.placement_group_name`),
in the adapter's resource group: ``proximity_placement_groups.create_or_update`` (a synchronous
PUT, idempotent by name) with ``proximityPlacementGroupType: Standard``, the region as its
``location``, the gang's zone as its ``zones`` hint (an Availability Zone, where the offer has
one) and the gang's tags, plus ``provisioner-managed``. The adapter looks the group up first and
returns the one there. The id handed back, and carried by each node's VM as
``properties.proximityPlacementGroup.id``, is the group's ARM resource id.

``delete_placement_group`` is a synchronous DELETE: an absent group is not an error (404
``ResourceNotFound``, or a 204 answer, which ARM's resource-provider contract gives for a delete
of nothing and which the SDK, expecting only the REST reference's 200, raises). Azure refuses to
delete a group that VMs still reference (a 409); that refusal is a ProviderError (not retried
here) and the reconciler's sweep tries again once the VMs are gone. ``list_placement_groups``
lists the resource group's groups and keeps the managed ones carrying the asked-for tags.
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Mapping
from typing import Any

from providers._common import has_tags, unless_gone
from providers.azure.client import AzureClient, as_dict, zone_number
from providers.capabilities import PlacementGroup
from provisioner.core.models import TAG_MANAGED

log = logging.getLogger("provisioner.providers.azure")

PPG_TYPE = "Standard"


class AzurePlacement:
    """Proximity placement groups (:class:`providers.capabilities.PlacementGroups`)."""

    def __init__(self, client: AzureClient) -> None:
        self.client = client

    def ensure_placement_group(
        self, name: str, region: str, zone: str, tags: Mapping[str, str]
    ) -> str:
        """The ARM id of group ``name`` in ``region``, created (tagged, zone as a hint) if it
        is not there."""
        existing = self._get_ppg(self.client.resource_group, name)
        if existing is not None:
            return str(existing["id"])
        body: dict[str, Any] = {
            "location": region,
            "tags": {TAG_MANAGED: "true", **dict(tags)},
            "properties": {"proximityPlacementGroupType": PPG_TYPE},
        }
        number = zone_number(zone)
        if number:
            body["zones"] = [number]
        made = as_dict(
            self.client.call(
                "create proximity placement group",
                lambda: self.client.compute.proximity_placement_groups.create_or_update(
                    self.client.resource_group, name, body
                ),
            )
        )
        log.info("azure: proximity placement group %s in %s (zone %s)", name, region, number or "-")
        return str(made.get("id") or self.client.ppg_id(name))

    def delete_placement_group(self, group_id: str) -> None:
        """Delete the group (an ARM id, or a bare name in the adapter's resource group); an
        absent one is not an error; one still referenced by VMs raises ProviderError."""
        group, name = _group_and_name(group_id, self.client.resource_group)

        def delete() -> None:
            from azure.core.exceptions import HttpResponseError

            try:
                self.client.compute.proximity_placement_groups.delete(group, name)
            except HttpResponseError as exc:
                if exc.status_code == 204:  # nothing to delete (ARM's answer; not in the spec)
                    return
                raise

        unless_gone(lambda: self.client.call("delete proximity placement group", delete))

    def list_placement_groups(
        self, tags: Mapping[str, str] | None = None
    ) -> builtins.list[PlacementGroup]:
        """The managed groups of the resource group carrying all of ``tags``."""
        wanted = {TAG_MANAGED: "true", **dict(tags or {})}
        rows = self.client.call(
            "list proximity placement groups",
            lambda: [
                as_dict(g)
                for g in self.client.compute.proximity_placement_groups.list_by_resource_group(
                    self.client.resource_group
                )
            ],
        )
        return [
            PlacementGroup(
                str(g.get("id", "")),
                str(g.get("name", "")),
                str(g.get("location", "")),
                dict(g.get("tags") or {}),
            )
            for g in rows
            if has_tags(g.get("tags") or {}, wanted)
        ]

    def _get_ppg(self, group: str, name: str) -> dict[str, Any] | None:
        found = unless_gone(
            lambda: self.client.call(
                "get proximity placement group",
                lambda: self.client.compute.proximity_placement_groups.get(group, name),
            )
        )
        return None if found is None else as_dict(found)


def _group_and_name(group_id: str, default_group: str) -> tuple[str, str]:
    """(resource group, name) of a group's ARM id; a bare name is in ``default_group``."""
    parts = group_id.strip("/").split("/")
    lowered = [p.lower() for p in parts]
    group = default_group
    if "resourcegroups" in lowered:
        at = lowered.index("resourcegroups")
        if at + 1 < len(parts):
            group = parts[at + 1]
    return group, parts[-1]
