"""The savings ledger: for each attempt and job, what was billed, what the same run would have
cost on on-demand, what was saved, and what interruptions cost (docs/money.md, "The ledger").

For attempt *a* with run ``[s, e)`` (launch to end, or to now while it runs), ``n`` nodes and
price ``p`` per node-hour (``r = p·n`` an hour):

* ``billed``: the attempt's bill, the one ``provisioner cost`` reports (``attempts.cost_usd``
  once it ended; :func:`~provisioner.control.records.attempt_cost` to now while it runs);
* ``on_demand``: the same run billed by the same cloud rule at the plan's on-demand price of
  the same type in the same zone (kept on the row at launch; rows from before it was kept
  take the catalog's, or the stored live quote's, for the type and region), times ``n``;
* ``cheapest_on_demand``: the same run at the cheapest on-demand placement the policy
  allowed at launch (kept on the row), times ``n``;
* ``saved = on_demand − billed``, ``saved % = 100 · saved / on_demand``;
* its run is cut into consecutive parts, each priced at ``r`` (no rounding):
  ``changeover`` = ``[s, f)``, ``f`` the first report that the job runs (its
  ``first-progress`` event; no such report: the whole run);
  ``overlap`` = ``[max(t, f), e)``, ``t`` the launch of a later attempt of the job while this
  one ran (the instance kept under a notice beside its replacement);
  ``lost work`` = ``[max(k, f), min(e, t))`` for an attempt the job moved on from, ``k`` the
  time of the checkpoint the next attempt resumed from (the checkpoint event of that name;
  else this attempt's last checkpoint; else nothing was kept: ``k = f``);
  ``useful = billed − changeover − overlap − lost`` (the billing rule's rounding is in it).

An attempt on held capacity (market ``reserved``: a reservation or capacity block the team
pays for whether used or not) is billed at its marginal price, zero: its ``billed`` is 0 and
what the job's budget counts is 0. What the reservation costs the team over the same run is
shown beside it as ``held`` (its ``held_usd_per_hour`` kept on the row, times the run, by the
same billing rule), so ``saved`` against on-demand is the whole on-demand figure and ``held``
says what the capacity cost anyway.

A job's figures are the sums of its attempts'. Nothing is rounded here; what shows a figure
rounds it. With a window ``[since, until)``, billed and the references are split by run time
as ``cost`` splits them (:func:`provisioner.core.spend.split`) and the parts are clipped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from provisioner.control.records import attempt_billing_cloud, billed_cost
from provisioner.control.store import AttemptRow, EventRow
from provisioner.core.spend import clip, split
from provisioner.core.timefmt import utc

Interval = tuple[datetime, datetime]
#: the event kinds the ledger reads
KINDS = ("checkpoint", "first-progress")
#: (provider, region, instance type) -> on-demand USD per instance-hour, or None
Lookup = Callable[[str, str, str], float | None]


@dataclass
class AttemptLedger:
    job_id: str
    attempt: int
    provider: str
    zone: str
    instance_type: str
    market: str
    nodes: int
    start: datetime | None
    end: datetime | None
    billed_usd: float
    on_demand_price: float | None = None  # per node-hour
    on_demand_source: str = ""  # "launch" (kept on the row), "catalog", or "" (none)
    on_demand_usd: float | None = None
    cheapest_offer: str | None = None
    cheapest_price: float | None = None
    cheapest_usd: float | None = None
    changeover_h: float = 0.0
    lost_work_h: float = 0.0
    overlap_h: float = 0.0
    changeover_usd: float = 0.0
    lost_work_usd: float = 0.0
    overlap_usd: float = 0.0
    #: held capacity: which reservation, and what it cost the team over this run (its rate,
    #: paid whether used or not; never in ``billed``); None elsewhere or where unknown
    reservation_id: str | None = None
    held_usd: float | None = None

    @property
    def saved_usd(self) -> float | None:
        return None if self.on_demand_usd is None else self.on_demand_usd - self.billed_usd

    @property
    def saved_pct(self) -> float | None:
        od = self.on_demand_usd
        return None if not od else 100.0 * (od - self.billed_usd) / od

    @property
    def useful_usd(self) -> float:
        return self.billed_usd - self.changeover_usd - self.lost_work_usd - self.overlap_usd


@dataclass
class Totals:
    """Sums over attempts (``saved`` over those with an on-demand reference only)."""

    billed_usd: float = 0.0
    on_demand_usd: float = 0.0
    priced_billed_usd: float = 0.0  # billed of the attempts with an on-demand reference
    cheapest_usd: float = 0.0
    cheapest_billed_usd: float = 0.0
    changeover_usd: float = 0.0
    lost_work_usd: float = 0.0
    overlap_usd: float = 0.0
    changeover_h: float = 0.0
    lost_work_h: float = 0.0
    overlap_h: float = 0.0
    held_usd: float = 0.0  # what held capacity the attempts ran on cost the team anyway
    attempts: int = 0
    priced: int = 0  # attempts with an on-demand reference
    unpriced: int = 0  # attempts with billed time and no on-demand reference

    def add(self, a: AttemptLedger | Totals) -> None:
        if isinstance(a, Totals):
            for k, v in vars(a).items():
                setattr(self, k, getattr(self, k) + v)
            return
        self.attempts += 1
        self.billed_usd += a.billed_usd
        self.held_usd += a.held_usd or 0.0
        if a.on_demand_usd is not None:
            self.on_demand_usd += a.on_demand_usd
            self.priced_billed_usd += a.billed_usd
            self.priced += 1
        elif a.billed_usd > 0:
            self.unpriced += 1
        if a.cheapest_usd is not None:
            self.cheapest_usd += a.cheapest_usd
            self.cheapest_billed_usd += a.billed_usd
        for k in ("changeover", "lost_work", "overlap"):
            for unit in ("usd", "h"):
                name = f"{k}_{unit}"
                setattr(self, name, getattr(self, name) + getattr(a, name))

    @property
    def saved_usd(self) -> float:
        return self.on_demand_usd - self.priced_billed_usd

    @property
    def saved_pct(self) -> float | None:
        return None if not self.on_demand_usd else 100.0 * self.saved_usd / self.on_demand_usd

    @property
    def useful_usd(self) -> float:
        return self.billed_usd - self.changeover_usd - self.lost_work_usd - self.overlap_usd

    def as_dict(self, digits: int | None = 6) -> dict[str, Any]:
        """The figures (rounded to ``digits``; ``None``: as computed)."""

        def r(v: float | None) -> float | None:
            return v if v is None or digits is None else round(v, digits)

        return {
            "billed_usd": r(self.billed_usd),
            "on_demand_usd": r(self.on_demand_usd) if self.priced else None,
            "saved_usd": r(self.saved_usd) if self.priced else None,
            "saved_pct": r(self.saved_pct) if digits is None else _pct(self.saved_pct),
            "cheapest_on_demand_usd": r(self.cheapest_usd) if self.cheapest_billed_usd else None,
            "lost_work_h": r(self.lost_work_h),
            "lost_work_usd": r(self.lost_work_usd),
            "overlap_h": r(self.overlap_h),
            "overlap_usd": r(self.overlap_usd),
            "changeover_h": r(self.changeover_h),
            "changeover_usd": r(self.changeover_usd),
            "useful_usd": r(self.useful_usd),
            "held_usd": r(self.held_usd),
            "attempts": self.attempts,
            "attempts_without_on_demand_price": self.unpriced,
        }


def _pct(v: float | None) -> float | None:
    return None if v is None else round(v, 2)


def attempt_doc(a: AttemptLedger, digits: int | None = 6) -> dict[str, Any]:
    """One attempt's figures (rounded to ``digits``; ``None``: as computed)."""

    def r(v: float | None) -> float | None:
        return v if v is None or digits is None else round(v, digits)

    return {
        "job_id": a.job_id,
        "attempt": a.attempt,
        "market": a.market,
        "billed_usd": r(a.billed_usd),
        "on_demand_price_per_hour": a.on_demand_price,
        "on_demand_price_from": a.on_demand_source or None,
        "on_demand_usd": r(a.on_demand_usd),
        "saved_usd": r(a.saved_usd),
        "saved_pct": r(a.saved_pct) if digits is None else _pct(a.saved_pct),
        "cheapest_on_demand_offer": a.cheapest_offer,
        "cheapest_on_demand_per_hour": a.cheapest_price,
        "cheapest_on_demand_usd": r(a.cheapest_usd),
        "lost_work_h": r(a.lost_work_h),
        "lost_work_usd": r(a.lost_work_usd),
        "overlap_h": r(a.overlap_h),
        "overlap_usd": r(a.overlap_usd),
        "changeover_h": r(a.changeover_h),
        "changeover_usd": r(a.changeover_usd),
        "useful_usd": r(a.useful_usd),
        "reservation_id": a.reservation_id,
        "held_usd": r(a.held_usd),
    }


def _clip(iv: Interval | None, since: datetime | None, until: datetime | None) -> float:
    """Hours of ``iv`` inside ``[since, until)``."""
    if iv is None:
        return 0.0
    a, b = iv
    if since is not None:
        a = max(a, since)
    if until is not None:
        b = min(b, until)
    return max(0.0, (b - a).total_seconds() / 3600.0)


def _in_window(
    total: float, start: datetime, end: datetime, since: datetime | None, until: datetime | None
) -> float:
    """The part of ``total`` (billed for ``[start, end)``) inside the window, split as ``cost``
    splits billed cost."""
    if since is None and until is None:
        return total
    cuts = [t for t in (since, until) if t is not None]
    return sum(p.cost_usd for p in clip(split(total, start, end, cuts), since, until))


@dataclass
class JobEvents:
    """What the ledger reads of one job's events."""

    first_progress: dict[int, datetime] = field(default_factory=dict)  # attempt -> earliest
    resumed_from: dict[int, str] = field(default_factory=dict)  # attempt -> checkpoint name
    checkpoint_at: dict[str, datetime] = field(default_factory=dict)  # name -> earliest time
    checkpoints: list[tuple[int | None, datetime]] = field(default_factory=list)

    @classmethod
    def of(cls, events: Iterable[EventRow]) -> JobEvents:
        out = cls()
        for e in events:
            data, at = e.data or {}, utc(e.at)
            if at is None:
                continue
            n = data.get("attempt")
            if e.kind == "first-progress" and isinstance(n, int):
                if n not in out.first_progress or at < out.first_progress[n]:
                    out.first_progress[n] = at
                if data.get("resumed_from"):
                    out.resumed_from.setdefault(n, str(data["resumed_from"]))
            elif e.kind == "checkpoint":
                name = str(data.get("checkpoint") or "")
                if name and (name not in out.checkpoint_at or at < out.checkpoint_at[name]):
                    out.checkpoint_at[name] = at
                out.checkpoints.append((n if isinstance(n, int) else None, at))
        return out


def job_ledger(
    attempts: Sequence[AttemptRow],
    events: JobEvents,
    now: datetime,
    *,
    lookup: Lookup | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> list[AttemptLedger]:
    """The ledger of one job's attempts (in attempt order)."""
    ran = [a for a in attempts if a.launched_at is not None]
    out = []
    for a in attempts:
        out.append(_attempt(a, ran, events, now, lookup, since, until))
    return out


def _attempt(
    a: AttemptRow,
    ran: Sequence[AttemptRow],
    ev: JobEvents,
    now: datetime,
    lookup: Lookup | None,
    since: datetime | None,
    until: datetime | None,
) -> AttemptLedger:
    nodes = a.nodes or 1
    start = utc(a.launched_at)
    led = AttemptLedger(
        a.job_id, a.attempt, a.provider, a.zone or a.region, a.instance_type, a.market, nodes,
        start, None, 0.0,
    )  # fmt: skip
    od = a.on_demand_price_per_hour
    led.on_demand_source = "launch" if od is not None else ""
    if od is None and a.market == "on-demand":
        od, led.on_demand_source = a.price_per_hour, "launch"
    if od is None and lookup is not None:
        od = lookup(a.provider, a.region, a.instance_type)
        led.on_demand_source = "catalog" if od is not None else ""
    led.on_demand_price = od
    led.cheapest_offer, led.cheapest_price = (
        a.cheapest_on_demand_offer,
        a.cheapest_on_demand_per_hour,
    )
    if start is None:
        led.billed_usd = a.cost_usd  # never started: nothing billed
        led.on_demand_usd = 0.0 if od is not None else None
        led.cheapest_usd = 0.0 if led.cheapest_price is not None else None
        return led
    end = utc(a.ended_at) or now
    led.end = end
    # as records.attempt_cost bills it (the same function), with the times made aware
    cloud = attempt_billing_cloud(a)
    billed = (
        a.cost_usd
        if a.ended_at is not None
        else billed_cost(cloud, a.price_per_hour, start, now) * nodes
    )
    led.billed_usd = _in_window(billed, start, end, since, until)
    if od is not None:
        led.on_demand_usd = _in_window(
            billed_cost(cloud, od, start, end) * nodes, start, end, since, until
        )
    led.reservation_id = getattr(a, "reservation_id", None)
    held = getattr(a, "held_usd_per_hour", None)
    if a.market == "reserved" and held is not None:
        led.held_usd = _in_window(
            billed_cost(cloud, held, start, end) * nodes, start, end, since, until
        )
    if led.cheapest_price is not None:
        where = (led.cheapest_offer or a.provider).split(":", 1)[0]
        led.cheapest_usd = _in_window(
            billed_cost(where, led.cheapest_price, start, end) * nodes, start, end, since, until
        )
    # the parts of the run: changeover, then useful, lost work, overlap
    first = ev.first_progress.get(a.attempt)
    f = min(max(first, start), end) if first is not None else end
    later = [b for b in ran if b.attempt > a.attempt]
    t = min((utc(b.launched_at) or end for b in later), default=None)
    t = t if t is not None and t < end else None
    overlap = (max(t, f), end) if t is not None and max(t, f) < end else None
    lost = None
    if later and a.ended_at is not None and first is not None:
        k = _kept_until(a, later[0], ev, f, end)
        lo, hi = max(k, f), min(end, t or end)
        lost = (lo, hi) if lo < hi else None
    rate = a.price_per_hour * nodes
    led.changeover_h = _clip((start, f), since, until)
    led.overlap_h = _clip(overlap, since, until)
    led.lost_work_h = _clip(lost, since, until)
    led.changeover_usd = led.changeover_h * rate
    led.overlap_usd = led.overlap_h * rate
    led.lost_work_usd = led.lost_work_h * rate
    return led


def _kept_until(
    a: AttemptRow, nxt: AttemptRow, ev: JobEvents, f: datetime, end: datetime
) -> datetime:
    """When the work the next attempt resumed from was saved (see the module's docstring)."""
    name = ev.resumed_from.get(nxt.attempt)
    if name and name in ev.checkpoint_at:
        return ev.checkpoint_at[name]
    own = [at for n, at in ev.checkpoints if n == a.attempt and at <= end]
    return max(own) if own else f


def totals(ledgers: Iterable[AttemptLedger]) -> Totals:
    out = Totals()
    for a in ledgers:
        out.add(a)
    return out


# -- from the store --------------------------------------------------------------------------


def catalog_lookup(store: Any) -> Lookup:
    """On-demand prices for attempts that kept none (launched before the ledger): the newest
    stored live quote for the type and region, else the built-in catalog's (the cheapest zone
    of the region). Read once, on first use."""
    table: dict[tuple[str, str, str], float] = {}
    loaded = [False]

    def load() -> None:
        from provisioner.catalog_files import builtin_catalog

        for o in builtin_catalog().offers:
            if o.price is not None:
                key = (o.provider, o.region, o.instance_type)
                table[key] = min(table.get(key, o.price), o.price)
        for q in store.prices():
            if q.on_demand_price is not None:
                table[(q.provider, q.region, q.instance_type)] = q.on_demand_price
        loaded[0] = True

    def lookup(provider: str, region: str, instance_type: str) -> float | None:
        if not loaded[0]:
            load()
        return table.get((provider, region, instance_type))

    return lookup


def store_ledgers(
    store: Any,
    job_ids: Sequence[str],
    now: datetime,
    since: datetime | None = None,
    until: datetime | None = None,
) -> dict[str, list[AttemptLedger]]:
    """Every job's attempt ledgers, read in a few queries."""
    attempts = store.attempts_for(list(job_ids))
    events = store.events_of_kinds(list(job_ids), KINDS)
    lookup = catalog_lookup(store)
    return {
        j: job_ledger(
            attempts.get(j, []),
            JobEvents.of(events.get(j, [])),
            now,
            lookup=lookup,
            since=since,
            until=until,
        )
        for j in job_ids
    }


def store_savings(store: Any, now: datetime) -> Totals:
    """Billed against the on-demand reference over every attempt in the store (the jobs
    page's "saved ... vs on-demand"): the attempts' columns only, no events."""
    from sqlalchemy import select

    A = AttemptRow
    cols = (
        A.job_id, A.attempt, A.provider, A.region, A.zone, A.instance_type, A.market,
        A.price_per_hour, A.on_demand_price_per_hour, A.cheapest_on_demand_per_hour,
        A.cheapest_on_demand_offer, A.launched_at, A.ended_at, A.nodes, A.cost_usd,
        A.reservation_id, A.held_usd_per_hour,
    )  # fmt: skip
    out, lookup, none = Totals(), catalog_lookup(store), JobEvents()
    with store.session() as s:
        rows = s.execute(select(*cols).where(A.launched_at.is_not(None))).all()
    for r in rows:
        out.add(_attempt(r, [], none, now, lookup, None, None))
    return out
