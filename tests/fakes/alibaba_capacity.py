"""Capacity reservations (private pools) for the Alibaba fake (mixed into AlibabaFakeServer),
as the ECS API reference defines them:

- ``DescribeCapacityReservations`` (``RegionId``; ``PrivatePoolOptions.Ids`` a JSON list,
  ``InstanceType``, ``ZoneId``, ``Status``; pages of ``MaxResults`` with ``NextToken``) answers
  ``CapacityReservationSet.CapacityReservationItem`` with ``PrivatePoolOptionsId``,
  ``PrivatePoolOptionsName``, ``PrivatePoolOptionsMatchCriteria`` (``Open``/``Target``),
  ``Status``, ``StartTime``, ``EndTime``, ``EndTimeType`` and
  ``AllocatedResources.AllocatedResource`` (``InstanceType``, ``zoneId``, ``TotalAmount``,
  ``UsedAmount``, ``AvailableAmount``).
- ``RunInstances`` with ``PrivatePoolOptions.MatchCriteria=Target`` must carry
  ``PrivatePoolOptions.Id`` of a reservation of the region holding the type in the zone; the
  instance then takes one from it (``UsedAmount``) and DescribeInstances shows
  ``EcsCapacityReservationAttr.CapacityReservationId``; releasing it gives it back.

What ECS answers to an unknown pool, a mismatch or a full pool is not in the public reference
as a code; the fake answers ``InvalidParameter`` (400) and does not model a full pool.
Reservations are seeded with :meth:`CapacityReservations.add_capacity_reservation`.
"""

from __future__ import annotations

import json
import uuid
from typing import Any


class CapacityReservations:
    """The action and the RunInstances check; ``self._state`` is the server's."""

    _state: Any
    _api_error: Any
    max_page: int

    def _region(self, params: dict[str, str]) -> str:  # provided by the server
        raise NotImplementedError

    def _pools(self) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] | None = getattr(self._state, "pools", None)
        if found is None:
            found = {}
            self._state.pools = found
        return found

    def add_capacity_reservation(
        self,
        region: str,
        zone: str,
        instance_type: str,
        total: int,
        *,
        used: int = 0,
        match: str = "Target",
        status: str = "Active",
        start: str = "2026-01-05T10:00:00Z",
        end: str | None = None,
    ) -> str:
        pool = "crp-" + uuid.uuid4().hex[:17]
        self._pools()[pool] = {
            "PrivatePoolOptionsId": pool,
            "PrivatePoolOptionsName": f"pool-{pool[-6:]}",
            "PrivatePoolOptionsMatchCriteria": match,
            "RegionId": region,
            "Status": status,
            "StartTime": start,
            "StartTimeType": "Now",
            "EndTime": end or "",
            "EndTimeType": "Limited" if end else "Unlimited",
            "InstanceChargeType": "PostPaid",
            "Platform": "linux",
            "AllocatedResources": {
                "AllocatedResource": [
                    {
                        "InstanceType": instance_type,
                        "zoneId": zone,
                        "TotalAmount": total,
                        "UsedAmount": used,
                        "AvailableAmount": total - used,
                    }
                ]
            },
        }
        return pool

    def capacity_reservation(self, pool: str) -> dict[str, Any]:
        return self._pools()[pool]

    def _do_DescribeCapacityReservations(self, params: dict[str, str]) -> dict[str, Any]:
        region = self._region(params)
        ids = json.loads(params.get("PrivatePoolOptions.Ids") or "[]")
        rows = [
            p
            for p in self._pools().values()
            if p["RegionId"] == region
            and (not ids or p["PrivatePoolOptionsId"] in ids)
            and (not params.get("Status") or p["Status"] == params["Status"])
        ]
        size = min(int(params.get("MaxResults") or 10), 100, self.max_page)
        start = int(params.get("NextToken") or 0)
        page = rows[start : start + size]
        out: dict[str, Any] = {
            "CapacityReservationSet": {"CapacityReservationItem": page},
            "TotalCount": len(rows),
            "MaxResults": size,
        }
        if start + size < len(rows):
            out["NextToken"] = str(start + size)
        return out

    def _pool_for(self, params: dict[str, str], zone: str, instance_type: str) -> Any:
        """The allocated resource a RunInstances goes into (None: no private pool asked)."""
        ApiError = self._api_error
        match = params.get("PrivatePoolOptions.MatchCriteria")
        pool_id = params.get("PrivatePoolOptions.Id")
        if match in (None, "", "Open", "None") and not pool_id:
            return None
        if match != "Target" or not pool_id:
            raise ApiError(
                "InvalidParameter",
                "PrivatePoolOptions.Id is given with PrivatePoolOptions.MatchCriteria Target only",
            )
        pool = self._pools().get(pool_id)
        if pool is None or pool["RegionId"] != self._region(params) or pool["Status"] != "Active":
            raise ApiError("InvalidParameter", f"The private pool {pool_id} is not available.")
        for res in pool["AllocatedResources"]["AllocatedResource"]:
            if res["InstanceType"] == instance_type and (not zone or res["zoneId"] == zone):
                return res
        raise ApiError(
            "InvalidParameter", f"The private pool {pool_id} holds no {instance_type} in {zone}."
        )

    def _take(self, res: dict[str, Any], delta: int) -> None:
        res["UsedAmount"] = max(res["UsedAmount"] + delta, 0)
        res["AvailableAmount"] = res["TotalAmount"] - res["UsedAmount"]

    def _give_back(self, instance: dict[str, Any]) -> None:
        pool_id = (instance.get("EcsCapacityReservationAttr") or {}).get("CapacityReservationId")
        pool = self._pools().get(pool_id or "")
        if pool is None:
            return
        for res in pool["AllocatedResources"]["AllocatedResource"]:
            if res["InstanceType"] == instance.get("InstanceType") and res[
                "zoneId"
            ] == instance.get("ZoneId"):
                self._take(res, -1)
