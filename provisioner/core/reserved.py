"""Held capacity (``Market.RESERVED``): when a reservation may be launched into, when a block's
end is its notice, and the clouds' end margins. Pure: time is passed in.

A reservation the account holds (an AWS On-Demand Capacity Reservation or Capacity Block for
ML, a GCP reservation or calendar-mode booking, an Azure capacity reservation group) is paid
for whether used or not: a launch into it costs the job nothing more (its *marginal* price is
zero), so a policy whose market starts with ``reserved`` uses it before spot and on-demand.
It is never preempted, but a capacity block or a calendar booking *ends*, at a time known
from the start. That end is a notice known in advance:

* :func:`usable_end`: when the cloud starts taking the block's instances back (AWS: 30 minutes
  before the block's end time);
* :func:`notice_at`: when the job is told to checkpoint and move: the cloud's own warning
  (AWS's EventBridge event, 40 minutes before the end) or, where the cloud warns later or not
  at all, :data:`OWN_LEAD_S` before the usable end;
* :func:`block_notice`: that notice as an :class:`~provisioner.core.models.Interruption`
  (``kind="notice"``, deadline the usable end), which decide() handles like a spot notice (the
  replacement launched before the end, make before break, :mod:`provisioner.core.overlap`);
  from the usable end on it is a preemption (the instance is stopped, whatever the cloud did).

The block's times travel with the instance as two tags (:data:`TAG_BLOCK_NOTICE`,
:data:`TAG_BLOCK_END`: epoch seconds, digits only, valid as a label on every cloud: :func:`block_tags`),
which the daemon's launch adds to the request's tags, and in the agent's job spec, so
that the agent serves itself the notice on clouds whose metadata says nothing of a block.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from provisioner.core.models import Instance, Interruption, Reservation

#: An instance's tags: when its block's notice is due and when the block stops being usable
#: (epoch seconds; absent on capacity that does not end)
TAG_BLOCK_NOTICE = "provisioner-block-notice"
TAG_BLOCK_END = "provisioner-block-end"

#: Our own lead before a usable end where the cloud warns later than this, or not at all: long
#: enough for the agent's checkpoint and for a replacement to be launched beside it.
OWN_LEAD_S = 600.0


@dataclass(frozen=True, slots=True)
class EndMargins:
    """How a cloud ends held capacity that ends: ``warn_s`` before its end time it says so
    (0: no warning), ``stop_s`` before it the instances begin to be taken back. ``docs``: where
    the cloud says so."""

    warn_s: float
    stop_s: float
    docs: str = ""


#: The clouds' end margins for capacity blocks and calendar bookings, the one table of them.
END_MARGINS: Mapping[str, EndMargins] = {
    # "EC2 sends an event through EventBridge 40 minutes before the end of the Capacity
    # Block"; "we begin terminating instances running in the Capacity Block 30 minutes before
    # the reservation end time"
    "aws": EndMargins(
        warn_s=40 * 60.0,
        stop_s=30 * 60.0,
        docs="https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-monitor.html",
    ),
    # calendar-mode future reservations: the reservation is deleted at its end time and the
    # VMs consuming it are stopped then; no earlier warning is documented (our own lead)
    "gcp": EndMargins(
        warn_s=0.0,
        stop_s=0.0,
        docs="https://cloud.google.com/compute/docs/instances/future-reservations-calendar-mode-overview",
    ),
}
#: A cloud not in the table: no warning, taken back at the end time
NO_MARGINS = EndMargins(0.0, 0.0, "no documented warning: the end time, our own lead before it")


def strategy_for(names: tuple[str, ...]) -> str:
    """The strategy decide() runs for a policy's market (``MarketChoice.names``: the markets it
    allows, in order), the one answer the daemon, the simulator and the estimate use. Held
    capacity (``reserved``) is used before any strategy is asked (decide() launches into a
    usable reservation first); the strategy chooses among the rest: on-demand only, spot only
    (wait without spot), both (ours), or none (reserved alone: only reservations, it waits)."""
    from provisioner.core.strategies import DEFAULT_STRATEGY, OnDemandOnly, SpotOnly

    rest = tuple(n for n in names if n != "reserved")
    if rest in (("on-demand",), ()):
        return OnDemandOnly.name
    if rest == ("spot",):
        return SpotOnly.name
    return DEFAULT_STRATEGY


def end_margins(provider: str) -> EndMargins:
    return END_MARGINS.get(provider, NO_MARGINS)


def margins_of(r: Reservation) -> EndMargins:
    """``r``'s end margins: its own where the adapter gave them, else its cloud's."""
    m = end_margins(r.provider)
    if r.warn_s is None and r.stop_s is None:
        return m
    stop = m.stop_s if r.stop_s is None else r.stop_s
    warn = m.warn_s if r.warn_s is None else r.warn_s
    return EndMargins(warn, stop, "the adapter's")


def usable_end(r: Reservation | None) -> datetime | None:
    """When the cloud starts taking the reservation's instances back (None: it does not end)."""
    if r is None or r.ends_at is None or not r.kind.ends:
        return None
    return r.ends_at - timedelta(seconds=margins_of(r).stop_s)


def notice_at(r: Reservation | None) -> datetime | None:
    """When a job on the reservation is told to checkpoint and move (None: never)."""
    end = usable_end(r)
    if r is None or end is None:
        return None
    m = margins_of(r)
    lead = max(m.warn_s - m.stop_s, OWN_LEAD_S if r.warn_s is None else 0.0)
    return end - timedelta(seconds=lead)


def usable(r: Reservation, now: datetime, lead_h: float = 0.0) -> str | None:
    """Why a launch into ``r`` now would not pay (None: it may be launched into): not started,
    nothing free, or its notice due within ``lead_h`` (a changeover: the job would do no work
    on it before it has to move)."""
    if r.starts_at is not None and now < r.starts_at:
        return f"starts at {r.starts_at.isoformat()}"
    if r.free <= 0:
        return f"none of its {r.total} free"
    if r.ends_at is not None and now >= r.ends_at:
        return "ended"
    due = notice_at(r)
    if due is not None and (due - now).total_seconds() < lead_h * 3600.0:
        return f"its end notice is due at {due.isoformat()}, within a changeover ({lead_h:g} h)"
    return None


def matches(r: Reservation, provider: str, region: str, zone: str, instance_type: str) -> bool:
    """Whether an offer (provider, region, zone, type) is the reservation's capacity: the same
    provider and type, in its zone (a regional reservation or a regional offer: its region)."""
    if r.provider != provider or r.instance_type != instance_type:
        return False
    if r.zone:
        return zone == r.zone or (not zone and region == r.region)
    return region == r.region


def block_tags(r: Reservation | None) -> dict[str, str]:
    """The tags a launch into ``r`` carries (none for capacity that does not end)."""
    if r is None:
        return {}
    due, end = notice_at(r), usable_end(r)
    if due is None or end is None:
        return {}
    return {TAG_BLOCK_NOTICE: str(int(due.timestamp())), TAG_BLOCK_END: str(int(end.timestamp()))}


def _epoch(value: str | None) -> datetime | None:
    if not value or not value.isdigit():
        return None
    return datetime.fromtimestamp(int(value), UTC)


def block_times(tags: Mapping[str, str]) -> tuple[datetime, datetime] | None:
    """(notice, usable end) of the block an instance runs on, from its tags (None: none)."""
    due, end = _epoch(tags.get(TAG_BLOCK_NOTICE)), _epoch(tags.get(TAG_BLOCK_END))
    if due is None or end is None:
        return None
    return due, end


def block_notices(
    instances: Iterable[Instance], known: Sequence[Interruption], now: datetime
) -> list[Interruption]:
    """The interruptions a block's known end makes of the live instances on one: a notice from
    its notice time, a preemption from its usable end (what is still there then is stopped).
    ``known``: what the cloud reported (a notice it served already is not doubled)."""
    out: list[Interruption] = []
    for inst in instances:
        if not inst.state.alive:
            continue
        times = block_times(inst.tags)
        if times is None:
            continue
        due, end = times
        if now < due:
            continue
        raw = f"capacity block ends: usable until {end.isoformat()}"
        kind = "preempted" if now >= end else "notice"
        if any(x.instance_id == inst.id and x.kind == kind for x in known):
            continue
        if kind == "preempted":
            out.append(Interruption(inst.id, inst.provider, inst.zone, kind, end, None, raw))
        else:
            out.append(Interruption(inst.id, inst.provider, inst.zone, kind, due, end, raw))
    return out
