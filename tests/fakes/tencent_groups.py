"""Placement groups for the Tencent fake (mixed into TencentFakeServer), as the CVM API
reference defines them: ``CreateDisasterRecoverGroup`` (``Name``, ``Type`` of HOST, SW or
RACK, ``ClientToken``, ``TagSpecification`` with ``ResourceType`` ``ps``) answers the new
``DisasterRecoverGroupId`` (``ps-...``); ``DescribeDisasterRecoverGroups`` filters by
``DisasterRecoverGroupIds`` or ``Name`` and pages with ``Offset``/``Limit``, each group with
``Type``, ``CvmQuotaTotal``, ``CurrentNum``, ``InstanceIds`` and ``Tags``;
``DeleteDisasterRecoverGroups`` refuses a group that still holds instances
(``FailedOperation.PlacementSetNotEmpty``) or that is unknown
(``ResourceNotFound.InvalidPlacementSet``). ``RunInstances`` naming an unknown group is
refused the same way; each instance keeps its ``DisasterRecoverGroupId``. An instance in the
recycle bin (``SHUTDOWN``) no longer counts as a member.
"""

from __future__ import annotations

import random
import string
from datetime import UTC, datetime
from typing import Any

KINDS = {"HOST": 50, "SW": 50, "RACK": 20}  # CvmQuotaTotal per kind


class PlacementGroups:
    """The three actions; ``self._groups`` and ``self._state.instances`` are the server's."""

    _state: Any
    _groups: dict[str, dict[str, Any]]
    _api_error: Any  # the server's ApiError (answered in CVM's envelope)

    def _members(self, gid: str) -> list[str]:
        return [
            iid
            for iid, inst in self._state.instances.items()
            if inst.get("_Group") == gid and inst["InstanceState"] not in ("SHUTDOWN",)
        ]

    def _row(self, g: dict[str, Any]) -> dict[str, Any]:
        members = self._members(g["DisasterRecoverGroupId"])
        out = {k: v for k, v in g.items() if not k.startswith("_")}
        out.update(CurrentNum=len(members), InstanceIds=members)
        return out

    def _do_CreateDisasterRecoverGroup(self, params: dict[str, Any]) -> dict[str, Any]:
        kind = params.get("Type")
        if kind not in KINDS:
            raise self._api_error("InvalidParameterValue", f"Type {kind} is not valid.")
        if not params.get("Name"):
            raise self._api_error("MissingParameter", "The parameter Name is missing.")
        token = params.get("ClientToken")
        for g in self._groups.values():
            if token and g["_token"] == token:
                return self._row(g)
        gid = "ps-" + "".join(random.choices(string.ascii_lowercase + string.digits, k=8))
        tags = [
            {"Key": t.get("Key"), "Value": t.get("Value")}
            for spec in params.get("TagSpecification") or ()
            if spec.get("ResourceType") == "ps"
            for t in spec.get("Tags") or ()
        ]
        self._groups[gid] = {
            "DisasterRecoverGroupId": gid,
            "Name": params["Name"],
            "Type": kind,
            "CvmQuotaTotal": KINDS[kind],
            "CreateTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "Tags": tags,
            "_token": token,
        }
        return self._row(self._groups[gid])

    def _do_DescribeDisasterRecoverGroups(self, params: dict[str, Any]) -> dict[str, Any]:
        ids = params.get("DisasterRecoverGroupIds")
        name = params.get("Name")
        rows = [
            g
            for gid, g in sorted(self._groups.items())
            if (not ids or gid in ids) and (not name or g["Name"] == name)
        ]
        offset, limit = int(params.get("Offset") or 0), int(params.get("Limit") or 20)
        return {
            "DisasterRecoverGroupSet": [self._row(g) for g in rows[offset : offset + limit]],
            "TotalCount": len(rows),
        }

    def _do_DeleteDisasterRecoverGroups(self, params: dict[str, Any]) -> dict[str, Any]:
        ids = [str(i) for i in params.get("DisasterRecoverGroupIds") or ()]
        if not ids:
            raise self._api_error(
                "MissingParameter", "The parameter DisasterRecoverGroupIds is missing."
            )
        for gid in ids:
            if gid not in self._groups:
                raise self._api_error(
                    "ResourceNotFound.InvalidPlacementSet", f"The placement set {gid} is unknown."
                )
            if self._members(gid):
                raise self._api_error(
                    "FailedOperation.PlacementSetNotEmpty", f"The placement set {gid} is not empty."
                )
        for gid in ids:
            del self._groups[gid]
        return {}

    def _check_group(self, params: dict[str, Any]) -> str | None:
        ids = params.get("DisasterRecoverGroupIds") or []
        if not ids:
            return None
        gid = str(ids[0])
        if gid not in self._groups:
            raise self._api_error(
                "ResourceNotFound.InvalidPlacementSet", f"The placement set {gid} is unknown."
            )
        return gid
