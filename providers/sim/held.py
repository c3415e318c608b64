"""The capacity the sim account holds: reservations and capacity blocks, as a cloud lists them.

Defined in the sim's options (``SimConfig.reservations``, so ``POST /v1/config`` or ``POST
/v1/reservations`` sets them, and ``config.json`` keeps them), each a JSON object::

    {"id": "cb-1", "zone": "us-east-1a", "instance_type": "p5.48xlarge",
     "kind": "capacity-block", "total": 2, "starts_at": 1765000000, "ends_at": 1765007200,
     "held_usd_per_hour": 31.46}

``starts_at``/``ends_at`` are epoch seconds on the cloud's clock (the virtual one where set),
``null`` for capacity that is there now / does not end; ``kind`` a
:class:`~provisioner.core.models.ReservationKind` value. ``GET /v1/reservations`` lists those
not ended with how many are free (total less the running instances launched into each). A
launch with market ``reserved`` names one (``reservation``); it is refused, as a cloud does,
when the reservation is unknown, not started, ended, of another type or zone, or full.

A block ends as the mimicked cloud ends one (:data:`provisioner.core.reserved.END_MARGINS`,
sim seconds, scaled to the sim's clock like every notice): where the cloud warns (AWS: 40
minutes before the end, through EventBridge) the warning is written to ``events.jsonl`` as a
``block-ending`` event (the API does not report it, the instance's metadata does not serve it:
on AWS a block's instance gets no spot notice); from the cloud's stop margin before the end
(AWS: 30 minutes) its instances are taken back (preempted: "capacity block expired"). The
job learns of the end from its launch (the instance's tags and the agent's job spec), as on
any cloud.
"""

from __future__ import annotations

from typing import Any

from providers.sim.config import SimError
from provisioner.core.models import ReservationKind
from provisioner.core.reserved import OWN_LEAD_S, end_margins

KINDS = {k.value for k in ReservationKind}


def _bad(message: str) -> SimError:
    return SimError(400, "invalid", "InvalidParameterValue", message)


def validate(items: Any) -> list[dict[str, Any]]:
    """The reservations option, checked (a clear error naming the item otherwise)."""
    if not isinstance(items, list):
        raise _bad("reservations: expected a list")
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for n, doc in enumerate(items):
        if not isinstance(doc, dict):
            raise _bad(f"reservations[{n}]: expected an object")
        rid = str(doc.get("id") or "")
        if not rid or rid in seen:
            raise _bad(f"reservations[{n}]: a unique id is required")
        seen.add(rid)
        kind = str(doc.get("kind") or ReservationKind.ON_DEMAND.value)
        if kind not in KINDS:
            raise _bad(f"reservations[{n}] {rid}: kind {kind!r} (one of {sorted(KINDS)})")
        total = doc.get("total", 1)
        if not isinstance(total, int) or total < 1:
            raise _bad(f"reservations[{n}] {rid}: total must be a whole number >= 1")
        if not doc.get("zone") or not doc.get("instance_type"):
            raise _bad(f"reservations[{n}] {rid}: zone and instance_type are required")
        starts, ends = doc.get("starts_at"), doc.get("ends_at")
        if kind != ReservationKind.ON_DEMAND.value and ends is None:
            raise _bad(f"reservations[{n}] {rid}: a {kind} needs ends_at")
        if starts is not None and ends is not None and float(ends) <= float(starts):
            raise _bad(f"reservations[{n}] {rid}: ends_at must be after starts_at")
        held = doc.get("held_usd_per_hour")
        out.append(
            {
                "id": rid,
                "zone": str(doc["zone"]),
                "instance_type": str(doc["instance_type"]),
                "kind": kind,
                "total": total,
                "starts_at": None if starts is None else float(starts),
                "ends_at": None if ends is None else float(ends),
                "held_usd_per_hour": None if held is None else float(held),
                # whose end margins it has (the adapter fills the cloud its zone mimics)
                "cloud": str(doc.get("cloud") or "aws"),
            }
        )
    return out


def used(rid: str, instances: Any) -> int:
    return sum(1 for i in instances if i.get("reservation") == rid and i["state"] == "running")


def listing(
    items: list[dict[str, Any]], instances: Any, now: float, scale: float
) -> list[dict[str, Any]]:
    """Those not ended, with ``free`` now and the end margins on the sim's clock (``warn_s``:
    when the job is told, at least our own lead before the stop; ``stop_s``: when the cloud
    takes the instances back), for the adapter's :class:`Reservation`."""
    out = []
    for r in items:
        if r["ends_at"] is not None and now >= r["ends_at"]:
            continue
        m = end_margins(r["cloud"])
        warn = max(m.warn_s, m.stop_s + OWN_LEAD_S) / scale
        out.append(
            {
                **r,
                "free": max(0, r["total"] - used(r["id"], instances)),
                "warn_s": warn,
                "stop_s": m.stop_s / scale,
            }
        )
    return out


def admit(
    items: list[dict[str, Any]], body: dict[str, Any], instances: Any, now: float
) -> dict[str, Any]:
    """The reservation a ``reserved`` launch goes into, or the cloud's refusal."""
    rid = str(body.get("reservation") or "")
    r = next((x for x in items if x["id"] == rid), None)
    if r is None:
        raise SimError(
            400, "invalid", "InvalidCapacityReservationId.NotFound", f"no reservation {rid!r}"
        )
    if r["zone"] != body.get("zone") or r["instance_type"] != body.get("instance_type"):
        raise SimError(
            400,
            "invalid",
            "InvalidParameterCombination",
            f"reservation {rid} holds {r['instance_type']} in {r['zone']}",
        )
    if r["starts_at"] is not None and now < r["starts_at"]:
        raise SimError(409, "capacity", "ReservationCapacityExceeded", f"{rid} has not started")
    if r["ends_at"] is not None and now >= r["ends_at"]:
        raise SimError(409, "capacity", "ReservationCapacityExceeded", f"{rid} has ended")
    if used(rid, instances) >= r["total"]:
        raise SimError(409, "capacity", "ReservationCapacityExceeded", f"{rid} is full")
    return r


def block_end(r: dict[str, Any], scale: float) -> tuple[float | None, float] | None:
    """(when the cloud warns, when it takes the instances back) for an instance launched into
    ``r``: epoch seconds on the cloud's clock; None for capacity that does not end; the
    warning None where the cloud gives none."""
    if r["ends_at"] is None or r["kind"] == ReservationKind.ON_DEMAND.value:
        return None
    m = end_margins(r["cloud"])
    warn = r["ends_at"] - m.warn_s / scale if m.warn_s > 0 else None
    return warn, r["ends_at"] - m.stop_s / scale
