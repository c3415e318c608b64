"""Reservations and future reservations for the fake Compute Engine API (a mixin of
:class:`fakes.gcp_server.GCPServer`), as the Compute Engine REST reference defines them:

- ``GET /compute/v1/projects/P/aggregated/reservations`` (``reservations.aggregatedList``,
  scopes ``zones/Z`` holding ``reservations``, paged like the other aggregated lists) and
  ``GET .../zones/Z/reservations`` (``list``): ``compute#reservation`` resources with
  ``specificReservation`` (``count``, ``inUseCount``, ``instanceProperties.machineType``),
  ``specificReservationRequired``, ``status`` and, where one is set, ``deleteAtTime``.
- ``GET /compute/v1/projects/P/aggregated/futureReservations``
  (``futureReservations.aggregatedList``): ``compute#futureReservation`` resources with
  ``specificSkuProperties.totalCount``, ``timeWindow`` (``startTime``/``endTime``),
  ``reservationMode``, ``reservationName`` and ``status.procurementStatus``.

An instance insert with ``reservationAffinity`` ``SPECIFIC_RESERVATION`` (key
``compute.googleapis.com/reservation-name``) must name a reservation of its zone (``400
invalid`` otherwise: Compute Engine refuses a VM whose specific reservation it cannot find),
of its machine type and ``READY``; the VM takes one from it (``inUseCount``) until it is
deleted. (A full reservation is not modelled: Compute Engine's answer to one is not asserted
here.) A ``RESERVATION_BOUND``
VM must name one; a ``FLEX_START`` VM must carry ``maxRunDuration`` (7 days at most) and
``instanceTerminationAction`` ``DELETE`` and may not consume a reservation.

Reservations the project holds are seeded with :meth:`Reservations.add_reservation` and
:meth:`Reservations.add_future_reservation`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

RESERVATION_KEY = "compute.googleapis.com/reservation-name"
FLEX_MAX_S = 7 * 24 * 3600


class Reservations:
    """The reservation routes and checks; state in ``self._state`` of the server."""

    project: str
    _state: Any
    _url: Callable[..., str]
    _next_id: Callable[[], str]
    _aggregated: Callable[..., tuple[int, Any]]
    _page: Callable[..., tuple[list[Any], str]]

    # -- seeding --------------------------------------------------------------------------------

    def _held(self) -> dict[tuple[str, str], dict[str, Any]]:
        found: dict[tuple[str, str], dict[str, Any]] | None = getattr(
            self._state, "reservations", None
        )
        if found is None:
            found = {}
            self._state.reservations = found
        return found

    def _booked(self) -> dict[tuple[str, str], dict[str, Any]]:
        found: dict[tuple[str, str], dict[str, Any]] | None = getattr(
            self._state, "future_reservations", None
        )
        if found is None:
            found = {}
            self._state.future_reservations = found
        return found

    def add_reservation(
        self,
        zone: str,
        name: str,
        machine_type: str,
        count: int,
        *,
        in_use: int = 0,
        required: bool = True,
        status: str = "READY",
        delete_at: datetime | None = None,
    ) -> dict[str, Any]:
        res: dict[str, Any] = {
            "kind": "compute#reservation",
            "id": self._next_id(),
            "creationTimestamp": "2026-01-05T10:00:00.000-08:00",
            "selfLink": self._url("zones", zone, "reservations", name),
            "zone": self._url("zones", zone),
            "name": name,
            "specificReservation": {
                "instanceProperties": {"machineType": machine_type},
                "count": str(count),
                "inUseCount": str(in_use),
                "assuredCount": str(count),
            },
            "specificReservationRequired": required,
            "status": status,
        }
        if delete_at is not None:
            res["deleteAtTime"] = delete_at.isoformat()
        self._held()[(zone, name)] = res
        return res

    def add_future_reservation(
        self,
        zone: str,
        name: str,
        machine_type: str,
        count: int,
        start: datetime,
        end: datetime,
        *,
        mode: str = "CALENDAR",
        procurement: str = "APPROVED",
        reservation_name: str | None = None,
    ) -> dict[str, Any]:
        fr: dict[str, Any] = {
            "kind": "compute#futureReservation",
            "id": self._next_id(),
            "selfLink": self._url("zones", zone, "futureReservations", name),
            "zone": self._url("zones", zone),
            "name": name,
            "specificSkuProperties": {
                "instanceProperties": {"machineType": machine_type},
                "totalCount": str(count),
            },
            "timeWindow": {"startTime": start.isoformat(), "endTime": end.isoformat()},
            "reservationMode": mode,
            "reservationName": reservation_name or name,
            "specificReservationRequired": True,
            "planningStatus": "SUBMITTED",
            "status": {"procurementStatus": procurement},
        }
        self._booked()[(zone, name)] = fr
        return fr

    def reservation(self, zone: str, name: str) -> dict[str, Any]:
        return self._held()[(zone, name)]

    # -- routes ---------------------------------------------------------------------------------

    def _reservation_routes(self) -> Iterator[tuple[str, str, Callable[..., tuple[int, Any]]]]:
        p = r"/compute/v1/projects/(?P<project>[^/]+)"
        yield p + r"/aggregated/reservations", "GET", self._aggregated_reservations
        yield p + r"/zones/(?P<zone>[^/]+)/reservations", "GET", self._list_reservations
        yield p + r"/aggregated/futureReservations", "GET", self._aggregated_future

    def _aggregated_reservations(
        self, query: dict[str, str], body: Any, project: str
    ) -> tuple[int, Any]:
        per_zone: dict[str, list[dict[str, Any]]] = {}
        for (zone, _), res in self._held().items():
            per_zone.setdefault(zone, []).append(res)
        return self._aggregated(
            "compute#reservationAggregatedList", "reservations", per_zone, query
        )

    def _list_reservations(
        self, query: dict[str, str], body: Any, project: str, zone: str
    ) -> tuple[int, Any]:
        items = [r for (z, _), r in self._held().items() if z == zone]
        rows, token = self._page(items, query)
        out: dict[str, Any] = {"kind": "compute#reservationList", "items": rows}
        if token:
            out["nextPageToken"] = token
        return 200, out

    def _aggregated_future(self, query: dict[str, str], body: Any, project: str) -> tuple[int, Any]:
        per_zone: dict[str, list[dict[str, Any]]] = {}
        for (zone, _), fr in self._booked().items():
            per_zone.setdefault(zone, []).append(fr)
        return self._aggregated(
            "compute#futureReservationsAggregatedListResponse",
            "futureReservations",
            per_zone,
            query,
        )

    # -- at insert -----------------------------------------------------------------------------

    def _instance_reservation(
        self, body: dict[str, Any], zone: str, machine_type: str
    ) -> tuple[dict[str, Any] | None, Any]:
        """(the reservation an insert consumes, the error to answer)."""
        from .gcp_server import _error

        affinity = body.get("reservationAffinity") or {}
        kind = affinity.get("consumeReservationType", "ANY_RESERVATION")
        scheduling = body.get("scheduling") or {}
        model = scheduling.get("provisioningModel", "STANDARD")
        if model == "FLEX_START":
            seconds = int((scheduling.get("maxRunDuration") or {}).get("seconds") or 0)
            if not 0 < seconds <= FLEX_MAX_S:
                return None, _error(
                    400, "invalid", "A FLEX_START instance needs a maxRunDuration of 7 days at most"
                )
            if scheduling.get("instanceTerminationAction") != "DELETE":
                return None, _error(
                    400, "invalid", "A FLEX_START instance needs instanceTerminationAction DELETE"
                )
            if kind != "NO_RESERVATION":
                return None, _error(
                    400, "invalid", "A FLEX_START instance may not consume a reservation"
                )
            return None, None
        if kind != "SPECIFIC_RESERVATION":
            if model == "RESERVATION_BOUND":
                return None, _error(
                    400, "invalid", "A RESERVATION_BOUND instance must name a specific reservation"
                )
            return None, None
        values = affinity.get("values") or []
        if affinity.get("key") != RESERVATION_KEY or len(values) != 1:
            return None, _error(
                400,
                "invalid",
                "Invalid value for field 'resource.reservationAffinity': a specific reservation "
                f"is named by the key {RESERVATION_KEY} and one value",
            )
        name = str(values[0]).rsplit("/", 1)[-1]
        res = self._held().get((zone, name))
        if res is None or res["status"] != "READY":
            return None, _error(
                400,
                "invalid",
                f"Specified reservation '{name}' does not exist or is not ready in zone {zone}.",
            )
        spec = res["specificReservation"]
        if spec["instanceProperties"]["machineType"] != machine_type:
            return None, _error(
                400,
                "invalid",
                f"Reservation '{name}' holds {spec['instanceProperties']['machineType']}, "
                f"not {machine_type}.",
            )
        if "deleteAtTime" in res and model != "RESERVATION_BOUND":
            return None, _error(
                400, "invalid", "A calendar-mode reservation is consumed by RESERVATION_BOUND VMs"
            )
        return res, None

    @staticmethod
    def _consume(res: dict[str, Any], delta: int) -> None:
        spec = res["specificReservation"]
        spec["inUseCount"] = str(max(int(spec["inUseCount"]) + delta, 0))
