"""The store's queries on the tables beside jobs: attempts, instances, events, cooldowns,
prices, quotas and availability priors."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, case, delete, func, insert, select, update

from provisioner.control.store.engine import as_aware, chunked
from provisioner.control.store.jobs import update_job_rows
from provisioner.control.store.outbox import Notice, OutboxQueries
from provisioner.control.store.schema import (
    AttemptRow,
    CooldownRow,
    EventRow,
    InstanceRow,
    JobRow,
    PriceRow,
    PriorRow,
    QuotaRow,
)
from provisioner.core.quotas import Quota
from provisioner.core.zone_priors import ZonePrior

#: an event row, its columns as parameters (Core: an ORM unit of work cost 3 times the CPU)
_EVENT_INSERT = insert(cast(Table, EventRow.__table__))


def event_doc(
    job_id: str | None, kind: str, message: str, at: datetime, data: dict[str, Any]
) -> dict[str, Any]:
    """An event row's columns (the message redacted of every secret known)."""
    from providers.base import redact

    return {"job_id": job_id, "at": at, "kind": kind, "message": redact(message), "data": data}


#: the raw state of an instance this controller terminated, until the cloud's own final word
#: replaces it (a finished job's instances are not listed again: it may stay)
TERMINATED_RAW = "terminated by provisioner"
#: how :meth:`RecordQueries.end_instances` records capacity the cloud took back (state, raw state)
PREEMPTED_ROW = ("preempted", "reclaimed by the cloud")


class RecordQueries(OutboxQueries):
    # -- attempts -----------------------------------------------------------------------------

    def add_attempt(self, row: AttemptRow) -> None:
        with self.session() as s:
            s.add(row)
            s.execute(
                update(JobRow)
                .where(JobRow.id == row.job_id)
                .values(attempt=row.attempt, updated_at=row.created_at)
            )

    def attempts(self, job_id: str) -> list[AttemptRow]:
        with self.session() as s:
            rows = s.scalars(
                select(AttemptRow).where(AttemptRow.job_id == job_id).order_by(AttemptRow.attempt)
            ).all()
            return [self._fix(r) for r in rows]

    def attempts_for(self, job_ids: Sequence[str]) -> dict[str, list[AttemptRow]]:
        out: dict[str, list[AttemptRow]] = {j: [] for j in job_ids}
        if not job_ids:
            return out
        with self.session() as s:
            for chunk_start in range(0, len(job_ids), 5000):
                chunk = list(job_ids[chunk_start : chunk_start + 5000])
                rows = s.scalars(
                    select(AttemptRow)
                    .where(AttemptRow.job_id.in_(chunk))
                    .order_by(AttemptRow.attempt)
                ).all()
                for r in rows:
                    out[r.job_id].append(self._fix(r))
        return out

    def update_attempt(self, job_id: str, attempt: int, **values: Any) -> None:
        with self.session() as s:
            s.execute(
                update(AttemptRow)
                .where(AttemptRow.job_id == job_id, AttemptRow.attempt == attempt)
                .values(**values)
            )

    # -- instances ----------------------------------------------------------------------------

    def _insert(self) -> Any:
        if self.is_postgres:
            from sqlalchemy.dialects.postgresql import insert
        else:
            from sqlalchemy.dialects.sqlite import insert  # type: ignore[assignment]
        return insert(cast(Table, InstanceRow.__table__))

    def upsert_instance(self, row: InstanceRow) -> None:
        self.upsert_instances([row])

    def upsert_instances(self, rows: Sequence[InstanceRow]) -> None:
        """Insert or update many instance rows (see :meth:`upsert_instance_docs`)."""
        if not rows:
            return
        cols = [c.name for c in InstanceRow.__table__.columns]
        with self.session() as s:
            self.upsert_instance_docs(
                s.connection(), [{c: getattr(r, c) for c in cols} for r in rows]
            )

    def upsert_instance_docs(self, conn: Any, docs: Sequence[dict[str, Any]]) -> None:
        """Insert or update many instance rows (``docs``: every column of each, as
        :func:`provisioner.control.records.instance_doc` makes them) on ``conn``, in its
        transaction: one upsert statement, compiled once and run with the rows as its
        parameter sets (the driver's executemany; SQLAlchemy batches it into multi-row
        statements where the dialect can). A statement with the rows written into it as
        VALUES was compiled again for every chunk: half the CPU of a cold pass over 10,000
        jobs.

        An ended row stays ended, whatever order the writes come in (a pass's batch is
        written at its end, after the terminations it made; another daemon's batch may come
        later still): its end time is the first one recorded; a row that says the instance is
        alive does not change its state or raw state (only the cloud's own word that it
        ended does); the reason it ended is kept."""
        if not docs:
            return
        stmt = self._insert()
        table = stmt.table
        cols = [c.name for c in table.columns]
        keys = ("provider", "instance_id")
        new, old = stmt.excluded, table.c
        ended = old.ended_at.is_not(None)
        kept = ended & new.ended_at.is_(None)  # ended here, alive in this row: not so
        set_ = {c: new[c] for c in cols if c not in keys}
        set_.update(
            ended_at=func.coalesce(old.ended_at, new.ended_at),
            state=case((kept, old.state), else_=new.state),
            raw_state=case((kept, old.raw_state), else_=new.raw_state),
            state_reason=case((ended & (old.state_reason != ""), old.state_reason),
                              else_=new.state_reason),
            job_id=func.coalesce(new.job_id, old.job_id),
            attempt=func.coalesce(new.attempt, old.attempt),
            launched_at=func.coalesce(new.launched_at, old.launched_at),
        )  # fmt: skip
        stmt = stmt.on_conflict_do_update(index_elements=list(keys), set_=set_)
        for chunk in chunked(docs, 1000):
            conn.execute(stmt, chunk)

    def write_pass(
        self,
        instances: Sequence[dict[str, Any]],
        jobs: dict[str, dict[str, Any]],
        events: Sequence[dict[str, Any]],
    ) -> None:
        """What a pass queued, in one transaction: its events (:func:`event_doc`), instance
        rows (:meth:`upsert_instance_docs`) and job columns (``{job id: columns}``). A job's
        queued progress and the event that tells of it commit together, or neither does."""
        if not (instances or jobs or events):
            return
        with self.session() as s:
            conn = s.connection()
            self.insert_events(conn, events)
            self.upsert_instance_docs(conn, instances)
            update_job_rows(conn, [{"id": jid, **cols} for jid, cols in jobs.items()])

    def end_instances(
        self,
        provider: str,
        instance_ids: Sequence[str],
        at: datetime,
        reason: str,
        job_id: str | None = None,
        state: tuple[str, str] = ("terminated", TERMINATED_RAW),
    ) -> None:
        """Record instances this controller terminated as ended ``at`` (the cloud stops
        listing them soon, and a job that ended is not looked at again to see it), with
        :data:`TERMINATED_RAW` as their raw state until the cloud says otherwise (``state``:
        the state and raw state to record; :data:`PREEMPTED_ROW` for capacity taken back). An instance
        already ended keeps its end; one without a row yet (terminated in the pass that first
        saw it) gets one now, which the pass's own row for it then fills in and never
        brings back to life (:meth:`upsert_instances`)."""
        if not instance_ids:
            return
        stmt = self._insert()
        old = stmt.table.c
        ends = {
            "state": state[0],
            "raw_state": state[1],
            "state_reason": reason[:500],
            "ended_at": at,
        }
        stmt = stmt.on_conflict_do_update(
            index_elements=["provider", "instance_id"], set_=ends, where=old.ended_at.is_(None)
        )
        docs = [
            dict(
                provider=provider, instance_id=iid, job_id=job_id, attempt=None, region="",
                zone="", instance_type="", market="", price_per_hour=None, launched_at=None,
                last_seen_at=None, **ends,
            )
            for iid in dict.fromkeys(instance_ids)
        ]  # fmt: skip
        with self.session() as s:
            s.connection().execute(stmt, docs)

    def instances(self, job_id: str | None = None) -> list[InstanceRow]:
        with self.session() as s:
            q = select(InstanceRow)
            if job_id is not None:
                q = q.where(InstanceRow.job_id == job_id)
            return [self._fix(r) for r in s.scalars(q).all()]

    # -- events -------------------------------------------------------------------------------

    def add_event(
        self,
        job_id: str | None,
        kind: str,
        message: str,
        *,
        at: datetime,
        notify: Notice | None = None,
        **data: Any,
    ) -> None:
        """An event at ``at`` (the caller's clock: the store never reads one); with
        ``notify``, its outbox rows in the same transaction, created and due at ``at``
        (delivered by the daemon once this commits: an event is never told before it is
        recorded, and a recorded one is never lost to a crash)."""
        with self.session() as s:
            conn = s.connection()
            done = conn.execute(_EVENT_INSERT, event_doc(job_id, kind, message, at, data))
            if notify is not None and notify.targets:  # the event's id, for the outbox rows
                key = done.inserted_primary_key
                self.enqueue(s, None if key is None else int(key[0]), job_id, notify, at)

    def add_events(self, docs: Sequence[dict[str, Any]]) -> None:
        """Many events (``docs`` from :func:`event_doc`), in their order, in one transaction
        (see :meth:`insert_events`)."""
        if docs:
            with self.session() as s:
                self.insert_events(s.connection(), docs)

    @staticmethod
    def insert_events(conn: Any, docs: Sequence[dict[str, Any]]) -> None:
        """Many events (``docs`` from :func:`event_doc`) on ``conn``, in its transaction, in
        their order (one statement, the driver's executemany). None has notifications."""
        if docs:
            conn.execute(_EVENT_INSERT, list(docs))

    def has_event(self, job_id: str, kind: str, mentioning: str) -> bool:
        """Whether the job has an event of ``kind`` whose message mentions ``mentioning``."""
        with self.session() as s:
            q = (
                select(EventRow.id)
                .where(EventRow.job_id == job_id, EventRow.kind == kind)
                .where(EventRow.message.contains(mentioning, autoescape=True))
                .limit(1)
            )
            return s.scalar(q) is not None

    def events(
        self, job_id: str | None = None, after_id: int = 0, limit: int | None = None
    ) -> list[EventRow]:
        with self.session() as s:
            q = select(EventRow).where(EventRow.id > after_id).order_by(EventRow.id)
            if job_id is not None:
                q = q.where(EventRow.job_id == job_id)
            if limit:
                q = q.limit(limit)
            return [self._fix(r) for r in s.scalars(q).all()]

    def events_of_kinds(
        self, job_ids: Sequence[str], kinds: Sequence[str]
    ) -> dict[str, list[EventRow]]:
        """The events of these kinds of many jobs, in order, in a few queries."""
        out: dict[str, list[EventRow]] = {j: [] for j in job_ids}
        with self.session() as s:
            for chunk in chunked(list(job_ids), 1000):
                q = (
                    select(EventRow)
                    .where(EventRow.job_id.in_(chunk), EventRow.kind.in_(list(kinds)))
                    .order_by(EventRow.id)
                )
                for e in s.scalars(q):
                    out[e.job_id or ""].append(self._fix(e))
        return out

    # -- cooldowns ----------------------------------------------------------------------------

    def cool_down(
        self, job_id: str, provider: str, location: str, until: datetime, reason: str
    ) -> None:
        with self.session() as s:
            s.merge(
                CooldownRow(
                    job_id=job_id, provider=provider, location=location, until=until, reason=reason
                )
            )

    def cooldowns_for(
        self, job_ids: Sequence[str], now: datetime
    ) -> dict[str, dict[tuple[str, str], datetime]]:
        """Current cooldowns of many jobs (expired ones are deleted), in two statements."""
        out: dict[str, dict[tuple[str, str], datetime]] = {j: {} for j in job_ids}
        with self.session() as s:
            s.execute(delete(CooldownRow).where(CooldownRow.until <= now))  # over at its end
            # the table holds only cooldowns in force: reading it whole beats a long IN list
            for r in s.scalars(select(CooldownRow)):
                if r.job_id in out:
                    out[r.job_id][(r.provider, r.location)] = as_aware(r.until) or r.until
        return out

    def cooldowns(self, job_id: str, now: datetime) -> dict[tuple[str, str], datetime]:
        with self.session() as s:
            s.execute(delete(CooldownRow).where(CooldownRow.until <= now))  # over at its end
            rows = s.scalars(select(CooldownRow).where(CooldownRow.job_id == job_id)).all()
            return {(r.provider, r.location): as_aware(r.until) or r.until for r in rows}

    # -- prices ---------------------------------------------------------------------------------

    def save_prices(self, quotes: Iterable[Any]) -> int:
        n = 0
        with self.session() as s:
            for q in quotes:
                s.merge(
                    PriceRow(
                        provider=q.provider,
                        region=q.region,
                        zone=q.zone or "",
                        instance_type=q.instance_type,
                        spot_price=q.spot_price,
                        on_demand_price=q.on_demand_price,
                        at=q.at,
                        changed_at=getattr(q, "changed_at", None),
                    )
                )
                n += 1
        return n

    def prices_mark(self) -> tuple[int, Any]:
        """A cheap mark that moves when the stored prices change (rows, newest quote time):
        the reconciler re-reads the prices only then."""
        with self.session() as s:
            n, newest = s.execute(select(func.count(), func.max(PriceRow.at))).one()
            return int(n or 0), newest

    # -- quotas ---------------------------------------------------------------------------------

    def save_quotas(self, quotas: Iterable[Quota], *, replace: str | None = None) -> int:
        """Store quotas as read (one row per provider, region, zone and name). ``replace``: a
        provider whose every stored quota is replaced by these (a full refresh)."""
        n = 0
        with self.session() as s:
            if replace is not None:
                s.execute(delete(QuotaRow).where(QuotaRow.provider == replace))
            for q in quotas:
                s.merge(
                    QuotaRow(
                        provider=q.provider,
                        region=q.region,
                        zone=q.zone,
                        name=q.name,
                        note=q.note,
                        unit=q.unit,
                        quota_limit=q.limit,
                        used=q.used,
                        market=q.market,
                        families=list(q.families),
                        source=q.source,
                        at=q.at,
                    )
                )
                n += 1
        return n

    def quotas(self, provider: str | None = None) -> list[Quota]:
        with self.session() as s:
            q = select(QuotaRow)
            if provider:
                q = q.where(QuotaRow.provider == provider)
            rows = s.scalars(q.order_by(QuotaRow.provider, QuotaRow.region, QuotaRow.name))
            return [
                Quota(
                    provider=r.provider,
                    region=r.region,
                    zone=r.zone,
                    name=r.name,
                    note=r.note,
                    unit=r.unit,
                    limit=r.quota_limit,
                    used=r.used,
                    market=r.market,
                    families=tuple(r.families or ()),
                    at=as_aware(r.at),
                    source=r.source or "",
                )
                for r in rows.all()
            ]

    # -- availability priors --------------------------------------------------------------------

    def save_priors(self, priors: Iterable[ZonePrior], *, replace: str | None = None) -> int:
        """Store availability priors as read (one row per provider, region, zone, type and
        kind). ``replace``: a provider whose every stored prior is replaced (a full refresh)."""
        n = 0
        with self.session() as s:
            if replace is not None:
                s.execute(delete(PriorRow).where(PriorRow.provider == replace))
            for p in priors:
                s.merge(
                    PriorRow(
                        provider=p.provider,
                        region=p.region,
                        zone=p.zone,
                        instance_type=p.instance_type,
                        kind=p.kind,
                        value=p.value,
                        label=p.label,
                        at=p.at,
                    )
                )
                n += 1
        return n

    def priors(self, provider: str | None = None) -> list[ZonePrior]:
        with self.session() as s:
            q = select(PriorRow)
            if provider:
                q = q.where(PriorRow.provider == provider)
            order = (PriorRow.provider, PriorRow.region, PriorRow.zone, PriorRow.instance_type)
            return [
                ZonePrior(
                    provider=r.provider,
                    region=r.region,
                    zone=r.zone,
                    instance_type=r.instance_type,
                    kind=r.kind,
                    value=r.value,
                    label=r.label,
                    at=as_aware(r.at),
                )
                for r in s.scalars(q.order_by(*order, PriorRow.kind)).all()
            ]

    def prices(self, provider: str | None = None) -> list[PriceRow]:
        with self.session() as s:
            q = select(PriceRow)
            if provider:
                q = q.where(PriceRow.provider == provider)
            return [self._fix(r) for r in s.scalars(q).all()]
