"""Alibaba held capacity: ECS capacity reservations (private pools).

:meth:`AlibabaReservations.reservations` (:class:`~providers.capabilities.HeldCapacity`) is
``DescribeCapacityReservations`` (every page of ``MaxResults``/``NextToken``) in each region,
of the statuses that hold or will hold capacity (``Active``, ``Pending``, ``Preparing``,
``Prepared``). A capacity reservation holds one or more ``AllocatedResources`` (an instance
type in a zone: ``TotalAmount``, ``UsedAmount``, ``AvailableAmount``); each of a GPU type
(``ecs.gn*``, ``ecs.ebmgn*``; vGPU slices left out) is one :class:`Reservation`, its id the
private pool's (``PrivatePoolOptionsId``), ``targeted`` when
``PrivatePoolOptionsMatchCriteria`` is ``Target``; ``StartTime``/``EndTime`` bound it
(``EndTimeType`` ``Unlimited``: open-ended).

A launch into one (:func:`private_pool`) is ``RunInstances`` with
``PrivatePoolOptions.MatchCriteria=Target`` and ``PrivatePoolOptions.Id``, pay-as-you-go
(``SpotStrategy=NoSpot``); no spot field.
https://www.alibabacloud.com/help/en/ecs/developer-reference/api-ecs-2014-05-26-describecapacityreservations
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping
from functools import partial
from typing import Any

from providers._reserved import reservation_for
from providers.alibaba.client import AlibabaClient, nested, parse_time
from providers.alibaba.errors import NAME
from provisioner.core.models import LaunchRequest, Reservation, ReservationKind

#: statuses of a capacity reservation that holds capacity now or will
HELD = ("Active", "Pending", "Preparing", "Prepared")


def is_gpu_type(instance_type: str) -> bool:
    """A whole-GPU ECS type (gn*, ebmgn*), not a vGPU slice (vgn*, sgn*)."""
    family = instance_type.removeprefix("ecs.")
    return family.startswith(("gn", "ebmgn"))


def private_pool(request: LaunchRequest) -> tuple[str, str] | None:
    """(``MatchCriteria``, ``Id``) of a reserved launch's private pool (None: not reserved)."""
    held = reservation_for(request, NAME)
    if held is None:
        return None
    return "Target", held.id


class AlibabaReservations:
    """:class:`~providers.capabilities.HeldCapacity` for Alibaba ECS."""

    def __init__(self, client: AlibabaClient) -> None:
        self.client = client

    def reservations(self, regions: Iterable[str] | None = None) -> builtins.list[Reservation]:
        models = self.client.models()
        out: list[Reservation] = []
        for region in regions or self.client.regions:
            client = self.client.ecs(region)
            token: str | None = None
            while True:
                req = models.DescribeCapacityReservationsRequest(
                    region_id=region, max_results=self.client.page, next_token=token
                )
                body = self.client.body(
                    self.client.call(
                        "DescribeCapacityReservations",
                        partial(client.describe_capacity_reservations, req),
                    )
                )
                for item in nested(body, "CapacityReservationSet", "CapacityReservationItem"):
                    out.extend(reservations_of(item, region))
                token = body.get("NextToken") or None
                if not token:
                    break
        return out


def reservations_of(item: Mapping[str, Any], region: str) -> builtins.list[Reservation]:
    """One ``CapacityReservationItem`` as a :class:`Reservation` per GPU type and zone in it."""
    if str(item.get("Status", "")) not in HELD:
        return []
    pool = str(item.get("PrivatePoolOptionsId", ""))
    start = parse_time(item.get("StartTime")) if item.get("StartTime") else None
    unlimited = str(item.get("EndTimeType", "")) == "Unlimited"
    end = None if unlimited or not item.get("EndTime") else parse_time(item.get("EndTime"))
    out: list[Reservation] = []
    for res in nested(item, "AllocatedResources", "AllocatedResource"):
        itype = str(res.get("InstanceType", ""))
        if not is_gpu_type(itype):
            continue
        total = int(res.get("TotalAmount") or 0)
        used = int(res.get("UsedAmount") or 0)
        free = res.get("AvailableAmount")
        out.append(
            Reservation(
                provider=NAME,
                id=pool,
                region=str(item.get("RegionId") or region),
                zone=str(res.get("zoneId") or res.get("ZoneId") or ""),
                instance_type=itype,
                kind=ReservationKind.ON_DEMAND,
                total=total,
                free=max(int(free) if free is not None else total - used, 0),
                starts_at=start if str(item.get("Status")) != "Active" else None,
                ends_at=end,
                targeted=str(item.get("PrivatePoolOptionsMatchCriteria", "")) == "Target",
                ref=str(item.get("PrivatePoolOptionsName", "")),
            )
        )
    return out
