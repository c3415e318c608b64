"""Capacity reservation groups for the fake Azure Resource Manager (a mixin of
:class:`fakes.azure_server.AzureServer`), as the Compute REST reference defines them
(https://learn.microsoft.com/rest/api/compute/capacity-reservation-groups,
https://learn.microsoft.com/rest/api/compute/capacity-reservations):

- ``GET /subscriptions/S/providers/Microsoft.Compute/capacityReservationGroups``
  (``List By Subscription``) and ``GET .../resourceGroups/G/providers/Microsoft.Compute/
  capacityReservationGroups`` (``List By Resource Group``): groups with ``location``, ``zones``
  and ``properties.reservationType`` (``Targeted``, ``Open`` or ``Block``), ARM pages.
- ``GET .../capacityReservationGroups/N/capacityReservations`` (``List By Capacity Reservation
  Group``) and ``GET .../capacityReservations/R`` with ``$expand=instanceView``: a reservation's
  ``sku`` (``name``, ``capacity``), ``zones``, ``properties.provisioningState``,
  ``virtualMachinesAssociated`` and, expanded, ``instanceView.utilizationInfo``
  (``currentCapacity``, ``virtualMachinesAllocated``); a Block group's reservations carry
  ``scheduleProfile`` (``start``, ``end``).

A VM PUT with ``properties.capacityReservation.capacityReservationGroup.id`` must name an
existing group (``400 InvalidResourceReference`` otherwise) holding a reservation of the VM's
size in its zone (``400 InvalidParameter``); the VM is associated with it and allocated while
the reservation has room, and both end when the VM is deleted. (What Azure answers to a full
Block reservation is not modelled.) Groups are seeded with :meth:`add_group` and
:meth:`add_reservation`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any


class CapacityReservations:
    """The capacity reservation routes and checks; state in ``self._state.groups``."""

    subscription_id: str
    resource_group: str
    _state: Any
    _error: Callable[..., tuple[int, Any, dict[str, str]]]
    _arm_page: Callable[..., dict[str, Any]]
    _scope_ok: Callable[..., Any]

    def _group_id(self, name: str) -> str:
        return (
            f"/subscriptions/{self.subscription_id}/resourceGroups/{self.resource_group}"
            f"/providers/Microsoft.Compute/capacityReservationGroups/{name}"
        )

    def add_group(
        self, name: str, location: str, zones: list[str], reservation_type: str = "Targeted"
    ) -> dict[str, Any]:
        group = {
            "name": name,
            "id": self._group_id(name),
            "type": "Microsoft.Compute/capacityReservationGroups",
            "location": location,
            "zones": list(zones),
            "properties": {"reservationType": reservation_type, "capacityReservations": []},
        }
        self._state.groups[name.lower()] = {"group": group, "reservations": {}}
        return group

    def add_reservation(
        self,
        group: str,
        name: str,
        size: str,
        capacity: int,
        zone: str,
        *,
        start: str | None = None,
        end: str | None = None,
    ) -> dict[str, Any]:
        entry = self._state.groups[group.lower()]
        rid = f"{entry['group']['id']}/capacityReservations/{name}"
        res: dict[str, Any] = {
            "name": name,
            "id": rid,
            "type": "Microsoft.Compute/capacityReservationGroups/capacityReservations",
            "location": entry["group"]["location"],
            "zones": [zone],
            "sku": {"name": size, "capacity": capacity},
            "properties": {
                "reservationId": f"{len(entry['reservations']) + 1:08d}-0000-0000-0000-000000000000",
                "provisioningState": "Succeeded",
                "timeCreated": "2026-01-05T10:00:00.0000000+00:00",
                "virtualMachinesAssociated": [],
                "_allocated": [],
            },
        }
        if start or end:
            res["properties"]["scheduleProfile"] = {"start": start, "end": end}
        entry["reservations"][name.lower()] = res
        entry["group"]["properties"]["capacityReservations"].append({"id": rid})
        return res

    def capacity_reservation(self, group: str, name: str) -> dict[str, Any]:
        return self._public_reservation(
            self._state.groups[group.lower()]["reservations"][name.lower()], True
        )

    # -- routes --------------------------------------------------------------------------------

    def _reservation_routes(
        self,
    ) -> Iterator[tuple[str, str, Callable[..., tuple[int, Any, dict[str, str]]]]]:
        sub = r"/subscriptions/(?P<sub>[^/]+)"
        crg = r"/providers/Microsoft\.Compute/capacityReservationGroups"
        yield sub + crg, "GET", self._groups_by_subscription
        rg = sub + r"/resourceGroups/(?P<rg>[^/]+)" + crg
        yield rg, "GET", self._groups_by_rg
        yield rg + r"/(?P<group>[^/]+)/capacityReservations", "GET", self._reservations_list
        yield (
            rg + r"/(?P<group>[^/]+)/capacityReservations/(?P<name>[^/]+)",
            "GET",
            self._reservation_get,
        )

    def _groups_by_subscription(
        self, query: dict[str, str], body: Any, sub: str
    ) -> tuple[int, Any, dict[str, str]]:
        if sub != self.subscription_id:
            return self._error(
                "SubscriptionNotFound", 404, f"The subscription '{sub}' could not be found."
            )
        rows = [e["group"] for e in self._state.groups.values()]
        path = f"/subscriptions/{sub}/providers/Microsoft.Compute/capacityReservationGroups"
        return 200, self._arm_page(rows, query, path), {}

    def _groups_by_rg(
        self, query: dict[str, str], body: Any, sub: str, rg: str
    ) -> tuple[int, Any, dict[str, str]]:
        bad = self._scope_ok(sub, rg, "crg", "")
        if bad:
            return bad  # type: ignore[no-any-return]
        rows = [e["group"] for e in self._state.groups.values()]
        return 200, self._arm_page(rows, query, self._group_id("").rstrip("/")), {}

    def _group_or_error(self, sub: str, rg: str, group: str) -> Any:
        bad = self._scope_ok(sub, rg, "crg", group)
        if bad:
            return bad
        entry = self._state.groups.get(group.lower())
        if entry is None:
            return self._error(
                "ResourceNotFound",
                404,
                f"The Resource 'Microsoft.Compute/capacityReservationGroups/{group}' under "
                f"resource group '{rg}' was not found.",
            )
        return entry

    def _reservations_list(
        self, query: dict[str, str], body: Any, sub: str, rg: str, group: str
    ) -> tuple[int, Any, dict[str, str]]:
        entry = self._group_or_error(sub, rg, group)
        if isinstance(entry, tuple):
            return entry
        rows = [self._public_reservation(r, False) for r in entry["reservations"].values()]
        path = f"{entry['group']['id']}/capacityReservations"
        return 200, self._arm_page(rows, query, path), {}

    def _reservation_get(
        self, query: dict[str, str], body: Any, sub: str, rg: str, group: str, name: str
    ) -> tuple[int, Any, dict[str, str]]:
        entry = self._group_or_error(sub, rg, group)
        if isinstance(entry, tuple):
            return entry
        res = entry["reservations"].get(name.lower())
        if res is None:
            return self._error(
                "ResourceNotFound", 404, f"The capacity reservation '{name}' was not found."
            )
        expand = query.get("$expand", "") == "instanceView"
        return 200, self._public_reservation(res, expand), {}

    @staticmethod
    def _public_reservation(res: dict[str, Any], expand: bool) -> dict[str, Any]:
        props = {k: v for k, v in res["properties"].items() if not k.startswith("_")}
        out = {**res, "properties": props}
        if expand:
            allocated = res["properties"]["_allocated"]
            props["instanceView"] = {
                "utilizationInfo": {
                    "currentCapacity": res["sku"]["capacity"],
                    "virtualMachinesAllocated": [{"id": v} for v in allocated],
                },
                "statuses": [
                    {
                        "code": "ProvisioningState/succeeded",
                        "level": "Info",
                        "displayStatus": "Provisioning succeeded",
                    }
                ],
            }
        return out

    # -- at VM PUT and delete ------------------------------------------------------------------

    def _vm_reservation(
        self, props: dict[str, Any], zones: list[str], vm_id: str
    ) -> tuple[dict[str, Any] | None, Any]:
        """(the reservation a VM PUT goes into, the error to answer)."""
        ref = ((props.get("capacityReservation") or {}).get("capacityReservationGroup") or {}).get(
            "id"
        )
        if not ref:
            return None, None
        entry = self._state.groups.get(str(ref).rstrip("/").rsplit("/", 1)[-1].lower())
        if entry is None or entry["group"]["id"].lower() != str(ref).lower():
            return None, self._error(
                "InvalidResourceReference",
                400,
                f"Resource {ref} referenced by resource {vm_id} was not found.",
            )
        size = (props.get("hardwareProfile") or {}).get("vmSize", "")
        for res in entry["reservations"].values():
            if res["sku"]["name"] == size and (not zones or res["zones"] == zones):
                return res, None
        return None, self._error(
            "InvalidParameter",
            400,
            f"The capacity reservation group {ref} has no reservation of {size} in zone "
            f"{zones[0] if zones else '(none)'}.",
        )

    @staticmethod
    def _associate(res: dict[str, Any], vm_id: str) -> None:
        props = res["properties"]
        props["virtualMachinesAssociated"].append({"id": vm_id})
        if len(props["_allocated"]) < int(res["sku"]["capacity"]):
            props["_allocated"].append(vm_id)

    def _release(self, vm_id: str) -> None:
        for entry in self._state.groups.values():
            for res in entry["reservations"].values():
                props = res["properties"]
                props["virtualMachinesAssociated"] = [
                    v for v in props["virtualMachinesAssociated"] if v["id"] != vm_id
                ]
                props["_allocated"] = [v for v in props["_allocated"] if v != vm_id]
