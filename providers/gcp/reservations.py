"""GCP held capacity: reservations and calendar-mode future reservations, and flex-start VMs.

- :meth:`GCPReservations.reservations` (:class:`~providers.capabilities.HeldCapacity`) reads
  ``reservations.aggregatedList`` (every zone, every page): each ``READY`` or ``UPDATING``
  reservation of a GPU machine type, ``specificReservation.count`` its size and ``count -
  inUseCount`` what is free, ``specificReservationRequired`` whether only VMs that name it
  land in it. A reservation with a ``deleteAtTime`` ends then (a calendar-mode booking's
  auto-created reservation does): it reads as :attr:`ReservationKind.CALENDAR`, else as an
  open-ended :attr:`ReservationKind.ON_DEMAND` one. Then ``futureReservations.aggregatedList``:
  each calendar-mode (``reservationMode`` ``CALENDAR``) future reservation approved but not yet
  delivered (``status.procurementStatus`` ``APPROVED`` or ``PROVISIONING``) is a booking ahead,
  ``timeWindow`` its start and end, named as the reservation Compute Engine will create at its
  start (``reservationName``); a delivered one is listed by its reservation instead.
- A launch into one (:func:`reservation_affinity`) carries ``reservationAffinity``
  ``{consumeReservationType: SPECIFIC_RESERVATION, key:
  compute.googleapis.com/reservation-name, values: [name]}``; a calendar-mode reservation is
  consumed by a ``RESERVATION_BOUND`` VM (``scheduling.provisioningModel``) that Compute
  Engine deletes at the reservation's end (``instanceTerminationAction`` ``DELETE``), any
  other by a ``STANDARD`` one. No spot field is sent.
- Flex-start (Dynamic Workload Scheduler): with the provider option ``flex_start_hours`` an
  on-demand launch goes out as ``scheduling.provisioningModel`` ``FLEX_START`` with
  ``maxRunDuration`` (at most 7 days), ``instanceTerminationAction`` ``DELETE`` and
  ``reservationAffinity`` ``NO_RESERVATION``; ``flex_start_wait_s`` sets
  ``params.requestValidForDuration``, how long Compute Engine may look for the capacity before
  the insert fails (:func:`flex_start_fields`).

Calendar-mode availability is the ``advice.calendarMode`` method
(``POST .../regions/R/advice/calendarMode``); it answers where and when capacity could be
booked, with no price, so ``provisioner reserve`` does not list it (docs/clouds.md).
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from providers._common import parse_time
from providers._reserved import reservation_for
from providers.gcp.client import GCPClient
from providers.gcp.gpus import has_builtin_gpus
from provisioner.core.models import LaunchRequest, Market, Reservation, ReservationKind

#: reservation statuses whose capacity can be launched into
USABLE = ("READY", "UPDATING")
#: a calendar-mode future reservation booked and not yet delivered
BOOKED = ("APPROVED", "PROVISIONING")
#: the key of a SPECIFIC_RESERVATION affinity that names a reservation
RESERVATION_KEY = "compute.googleapis.com/reservation-name"
#: Compute Engine runs a flex-start VM for at most seven days
FLEX_START_MAX_HOURS = 7 * 24


def reservation_affinity(held: Reservation) -> dict[str, Any]:
    """``reservationAffinity`` naming ``held`` (a reservation of the project, by name)."""
    return {
        "consume_reservation_type": "SPECIFIC_RESERVATION",
        "key": RESERVATION_KEY,
        "values": [held.id],
    }


def scheduling_for(request: LaunchRequest, flex_hours: float | None) -> dict[str, Any] | None:
    """The ``scheduling`` of a reserved or flex-start launch; None: neither (the caller's)."""
    held = reservation_for(request, "gcp")
    if held is not None:
        if held.kind is ReservationKind.ON_DEMAND:
            return {
                "on_host_maintenance": "TERMINATE",
                "provisioning_model": "STANDARD",
                "automatic_restart": True,
            }
        return {
            "on_host_maintenance": "TERMINATE",
            "provisioning_model": "RESERVATION_BOUND",
            "instance_termination_action": "DELETE",
            "automatic_restart": False,
        }
    if request.market is Market.ON_DEMAND and flex_hours is not None:
        return {
            "on_host_maintenance": "TERMINATE",
            "provisioning_model": "FLEX_START",
            "max_run_duration": {"seconds": int(flex_hours * 3600)},
            "instance_termination_action": "DELETE",
            "automatic_restart": False,
        }
    return None


def flex_start_fields(wait_s: int | None) -> dict[str, Any]:
    """What a flex-start insert carries beside its scheduling."""
    out: dict[str, Any] = {"reservation_affinity": {"consume_reservation_type": "NO_RESERVATION"}}
    if wait_s is not None:
        out["params"] = {"request_valid_for_duration": {"seconds": int(wait_s)}}
    return out


class GCPReservations:
    """:class:`~providers.capabilities.HeldCapacity` for Compute Engine."""

    def __init__(self, client: GCPClient) -> None:
        self.client = client

    def reservations(self, regions: Iterable[str] | None = None) -> builtins.list[Reservation]:
        from google.cloud import compute_v1

        wanted = set(regions or self.client.regions)
        c = self.client.clients()
        out: list[Reservation] = []
        request = compute_v1.AggregatedListReservationsRequest(project=self.client.project)
        for scope, scoped in self.client.aggregated(c.reservations, request):
            zone = scope.rsplit("/", 1)[-1]
            region = zone.rsplit("-", 1)[0]
            if wanted and region not in wanted:
                continue
            for r in scoped.reservations:
                held = self._reservation_of(r, zone, region)
                if held is not None:
                    out.append(held)
        listed = {(r.zone, r.id) for r in out}
        future = compute_v1.AggregatedListFutureReservationsRequest(project=self.client.project)
        for scope, scoped in self.client.aggregated(c.future_reservations, future):
            zone = scope.rsplit("/", 1)[-1]
            region = zone.rsplit("-", 1)[0]
            if wanted and region not in wanted:
                continue
            for f in scoped.future_reservations:
                booked = self._booking_of(f, zone, region)
                if booked is not None and (booked.zone, booked.id) not in listed:
                    out.append(booked)
        return out

    def _reservation_of(self, r: Any, zone: str, region: str) -> Reservation | None:
        if r.status not in USABLE:
            return None
        spec = r.specific_reservation
        props = spec.instance_properties
        machine = props.machine_type.rsplit("/", 1)[-1]
        if not machine or not (has_builtin_gpus(machine) or list(props.guest_accelerators)):
            return None
        total = int(spec.count or 0)
        ends = parse_time(r.delete_at_time) if r.delete_at_time else None
        return Reservation(
            provider="gcp",
            id=r.name,
            region=region,
            zone=zone,
            instance_type=machine,
            kind=ReservationKind.CALENDAR if ends is not None else ReservationKind.ON_DEMAND,
            total=total,
            free=max(total - int(spec.in_use_count or 0), 0),
            ends_at=ends,
            targeted=bool(r.specific_reservation_required),
            ref=f"projects/{self.client.project}/zones/{zone}/reservations/{r.name}",
        )

    def _booking_of(self, f: Any, zone: str, region: str) -> Reservation | None:
        if f.reservation_mode != "CALENDAR" or f.status.procurement_status not in BOOKED:
            return None
        props = f.specific_sku_properties
        machine = props.instance_properties.machine_type.rsplit("/", 1)[-1]
        if not machine or not (
            has_builtin_gpus(machine) or list(props.instance_properties.guest_accelerators)
        ):
            return None
        window = f.time_window
        start = parse_time(window.start_time) if window.start_time else None
        end = parse_time(window.end_time) if window.end_time else None
        if end is None and start is not None and window.duration.seconds:
            end = start + timedelta(seconds=int(window.duration.seconds))
        total = int(props.total_count or 0)
        name = f.reservation_name or f.name
        return Reservation(
            provider="gcp",
            id=name,
            region=region,
            zone=zone,
            instance_type=machine,
            kind=ReservationKind.CALENDAR,
            total=total,
            free=total,
            starts_at=start,
            ends_at=end,
            targeted=bool(f.specific_reservation_required),
            ref=f"projects/{self.client.project}/zones/{zone}/reservations/{name}",
        )
