"""The snapshot the invariants read: a store's rows of some jobs (attempts, instance rows,
events, the notification outbox), what the clouds list under our tag, and what the caller adds
(the results an uninterrupted run gives, each job's catalog for the plan/daemon check); read in
one transaction, the events incrementally where a feed is given."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import SimpleNamespace
from typing import Any

from providers.base import Provider
from provisioner.control.store import AttemptRow, EventRow, InstanceRow, JobRow, Store
from provisioner.control.store.schema import NotificationRow
from provisioner.core.catalog import Catalog
from provisioner.core.models import TAG_MANAGED, Instance


@dataclass(frozen=True)
class Snapshot:
    """What the checks read, taken at ``now`` (rows as the store holds them)."""

    now: datetime
    jobs: tuple[JobRow, ...]
    attempts: Mapping[str, tuple[AttemptRow, ...]]
    instances: tuple[InstanceRow, ...]  # the store's rows of these jobs' instances
    events: Mapping[str, tuple[EventRow, ...]] = field(default_factory=dict)
    notifications: tuple[NotificationRow, ...] = ()
    #: what the clouds list under our tag (every job's); None: not looked at
    cloud: tuple[Instance, ...] | None = None
    #: job id -> the result an uninterrupted run gives (a deterministic job's); where known
    expected_results: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: job id -> the offers it can be placed on (the daemon's catalog for it): where given,
    #: plan and the daemon are checked to agree on them
    catalogs: Mapping[str, Catalog] = field(default_factory=dict)
    #: the daemon's pass interval (what decide() is told of the next pass)
    interval_s: float = 5.0
    #: live spot instances launched with no bid (``bid_cap.enforce: daemon``) whose price at
    #: the cloud is above their attempt's cap: instance id -> since when (kept by the caller
    #: across snapshots: :class:`OverCapWatch`); empty: not looked at
    over_cap_since: Mapping[str, datetime] = field(default_factory=dict)

    def job(self, job_id: str) -> JobRow | None:
        return next((j for j in self.jobs if j.id == job_id), None)


class EventFeed:
    """The events a run of snapshots has read so far, by job: each :func:`snapshot` given
    one reads only the events added since the last (events are never changed or deleted, and
    a SQLite store gives ids in commit order). For a caller that takes a snapshot after every
    pass (the seeded run): the events query stops growing with the run."""

    def __init__(self, job_id: str | None = None) -> None:
        self.job_id = job_id  # only this job's events (None: every job's)
        self.after = 0
        self.by_job: dict[str | None, list[EventRow]] = {}

    def read(self, store: Store, s: Any) -> None:
        from sqlalchemy import select

        q = select(EventRow).where(EventRow.id > self.after).order_by(EventRow.id)
        if self.job_id is not None:
            q = q.where(EventRow.job_id == self.job_id)
        for e in s.scalars(q).all():
            self.by_job.setdefault(e.job_id, []).append(store._fix(e))
            self.after = e.id


def snapshot(
    store: Store,
    providers: Iterable[Provider] = (),
    now: datetime | None = None,
    *,
    job_ids: Sequence[str] | None = None,
    cheap: bool = False,
    expected_results: Mapping[str, Mapping[str, Any]] | None = None,
    feed: EventFeed | None = None,
    catalogs: Mapping[str, Catalog] | None = None,
    interval_s: float = 5.0,
    over_cap_since: Mapping[str, datetime] | None = None,
) -> Snapshot:
    """The store's rows of ``job_ids`` (None: every job) and the clouds' instances under our
    tag (each provider listed once; none given: not looked at). ``cheap``: the rows the cheap
    checks read only (no events, no outbox). ``feed``: the events read by earlier snapshots
    (only newer ones are read); ``catalogs``: each job's offers, for the plan/daemon check.
    The store's rows are read in one transaction."""
    from sqlalchemy import select

    from provisioner.core.timefmt import utc

    when = now if now is not None else _utcnow()
    events: dict[str, tuple[EventRow, ...]] = {}
    notes: tuple[NotificationRow, ...] = ()
    with store.session() as s:

        def load(q: Any) -> list[Any]:
            """The rows of an ORM query: plain rows for the cheap checks (see _plain)."""
            if cheap:
                return _plain(s, q)
            return [store._fix(r) for r in s.scalars(q).all()]

        if job_ids is None:
            jobs = tuple(load(select(JobRow).order_by(JobRow.submitted_at.desc())))
        else:
            by_id = {r.id: r for part in _parts(job_ids) for r in load(_where(JobRow, part))}
            jobs = tuple(by_id[j] for j in dict.fromkeys(job_ids) if j in by_id)
        ids = [j.id for j in jobs]
        wanted = set(ids)
        attempts: dict[str, list[AttemptRow]] = {jid: [] for jid in ids}
        every_job = job_ids is None
        for part in [None] if every_job else _parts(ids):
            for a in load(_where(AttemptRow, part).order_by(AttemptRow.attempt)):
                if a.job_id in attempts:
                    attempts[a.job_id].append(a)
        rows = tuple(
            r
            for part in ([None] if every_job else _parts(ids))
            for r in load(_where(InstanceRow, part))
        )
        if not cheap:
            if feed is None:
                feed = EventFeed(ids[0] if len(ids) == 1 else None)
            feed.read(store, s)
            events = {jid: tuple(feed.by_job.get(jid, ())) for jid in ids}
            qn = select(NotificationRow).order_by(NotificationRow.id)
            found = [n for n in s.scalars(qn).all() if n.job_id in wanted]
            s.expunge_all()
            notes = tuple(_fix_note(n) for n in found)
    cloud: tuple[Instance, ...] | None = None
    provs = list(providers)
    if provs:
        listed: list[Instance] = []
        for p in provs:
            listed += p.list({TAG_MANAGED: "true"})
        cloud = tuple(listed)
    return Snapshot(
        now=utc(when),
        jobs=jobs,
        attempts={jid: tuple(v) for jid, v in attempts.items()},
        instances=rows,
        events=events,
        notifications=notes,
        cloud=cloud,
        expected_results=dict(expected_results or {}),
        catalogs=dict(catalogs or {}),
        interval_s=interval_s,
        over_cap_since=dict(over_cap_since or {}),
    )


class OverCapWatch:
    """Since when each live spot instance with no bid has paid more than its cap, as seen by
    a caller that reads the cloud's prices every pass (the seeded run reads the sim's)."""

    def __init__(self) -> None:
        self.since: dict[str, datetime] = {}

    def update(self, now: datetime, over: Iterable[str]) -> dict[str, datetime]:
        """``over``: the instances above their cap now; the others are forgotten."""
        ids = set(over)
        self.since = {i: self.since.get(i, now) for i in ids}
        return dict(self.since)


class PlainRow(SimpleNamespace):
    """A row's columns as attributes, its datetimes in UTC (as the store's rows give them),
    without an ORM object's identity map and change tracking: the cheap checks only read
    their rows, and after a pass the daemon reads those of 1,000 jobs or more (an ORM row
    cost twice as much CPU)."""


def _plain(s: Any, q: Any) -> list[Any]:
    """The rows of ORM query ``q`` (one mapped class) as :class:`PlainRow` s."""
    from sqlalchemy import DateTime

    from provisioner.control.store import as_aware

    table = q.column_descriptions[0]["entity"].__table__
    core = q.with_only_columns(*table.columns)
    times = [c.name for c in table.columns if isinstance(c.type, DateTime)]
    out = []
    for r in s.execute(core):
        row = PlainRow(**r._mapping)
        for name in times:
            setattr(row, name, as_aware(getattr(row, name)))
        out.append(row)
    return out


def _parts(ids: Sequence[str], size: int = 1000) -> list[list[str]]:
    return [list(ids[i : i + size]) for i in range(0, len(ids), size)]


def _where(table: Any, ids: list[str] | None) -> Any:
    """``select(table)``, of the rows of these jobs (None: every row)."""
    from sqlalchemy import select

    q = select(table)
    key = table.id if table is JobRow else table.job_id
    return q if ids is None else q.where(key.in_(ids))


def _fix_note(row: NotificationRow) -> NotificationRow:
    from provisioner.control.store.outbox import fix_row

    return fix_row(row)


def _utcnow() -> datetime:
    from datetime import UTC

    return datetime.now(UTC)
