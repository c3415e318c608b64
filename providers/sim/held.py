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

import builtins
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from providers.sim.config import SimConfig, SimError
from provisioner.core.models import Reservation, ReservationKind
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


def config_of(doc: dict[str, Any]) -> SimConfig:
    """The sim's options with its held capacity checked (:func:`validate`)."""
    cfg = SimConfig.from_dict(doc)
    cfg.reservations = validate(cfg.reservations)
    return cfg


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


def admit(cloud: Any, body: dict[str, Any], now: float) -> dict[str, Any]:
    """What a ``reserved`` launch adds to its instance's record (the reservation, when its
    block warns and ends), or the cloud's refusal."""
    rid = str(body.get("reservation") or "")
    r = next((x for x in cloud.config.reservations if x["id"] == rid), None)
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
    if used(rid, cloud.instances.values()) >= r["total"]:
        raise SimError(409, "capacity", "ReservationCapacityExceeded", f"{rid} is full")
    warn, stop = block_end(r, cloud.config.time_scale) or (None, None)
    return {"reservation": rid, "block_warn_real": warn, "block_stop_real": stop}


def block_end(r: dict[str, Any], scale: float) -> tuple[float | None, float] | None:
    """(when the cloud warns, when it takes the instances back) for an instance launched into
    ``r``: epoch seconds on the cloud's clock; None for capacity that does not end; the
    warning None where the cloud gives none."""
    if r["ends_at"] is None or r["kind"] == ReservationKind.ON_DEMAND.value:
        return None
    m = end_margins(r["cloud"])
    warn = r["ends_at"] - m.warn_s / scale if m.warn_s > 0 else None
    return warn, r["ends_at"] - m.stop_s / scale


def block_ends(cloud: Any, inst: dict[str, Any], now: float) -> None:
    """A capacity block's end on a running instance, as its cloud ends one: the warning (an
    event; no notice on the instance's metadata), then the instance taken back."""
    warn = inst.get("block_warn_real")
    if warn is not None and now >= warn and not inst.get("block_warned"):
        inst["block_warned"] = True
        cloud._event(inst, "block-ending", now, "capacity block ending (EventBridge warning)")
        cloud._save(inst)
    if now >= inst["block_stop_real"]:
        cloud._preempt_now(inst, now)
        inst["state_reason"] = "capacity block expired"
        cloud._save(inst)


def reservations(cloud: Any) -> list[dict[str, Any]]:
    """``GET /v1/reservations``: the held capacity not ended, with what is free now."""
    with cloud.lock:
        cloud.touch()
        return listing(
            cloud.config.reservations, cloud.instances.values(), cloud.now(),
            cloud.config.time_scale,
        )  # fmt: skip


def hold(cloud: Any, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``POST /v1/reservations``: replace the held capacity (kept in ``config.json``)."""
    from providers.sim.records import atomic_json

    with cloud.lock:
        cloud.config.reservations = validate(items)
        atomic_json(cloud.dir / "config.json", cloud.config.to_dict())
    return reservations(cloud)


# -- the adapter's side --------------------------------------------------------------------


class SimHeld:
    """:class:`providers.sim.SimProvider`'s held capacity (the ``HeldCapacity`` capability):
    what the server lists, as :class:`Reservation` s, and ``hold`` to define it. Given the
    provider's server call, its zone lookups and its server options (``hold`` keeps the
    reservations there, so that a restarted server gets them again)."""

    def __init__(
        self,
        call: Callable[..., Any],
        zone_cloud: Callable[[str], str],
        region_of: Callable[[str], str],
        options: dict[str, Any],
    ) -> None:
        self._call = call
        self.zone_cloud = zone_cloud
        self._region_of = region_of
        self.options = options

    def held(self, r: Mapping[str, Any]) -> dict[str, Any]:
        """A reservation as the server keeps it: the cloud its zone mimics filled in."""
        return {**r, "cloud": r.get("cloud") or self.zone_cloud(str(r.get("zone") or ""))}

    def hold(self, items: Iterable[Mapping[str, Any]]) -> builtins.list[Reservation]:
        """Replace the capacity the sim account holds (``POST /v1/reservations``)."""
        docs = [self.held(r) for r in items]
        self.options["reservations"] = docs
        self._call("hold", "POST", "/v1/reservations", {"reservations": docs})
        return self.reservations()

    def reservations(self, regions: Iterable[str] | None = None) -> builtins.list[Reservation]:
        """The capacity the account holds, not ended, with what is free in each now; its end
        margins on the sim's clock."""
        wanted = set(regions) if regions is not None else None
        out = []
        for d in self._call("reservations", "GET", "/v1/reservations")["reservations"]:
            zone = str(d["zone"])
            region = self._region_of(zone)
            if wanted is None or region in wanted:
                out.append(
                    Reservation(
                        "sim",
                        str(d["id"]),
                        region,
                        zone,
                        str(d["instance_type"]),
                        ReservationKind(d["kind"]),
                        total=int(d["total"]),
                        free=int(d["free"]),
                        starts_at=_when(d.get("starts_at")),
                        ends_at=_when(d.get("ends_at")),
                        held_usd_per_hour=d.get("held_usd_per_hour"),
                        warn_s=d.get("warn_s"),
                        stop_s=d.get("stop_s"),
                    )
                )
        return out


def _when(ts: Any) -> datetime | None:
    return None if ts is None else datetime.fromtimestamp(float(ts), UTC)
