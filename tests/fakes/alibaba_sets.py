"""Deployment sets for the Alibaba fake (mixed into AlibabaFakeServer), as the ECS API
reference defines them: ``CreateDeploymentSet`` (``RegionId``, ``DeploymentSetName``,
``Strategy`` of Availability, AvailabilityGroup or LowLatency, ``Description``,
``ClientToken``) answers ``DeploymentSetId``; ``DescribeDeploymentSets`` filters by
``DeploymentSetIds`` (a JSON list) or ``DeploymentSetName`` and pages with ``PageNumber`` and
``PageSize``, each set with its ``InstanceIds``; ``DeleteDeploymentSet`` refuses a set that
still holds instances. A ``RunInstances`` naming an unknown set is refused
(``InvalidDeploymentSetId.NotFound``); the instance keeps its ``DeploymentSetId``.

The in-use refusal's code is not in the public reference; the fake answers
``DependencyViolation.Instances`` (400), which the adapter reads as a refusal, not a gone set.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

STRATEGIES = ("Availability", "AvailabilityGroup", "LowLatency")


class DeploymentSets:
    """The three actions; ``self._sets`` and ``self._state.instances`` are the server's."""

    _state: Any
    _sets: dict[str, dict[str, Any]]
    _api_error: Any  # the server's ApiError (its handler answers it in ECS's format)

    def _region(self, params: dict[str, str]) -> str:  # provided by the server
        raise NotImplementedError

    def _set_members(self, sid: str) -> list[str]:
        return [
            iid for iid, inst in self._state.instances.items() if inst.get("DeploymentSetId") == sid
        ]

    def _do_CreateDeploymentSet(self, params: dict[str, str]) -> dict[str, Any]:
        ApiError = self._api_error
        region = self._region(params)
        strategy = params.get("Strategy") or "Availability"
        if strategy not in STRATEGIES:
            raise ApiError("InvalidStrategy.Malformed", f"Strategy {strategy} is not valid.")
        token = params.get("ClientToken")
        for sid, s in self._sets.items():
            if token and s["token"] == token and s["RegionId"] == region:
                return {"DeploymentSetId": sid}
        sid = "ds-" + uuid.uuid4().hex[:20]
        self._sets[sid] = {
            "DeploymentSetId": sid,
            "DeploymentSetName": params.get("DeploymentSetName", ""),
            "DeploymentSetDescription": params.get("Description", ""),
            "DeploymentStrategy": strategy,
            "RegionId": region,
            "token": token,
        }
        return {"DeploymentSetId": sid}

    def _do_DescribeDeploymentSets(self, params: dict[str, str]) -> dict[str, Any]:
        region = self._region(params)
        ids = json.loads(params["DeploymentSetIds"]) if params.get("DeploymentSetIds") else None
        name = params.get("DeploymentSetName")
        rows = [
            s
            for sid, s in sorted(self._sets.items())
            if s["RegionId"] == region
            and (ids is None or sid in ids)
            and (not name or s["DeploymentSetName"] == name)
        ]
        size = int(params.get("PageSize") or 10)
        page = int(params.get("PageNumber") or 1)
        shown = rows[(page - 1) * size : page * size]
        out = []
        for s in shown:
            members = self._set_members(s["DeploymentSetId"])
            row = {k: v for k, v in s.items() if k not in ("token", "RegionId")}
            row.update(InstanceIds={"InstanceId": members}, InstanceAmount=len(members))
            out.append(row)
        return {
            "TotalCount": len(rows),
            "PageNumber": page,
            "PageSize": size,
            "DeploymentSets": {"DeploymentSet": out},
        }

    def _do_DeleteDeploymentSet(self, params: dict[str, str]) -> dict[str, Any]:
        ApiError = self._api_error
        region = self._region(params)
        sid = params.get("DeploymentSetId", "")
        s = self._sets.get(sid)
        if s is None or s["RegionId"] != region:
            raise ApiError(
                "InvalidDeploymentSetId.NotFound", f"The DeploymentSetId {sid} does not exist."
            )
        if self._set_members(sid):
            raise ApiError(
                "DependencyViolation.Instances",
                "The deployment set still contains instances.",
            )
        del self._sets[sid]
        return {}

    def _check_set(self, params: dict[str, str]) -> str | None:
        """RunInstances' ``DeploymentSetId``: it must name a set of the region."""
        ApiError = self._api_error
        sid = params.get("DeploymentSetId") or None
        if sid is None:
            return None
        s = self._sets.get(sid)
        if s is None or s["RegionId"] != self._region(params):
            raise ApiError(
                "InvalidDeploymentSetId.NotFound", f"The DeploymentSetId {sid} does not exist."
            )
        return sid
