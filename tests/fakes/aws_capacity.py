"""EC2 capacity reservations and Capacity Blocks for ML for moto's server, which has neither
(moto 5.2 answers ``DescribeCapacityReservations`` with "not implemented").

:func:`install` adds to moto's ``EC2Response``, in this process (the contract suite's
``ThreadedMotoServer`` runs here), the actions as the EC2 API Reference defines them:

- ``DescribeCapacityReservations``: ``CapacityReservationId.N`` (an unknown one is
  ``InvalidCapacityReservationId.NotFound``), ``Filter.N`` with ``state``, ``instance-type``,
  ``availability-zone``, ``instance-match-criteria`` and ``reservation-type``, pages of
  ``MaxResults`` with ``NextToken``; answers ``capacityReservationSet``.
- ``DescribeCapacityBlockOfferings``: ``InstanceType``, ``InstanceCount``,
  ``CapacityDurationHours`` (all three required), ``StartDateRange`` (the earliest start) and
  ``EndDateRange`` (the latest end); answers the offerings seeded with :func:`seed_offering`
  that match, ``capacityBlockOfferingSet``.
- ``PurchaseCapacityBlock``: ``CapacityBlockOfferingId`` and ``InstancePlatform`` (both
  required); the offering becomes a ``capacity-block`` reservation (``targeted``,
  ``scheduled`` until its start, ``active`` after) and is gone from the offerings; answers
  ``capacityReservation``.

And ``RunInstances`` honours ``CapacityReservationSpecification.CapacityReservationTarget``:
the reservation must be there (``InvalidCapacityReservationId.NotFound``), ``active``, of the
launch's instance type and zone (``InvalidParameterValue``) with room for ``MinCount``
(``ReservationCapacityExceeded``); a capacity block is launched into only with
``InstanceMarketOptions.MarketType=capacity-block`` and an open reservation never with it
(``InvalidParameterCombination``). Each launch takes one from ``AvailableInstanceCount``.

Reservations a test holds already are seeded with :func:`seed_reservation`. State lives on
moto's per-region backend object (``POST /moto-api/reset`` drops it). Answers are serialised by
moto from botocore's EC2 model: the adapter reads them through boto3 over HTTP as it would
EC2's. This touches moto internals (pinned < 5.3).
"""

from __future__ import annotations

import fnmatch
import functools
import itertools
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

_KEY = "_provisioner_capacity"
_installed = threading.Lock()
_done = False
_ids = itertools.count(1)


@dataclass
class _Reservation:
    id: str
    instance_type: str
    zone: str
    total: int
    available: int
    state: str = "active"
    match: str = "targeted"  # "open" | "targeted"
    kind: str = "default"  # ReservationType: "default" | "capacity-block"
    start: datetime | None = None
    end: datetime | None = None
    account: str = "123456789012"
    region: str = "us-east-1"
    tags: dict[str, str] = field(default_factory=dict)

    def shape(self) -> dict[str, Any]:
        """The ``CapacityReservation`` structure of the EC2 model."""
        out: dict[str, Any] = {
            "CapacityReservationId": self.id,
            "OwnerId": self.account,
            "CapacityReservationArn": (
                f"arn:aws:ec2:{self.region}:{self.account}:capacity-reservation/{self.id}"
            ),
            "InstanceType": self.instance_type,
            "InstancePlatform": "Linux/UNIX",
            "AvailabilityZone": self.zone,
            "Tenancy": "default",
            "TotalInstanceCount": self.total,
            "AvailableInstanceCount": self.available,
            "State": self.state,
            "EndDateType": "limited" if self.end else "unlimited",
            "InstanceMatchCriteria": self.match,
            "ReservationType": self.kind,
            "Tags": [{"Key": k, "Value": v} for k, v in self.tags.items()],
        }
        if self.start:
            out["StartDate"] = self.start
        if self.end:
            out["EndDate"] = self.end
        return out


@dataclass
class _Offering:
    id: str
    instance_type: str
    zone: str
    count: int
    start: datetime
    hours: int
    fee: str  # UpfrontFee, a decimal string as EC2 sends it
    currency: str = "USD"

    @property
    def end(self) -> datetime:
        return self.start + timedelta(hours=self.hours)

    def shape(self) -> dict[str, Any]:
        """The ``CapacityBlockOffering`` structure of the EC2 model."""
        return {
            "CapacityBlockOfferingId": self.id,
            "InstanceType": self.instance_type,
            "AvailabilityZone": self.zone,
            "InstanceCount": self.count,
            "StartDate": self.start,
            "EndDate": self.end,
            "CapacityBlockDurationHours": self.hours,
            "UpfrontFee": self.fee,
            "CurrencyCode": self.currency,
            "Tenancy": "default",
        }


@dataclass
class _State:
    reservations: dict[str, _Reservation] = field(default_factory=dict)
    offerings: dict[str, _Offering] = field(default_factory=dict)
    #: instance id -> the reservation it was launched into
    placed: dict[str, str] = field(default_factory=dict)


def _state(backend: Any) -> _State:
    """The region's capacity, kept on moto's backend object (a reset drops it)."""
    found: _State | None = backend.__dict__.get(_KEY)
    if found is None:
        found = backend.__dict__[_KEY] = _State()
    return found


def _backend(region: str) -> Any:
    from moto.backends import get_backend
    from moto.core import DEFAULT_ACCOUNT_ID

    return get_backend("ec2")[DEFAULT_ACCOUNT_ID][region]


def _error(code: str, message: str) -> Exception:
    from moto.ec2.exceptions import EC2ClientError

    return EC2ClientError(code, message)


# -- seeding (what the account holds, what EC2 would offer) ---------------------------------------


def seed_reservation(
    region: str,
    zone: str,
    instance_type: str,
    total: int,
    *,
    available: int | None = None,
    match: str = "targeted",
    kind: str = "default",
    state: str = "active",
    start: datetime | None = None,
    end: datetime | None = None,
) -> str:
    """A reservation the account holds in ``region``; its id."""
    rid = f"cr-{next(_ids):017x}"
    _state(_backend(region)).reservations[rid] = _Reservation(
        id=rid,
        instance_type=instance_type,
        zone=zone,
        total=total,
        available=total if available is None else available,
        state=state,
        match=match,
        kind=kind,
        start=start,
        end=end,
        region=region,
    )
    return rid


def seed_offering(
    region: str, zone: str, instance_type: str, count: int, start: datetime, hours: int, fee: str
) -> str:
    """A Capacity Block EC2 offers in ``region``; its offering id."""
    oid = f"cb-{next(_ids):017x}"
    _state(_backend(region)).offerings[oid] = _Offering(
        oid, instance_type, zone, count, start.astimezone(UTC), hours, fee
    )
    return oid


def reservation_of(region: str, rid: str) -> dict[str, Any]:
    """The reservation ``rid`` as EC2 would describe it (for assertions)."""
    return _state(_backend(region)).reservations[rid].shape()


def placed_in(region: str, instance_id: str) -> str:
    """The reservation moto's instance ``instance_id`` was launched into (``""``: none)."""
    return _state(_backend(region)).placed.get(instance_id, "")


# -- the actions ------------------------------------------------------------------------------------


def _time(value: Any) -> datetime | None:
    if value in (None, ""):
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    text = str(value).replace("Z", "+00:00")
    parsed = datetime.fromisoformat(text)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


_FILTERS = {
    "state": lambda r: r.state,
    "instance-type": lambda r: r.instance_type,
    "availability-zone": lambda r: r.zone,
    "instance-match-criteria": lambda r: r.match,
    "reservation-type": lambda r: r.kind,
}


def describe_capacity_reservations(self: Any) -> Any:
    from moto.core.responses import ActionResult

    ids = self._get_param("CapacityReservationIds", [])
    filters = self._filters_from_querystring()
    size = int(self._get_param("MaxResults") or 1000)
    start = int(self._get_param("NextToken") or 0)
    self.error_on_dryrun()
    held = _state(self.ec2_backend).reservations
    for rid in ids:
        if rid not in held:
            raise _error(
                "InvalidCapacityReservationId.NotFound",
                f"The capacity reservation ID '{rid}' does not exist",
            )
    for name in filters:
        if name not in _FILTERS:
            raise _error("InvalidParameterValue", f"The filter '{name}' is invalid")
    found = [
        r
        for r in held.values()
        if (not ids or r.id in ids)
        and all(
            any(fnmatch.fnmatchcase(_FILTERS[n](r), v) for v in values)
            for n, values in filters.items()
        )
    ]
    page = found[start : start + size]
    out: dict[str, Any] = {"CapacityReservations": [r.shape() for r in page]}
    if start + size < len(found):
        out["NextToken"] = str(start + size)
    return ActionResult(out)


def describe_capacity_block_offerings(self: Any) -> Any:
    from moto.core.responses import ActionResult

    itype = self._get_param("InstanceType")
    count = self._get_int_param("InstanceCount")
    hours = self._get_int_param("CapacityDurationHours")
    if not itype or not count or not hours:
        raise _error(
            "MissingParameter",
            "InstanceType, InstanceCount and CapacityDurationHours are required",
        )
    days, rest = divmod(hours, 24)
    if rest or not (1 <= days <= 14 or (days <= 182 and days % 7 == 0)):
        raise _error("InvalidParameterValue", f"CapacityDurationHours {hours} is not offered")
    earliest = _time(self._get_param("StartDateRange"))
    latest = _time(self._get_param("EndDateRange"))
    self.error_on_dryrun()
    found = [
        o
        for o in _state(self.ec2_backend).offerings.values()
        if o.instance_type == itype
        and o.count == count
        and o.hours == hours
        and (earliest is None or o.start >= earliest)
        and (latest is None or o.end <= latest)
    ]
    return ActionResult({"CapacityBlockOfferings": [o.shape() for o in found]})


def purchase_capacity_block(self: Any) -> Any:
    from moto.core.responses import ActionResult

    oid = self._get_param("CapacityBlockOfferingId")
    platform = self._get_param("InstancePlatform")
    if not oid or not platform:
        raise _error(
            "MissingParameter", "CapacityBlockOfferingId and InstancePlatform are required"
        )
    self.error_on_dryrun()
    state = _state(self.ec2_backend)
    offering = state.offerings.pop(oid, None)
    if offering is None:
        raise _error("InvalidParameterValue", f"The capacity block offering {oid} is not offered")
    rid = f"cr-{next(_ids):017x}"
    now = datetime.now(UTC)  # EC2's clock: a block starts when its start date has come
    block = _Reservation(
        id=rid,
        instance_type=offering.instance_type,
        zone=offering.zone,
        total=offering.count,
        available=offering.count,
        state="active" if offering.start <= now else "scheduled",
        match="targeted",
        kind="capacity-block",
        start=offering.start,
        end=offering.end,
        region=self.region,
        tags=self._parse_tag_specification("capacity-reservation").get("capacity-reservation", {}),
    )
    state.reservations[rid] = block
    return ActionResult({"CapacityReservation": block.shape()})


def _reserved_run_instances(original: Any) -> Any:
    @functools.wraps(original)
    def run_instances(self: Any) -> Any:
        rid = self._get_param(
            "CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId"
        )
        market = self._get_param("InstanceMarketOptions.MarketType")
        if not rid:
            if market == "capacity-block":
                raise _error(
                    "InvalidParameterCombination",
                    "The capacity-block market needs a capacity reservation target",
                )
            return original(self)
        state = _state(self.ec2_backend)
        held = state.reservations.get(rid)
        if held is None:
            raise _error(
                "InvalidCapacityReservationId.NotFound",
                f"The capacity reservation ID '{rid}' does not exist",
            )
        if (market == "capacity-block") != (held.kind == "capacity-block"):
            raise _error(
                "InvalidParameterCombination",
                "A capacity block is launched into with MarketType capacity-block, and only it",
            )
        if held.state != "active":
            raise _error("InvalidParameterValue", f"Capacity reservation {rid} is {held.state}")
        itype = self._get_param("InstanceType")
        zone = self._get_param("Placement.AvailabilityZone")
        if itype != held.instance_type or (zone and zone != held.zone):
            raise _error(
                "InvalidParameterValue",
                f"Capacity reservation {rid} holds {held.instance_type} in {held.zone}",
            )
        wanted = int(self._get_param("MinCount") or 1)
        if held.available < wanted:
            raise _error(
                "ReservationCapacityExceeded",
                "The targeted Capacity Reservation does not have enough available capacity",
            )
        result = original(self)
        for instance in result.result.instances:
            held.available -= 1
            state.placed[instance.id] = rid
        return result

    return run_instances


def install() -> None:
    """Add the capacity actions to moto's EC2 responses (once per process)."""
    global _done
    with _installed:
        if _done:
            return
        from moto.ec2.responses import EC2Response

        EC2Response.describe_capacity_reservations = describe_capacity_reservations  # type: ignore[attr-defined]
        EC2Response.describe_capacity_block_offerings = describe_capacity_block_offerings  # type: ignore[attr-defined]
        EC2Response.purchase_capacity_block = purchase_capacity_block  # type: ignore[attr-defined]
        EC2Response.run_instances = _reserved_run_instances(EC2Response.run_instances)  # type: ignore[method-assign]
        _done = True
