"""Tencent CVM placement groups for gangs (issue 10; :mod:`providers._placement`).

Tencent's placement group (``DisasterRecoverGroup``, ids ``ps-...``) is a spread construct:
each kind keeps its instances apart at one level (``HOST``: each on its own physical host,
``SW``: its own switch, ``RACK``: its own rack); there is no kind that packs them together.
A gang uses ``HOST``, the tightest: nodes on different hosts that may share a switch and a
rack, in the one zone every node is launched in.

- ``CreateDisasterRecoverGroup``: ``Name`` (the gang attempt's token), ``Type`` ``HOST``,
  ``ClientToken``, the tags as ``TagSpecification`` (``ResourceType`` ``ps``);
- ``DescribeDisasterRecoverGroups`` by ``Name`` (paged ``Offset``/``Limit``), each group with
  its ``Tags``; ``DeleteDisasterRecoverGroups`` by id: a group that still holds instances is
  refused (``FailedOperation.PlacementSetNotEmpty``: raised, the sweep asks again), an unknown
  one is NOT_FOUND (``ResourceNotFound.InvalidPlacementSet``);
- a gang node's ``RunInstances`` carries ``DisasterRecoverGroupIds: [id]``.
"""

from __future__ import annotations

import builtins
from typing import Any

from providers._placement import RegionalPlacement
from providers.capabilities import PlacementGroup
from providers.tencent.client import TencentClient

KIND = "HOST"
PAGE = 100


class TencentPlacement(RegionalPlacement):
    """Placement groups (the ``placement`` of :class:`providers.tencent.adapter.TencentProvider`)."""

    client: TencentClient

    def __init__(self, client: TencentClient) -> None:
        super().__init__(client)

    def _find_groups(self, region: str, name: str | None = None) -> builtins.list[PlacementGroup]:
        out: builtins.list[PlacementGroup] = []
        offset = 0
        while True:
            params: dict[str, Any] = {"Offset": offset, "Limit": PAGE}
            if name:
                params["Name"] = name
            body = self.client.request(region, "DescribeDisasterRecoverGroups", params)
            rows = body.get("DisasterRecoverGroupSet") or []
            for raw in rows:
                tags = {
                    str(t.get("Key")): str(t.get("Value", ""))
                    for t in raw.get("Tags") or ()
                    if t.get("Key") is not None
                }
                out.append(
                    PlacementGroup(
                        str(raw.get("DisasterRecoverGroupId", "")),
                        str(raw.get("Name", "")),
                        region,
                        tags,
                    )
                )
            offset += len(rows)
            if not rows or offset >= int(body.get("TotalCount") or 0):
                return out

    def _create_group(self, region: str, zone: str, name: str, tags: dict[str, str]) -> str:
        params = {
            "Name": name,
            "Type": KIND,
            "ClientToken": name,
            "TagSpecification": [
                {
                    "ResourceType": "ps",
                    "Tags": [{"Key": k, "Value": v} for k, v in sorted(tags.items())],
                }
            ],
        }
        body = self.client.request(region, "CreateDisasterRecoverGroup", params)
        return str(body["DisasterRecoverGroupId"])

    def _delete_group(self, region: str, group_id: str) -> None:
        self.client.request(
            region, "DeleteDisasterRecoverGroups", {"DisasterRecoverGroupIds": [group_id]}
        )
