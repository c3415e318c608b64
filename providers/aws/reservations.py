"""AWS held capacity: On-Demand Capacity Reservations and Capacity Blocks for ML.

- :meth:`AWSReservations.reservations` (:class:`~providers.capabilities.HeldCapacity`) is
  ``DescribeCapacityReservations`` (every page) in each region, of the states that hold or
  will hold capacity (``active``, ``scheduled``, ``pending``, ``payment-pending``,
  ``assessing``, ``delayed``), GPU types only. ``ReservationType`` ``capacity-block`` is a
  :attr:`ReservationKind.CAPACITY_BLOCK` (``StartDate``/``EndDate`` its window), anything else
  an open-ended :attr:`ReservationKind.ON_DEMAND` reservation; ``AvailableInstanceCount`` is
  what is free, ``TotalInstanceCount`` the size, ``InstanceMatchCriteria`` ``targeted`` or
  ``open``. A reservation's held price is the type's on-demand rate from the catalog (what an
  ODCR bills whether used or not); a block's upfront price is not in the listing (None).
- A launch into one (:func:`capacity_target`) is ``RunInstances`` with
  ``CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId`` and,
  for a capacity block, ``InstanceMarketOptions.MarketType`` ``capacity-block``; no spot
  option is sent.
- :meth:`AWSReservations.capacity_offerings` (:class:`~providers.capabilities.BooksCapacity`)
  is ``DescribeCapacityBlockOfferings`` (``InstanceType``, ``InstanceCount``,
  ``CapacityDurationHours``, ``StartDateRange`` the earliest start); each offering carries its
  ``UpfrontFee`` and ``CurrencyCode``. :meth:`AWSReservations.book` is
  ``PurchaseCapacityBlock`` (``InstancePlatform`` ``Linux/UNIX``): money is spent.

A block's instances are ended by EC2 before its ``EndDate``: an EventBridge event 40 minutes
before the end, and termination begins 30 minutes before it
(https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-monitor.html);
:data:`BLOCK_WIND_DOWN` is that lead.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from providers._common import utc
from providers._reserved import reservation_for
from providers.aws.client import AWSClient, EC2Client
from providers.aws.offers import AWSOffers, CatalogPrices
from providers.base import ErrorKind, ProviderError
from providers.capabilities import CapacityOffering
from provisioner.core.models import LaunchRequest, Reservation, ReservationKind

#: states of a reservation that holds capacity now or will (expired, cancelled and failed
#: ones are left out)
HELD_STATES = ["active", "scheduled", "pending", "payment-pending", "assessing", "delayed"]
#: EC2 begins terminating a capacity block's instances this long before its end date
BLOCK_WIND_DOWN = timedelta(minutes=30)
#: ... and sends the EventBridge warning this long before it
BLOCK_WARNING = timedelta(minutes=40)
#: the platform a block is bought for (the adapter launches Linux images)
PLATFORM = "Linux/UNIX"


def block_hours_ok(hours: int) -> bool:
    """Whether EC2 sells a Capacity Block of ``hours``: whole days, 1 to 14 days, or whole
    weeks up to 182 days (``CapacityDurationHours``, EC2 API Reference)."""
    days, rest = divmod(hours, 24)
    return rest == 0 and (1 <= days <= 14 or (14 < days <= 182 and days % 7 == 0))


def capacity_target(request: LaunchRequest, region: str) -> dict[str, Any]:
    """The ``RunInstances`` fields that put a reserved launch into its reservation ({} on
    spot and on-demand)."""
    held = reservation_for(request, "aws")
    if held is None:
        return {}
    if held.region and held.region != region:
        raise ProviderError(
            ErrorKind.INVALID,
            "ReservationMismatch",
            f"reservation {held.id} is in {held.region}, the launch in {region}",
            provider="aws",
        )
    out: dict[str, Any] = {
        "CapacityReservationSpecification": {
            "CapacityReservationTarget": {"CapacityReservationId": held.id}
        }
    }
    if held.kind is ReservationKind.CAPACITY_BLOCK:
        out["InstanceMarketOptions"] = {"MarketType": "capacity-block"}
    return out


class AWSReservations:
    """:class:`~providers.capabilities.HeldCapacity` and
    :class:`~providers.capabilities.BooksCapacity` for EC2 (the GPU types from ``offers``)."""

    def __init__(self, client: AWSClient, offers: AWSOffers) -> None:
        self.client = client
        self.offers = offers

    def reservations(self, regions: Iterable[str] | None = None) -> builtins.list[Reservation]:
        out: list[Reservation] = []
        for region in regions or self.client.regions:
            gpu_types = {t["InstanceType"] for t in self.offers.types_with_gpus(region)}

            def fetch(ec2: EC2Client) -> builtins.list[dict[str, Any]]:
                found: builtins.list[dict[str, Any]] = []
                pages = ec2.get_paginator("describe_capacity_reservations").paginate(
                    **self.client.pages(Filters=[{"Name": "state", "Values": HELD_STATES}])
                )
                for page in pages:
                    found.extend(page.get("CapacityReservations", []))
                return found

            rows = self.client.call(region, "DescribeCapacityReservations", fetch)
            prices = CatalogPrices.for_region(region)
            for row in rows:
                if row.get("InstanceType") not in gpu_types:
                    continue
                out.append(reservation_of(row, region, prices))
        return out

    def capacity_offerings(
        self,
        instance_type: str,
        count: int,
        hours: int,
        start_after: datetime | None = None,
        regions: Iterable[str] | None = None,
    ) -> builtins.list[CapacityOffering]:
        if count < 1:
            raise ProviderError(
                ErrorKind.INVALID,
                "InvalidParameterValue",
                "count must be 1 or more",
                provider="aws",
            )
        if not block_hours_ok(hours):
            raise ProviderError(
                ErrorKind.INVALID,
                "InvalidParameterValue",
                f"{hours} hours: a Capacity Block lasts whole days, 1 to 14, or whole weeks up "
                "to 26 (182 days)",
                provider="aws",
            )
        kwargs: dict[str, Any] = {
            "InstanceType": instance_type,
            "InstanceCount": count,
            "CapacityDurationHours": hours,
        }
        if start_after is not None:
            kwargs["StartDateRange"] = utc(start_after)
        out: list[CapacityOffering] = []
        for region in regions or self.client.regions:

            def fetch(ec2: EC2Client) -> builtins.list[dict[str, Any]]:
                found: builtins.list[dict[str, Any]] = []
                pages = ec2.get_paginator("describe_capacity_block_offerings").paginate(
                    **self.client.pages(**kwargs)
                )
                for page in pages:
                    found.extend(page.get("CapacityBlockOfferings", []))
                return found

            for row in self.client.call(region, "DescribeCapacityBlockOfferings", fetch):
                out.append(offering_of(row, region))
        out.sort(key=lambda o: (o.starts_at, o.upfront_usd))
        return out

    def book(self, offering: CapacityOffering) -> Reservation:
        if offering.provider not in ("", "aws"):
            raise ProviderError(
                ErrorKind.INVALID,
                "WrongProvider",
                f"offering {offering.id} is {offering.provider}'s",
                provider="aws",
            )
        region = offering.region or self.client.region
        answer = self.client.call(
            region,
            "PurchaseCapacityBlock",
            lambda ec2: ec2.purchase_capacity_block(
                CapacityBlockOfferingId=offering.id, InstancePlatform=PLATFORM
            ),
        )
        row = answer.get("CapacityReservation") or (answer.get("CapacityReservations") or [{}])[0]
        if not row.get("CapacityReservationId"):
            raise ProviderError(
                ErrorKind.TRANSIENT,
                "NoReservationInAnswer",
                f"PurchaseCapacityBlock for {offering.id} answered no capacity reservation",
                provider="aws",
            )
        held = reservation_of(row, region, None)
        hours = offering.hours * offering.count
        if offering.currency == "USD" and hours > 0:
            from dataclasses import replace

            held = replace(held, held_usd_per_hour=offering.upfront_usd / hours)
        return held


def reservation_of(
    row: Mapping[str, Any], region: str, prices: CatalogPrices | None
) -> Reservation:
    """One ``CapacityReservation`` of EC2's answer as a :class:`Reservation`."""
    block = row.get("ReservationType") == "capacity-block"
    itype = str(row.get("InstanceType", ""))
    zone = str(row.get("AvailabilityZone", ""))
    held_price: float | None = None
    if not block and prices is not None:
        known = prices.find(zone, itype)
        held_price = known.price if known is not None and known.price else None
    start = row.get("StartDate")
    end = row.get("EndDate")
    return Reservation(
        provider="aws",
        id=str(row["CapacityReservationId"]),
        region=region,
        zone=zone,
        instance_type=itype,
        kind=ReservationKind.CAPACITY_BLOCK if block else ReservationKind.ON_DEMAND,
        total=int(row.get("TotalInstanceCount") or 0),
        free=int(row.get("AvailableInstanceCount") or 0),
        # an ODCR's StartDate is when it was made (usable at once), a block's when it opens
        starts_at=utc(start) if block and start else None,
        ends_at=utc(end) if end else None,
        held_usd_per_hour=held_price,
        targeted=row.get("InstanceMatchCriteria") == "targeted",
        ref=str(row.get("CapacityReservationArn", "")),
    )


def offering_of(row: Mapping[str, Any], region: str) -> CapacityOffering:
    """One ``CapacityBlockOffering`` as a :class:`CapacityOffering` (the fee is the whole
    block's, paid at purchase)."""
    start = utc(row["StartDate"])
    end = row.get("EndDate")
    hours = int(row.get("CapacityBlockDurationHours") or 0)
    return CapacityOffering(
        provider="aws",
        id=str(row["CapacityBlockOfferingId"]),
        region=region,
        zone=str(row.get("AvailabilityZone", "")),
        instance_type=str(row.get("InstanceType", "")),
        count=int(row.get("InstanceCount") or 0),
        starts_at=start,
        ends_at=utc(end) if end else start + timedelta(hours=hours),
        upfront_usd=float(row.get("UpfrontFee") or 0.0),
        currency=str(row.get("CurrencyCode") or "USD"),
        kind=ReservationKind.CAPACITY_BLOCK.value,
    )
