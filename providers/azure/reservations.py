"""Azure held capacity: capacity reservation groups and the capacity reservations in them.

:meth:`AzureReservations.reservations` (:class:`~providers.capabilities.HeldCapacity`) lists
the subscription's capacity reservation groups (``CapacityReservationGroups.list_by_subscription``)
in the adapter's locations, then each group's reservations
(``CapacityReservations.list_by_capacity_reservation_group``), each read again with
``$expand=instanceView`` for its utilization. One :class:`Reservation` per capacity reservation
of an N-series (GPU) size: ``sku.capacity`` its size, ``capacity -
len(instanceView.utilizationInfo.virtualMachinesAllocated)`` what is free, ``zones[0]`` its
zone (``<location>-<n>``, as the offers name zones). Its ``id`` is the *group's* name (a VM
names the group, never one reservation in it) and ``ref`` the group's ARM id. A group of
``reservationType`` ``Block`` holds a block capacity reservation
(:attr:`ReservationKind.CAPACITY_BLOCK`, ``scheduleProfile.start``/``end`` its dates), any
other an open-ended one; ``Open`` groups are used by matching VMs without being named
(``targeted`` False).

A launch into one carries ``properties.capacityReservation.capacityReservationGroup.id``
(:func:`capacity_reservation`), with ``priority`` ``Regular`` and no spot field.
"""

from __future__ import annotations

import builtins
import functools
from collections.abc import Iterable, Mapping
from typing import Any

from providers._common import parse_time
from providers._reserved import reservation_for
from providers.azure.client import AzureClient, as_dict
from provisioner.core.models import LaunchRequest, Reservation, ReservationKind


def capacity_reservation(request: LaunchRequest, group_id: str) -> dict[str, Any]:
    """The VM's ``properties.capacityReservation`` naming the group ``group_id``."""
    del request
    return {"capacityReservationGroup": {"id": group_id}}


def is_gpu_size(size: str) -> bool:
    """Azure's GPU sizes are the N-series (NC, ND, NG, NV)."""
    return size.lower().startswith("standard_n")


class AzureReservations:
    """:class:`~providers.capabilities.HeldCapacity` for Azure."""

    def __init__(self, client: AzureClient) -> None:
        self.client = client

    def group_id(self, name: str, resource_group: str | None = None) -> str:
        """The ARM id of capacity reservation group ``name`` (in the adapter's resource group
        unless another is given)."""
        return (
            f"/subscriptions/{self.client.subscription_id}/resourceGroups/"
            f"{resource_group or self.client.resource_group}/providers/Microsoft.Compute/"
            f"capacityReservationGroups/{name}"
        )

    def reserved_group_id(self, request: LaunchRequest) -> str | None:
        """The group a reserved launch goes into (None: not a reserved launch)."""
        held = reservation_for(request, "azure")
        if held is None:
            return None
        return held.ref if held.ref.startswith("/subscriptions/") else self.group_id(held.id)

    def reservations(self, regions: Iterable[str] | None = None) -> builtins.list[Reservation]:
        wanted = {r.lower() for r in (regions or self.client.locations)}
        groups = self.client.call(
            "list capacity reservation groups",
            lambda: [
                as_dict(g)
                for g in self.client.compute.capacity_reservation_groups.list_by_subscription()
            ],
        )
        out: list[Reservation] = []
        for group in groups:
            location = str(group.get("location", ""))
            if wanted and location.lower() not in wanted:
                continue
            gid = str(group.get("id", ""))
            rg = _resource_group_of(gid) or self.client.resource_group
            name = str(group.get("name", ""))
            kind = str((group.get("properties") or {}).get("reservationType") or "Targeted")
            listed = self.client.call(
                f"list capacity reservations of {name}",
                functools.partial(self._reservations_in, rg, name),
            )
            for row in listed:
                size = str((row.get("sku") or {}).get("name", ""))
                if not is_gpu_size(size):
                    continue
                viewed = self.client.call(
                    f"get capacity reservation {row.get('name')}",
                    functools.partial(self._reservation_view, rg, name, str(row.get("name", ""))),
                )
                held = reservation_of(viewed, name, gid or self.group_id(name, rg), kind)
                if held is not None:
                    out.append(held)
        return out

    def _reservations_in(self, rg: str, group: str) -> builtins.list[dict[str, Any]]:
        pages = self.client.compute.capacity_reservations.list_by_capacity_reservation_group(
            rg, group
        )
        return [as_dict(r) for r in pages]

    def _reservation_view(self, rg: str, group: str, name: str) -> dict[str, Any]:
        """The reservation with its instance view (``$expand=instanceView``: utilization)."""
        return as_dict(
            self.client.compute.capacity_reservations.get(rg, group, name, expand="instanceView")
        )


def reservation_of(
    row: Mapping[str, Any], group: str, group_id: str, group_type: str
) -> Reservation | None:
    """One capacity reservation (with its instance view) as a :class:`Reservation`; None when
    it is not provisioned."""
    props = row.get("properties") or {}
    if str(props.get("provisioningState", "Succeeded")) not in ("Succeeded", "Updating"):
        return None
    sku = row.get("sku") or {}
    location = str(row.get("location", ""))
    zones = row.get("zones") or []
    total = int(sku.get("capacity") or 0)
    util = (props.get("instanceView") or {}).get("utilizationInfo") or {}
    used = len(util.get("virtualMachinesAllocated") or [])
    block = group_type.lower() == "block"
    schedule = props.get("scheduleProfile") or {}
    start = parse_time(schedule["start"]) if block and schedule.get("start") else None
    end = parse_time(schedule["end"]) if block and schedule.get("end") else None
    return Reservation(
        provider="azure",
        id=group,
        region=location,
        zone=f"{location}-{zones[0]}" if zones else "",
        instance_type=str(sku.get("name", "")),
        kind=ReservationKind.CAPACITY_BLOCK if block else ReservationKind.ON_DEMAND,
        total=total,
        free=max(total - used, 0),
        starts_at=start,
        ends_at=end,
        targeted=group_type.lower() != "open",
        ref=group_id,
    )


def _resource_group_of(arm_id: str) -> str:
    parts = arm_id.split("/")
    for i, part in enumerate(parts[:-1]):
        if part.lower() == "resourcegroups":
            return parts[i + 1]
    return ""
