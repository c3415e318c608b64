"""The store: jobs, attempts, instances, events, cooldowns and prices, on SQLAlchemy 2.

SQLite (WAL) in the XDG state directory by default, for one controller; PostgreSQL for several
daemon replicas (``postgresql+psycopg://...``). The schema is created and upgraded by Alembic.
Every write is a short transaction; reads return detached rows (safe to use after the session).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, case, create_engine, delete, event, func, select, update
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.orm.attributes import set_committed_value

from provisioner.control.store.schema import (
    AttemptRow,
    Base,
    CooldownRow,
    EventRow,
    InstanceRow,
    JobRow,
    PriceRow,
    ReplicaRow,
)

__all__ = [
    "ACTIVE_STATES",
    "AttemptRow",
    "EventRow",
    "InstanceRow",
    "JobRow",
    "Store",
    "default_url",
    "state_dir",
]

ACTIVE_STATES = ("pending", "running", "recovering", "waiting")
FINAL_STATES = ("succeeded", "failed", "cancelled", "stopped")


def state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return Path(base) / "provisioner"


def default_url() -> str:
    url = os.environ.get("PROVISIONER_STORE")
    if url:
        return url
    d = state_dir()
    d.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{d / 'provisioner.db'}"


def _aware(dt: datetime | None) -> datetime | None:
    """SQLite hands datetimes back naive; they were stored in UTC."""
    if dt is not None and dt.tzinfo is None:
        return dt.replace(tzinfo=UTC)
    return dt


def new_job_id(name: str) -> str:
    safe = "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")[:32] or "job"
    return f"{safe}-{secrets.token_hex(3)}"


def redacted_url(url: str) -> str:
    """The URL with any password replaced, for messages and logs."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "<store url>"


class Store:
    def __init__(self, url: str | None = None, *, migrate: bool = True) -> None:
        self.url = url or default_url()
        self.engine: Engine = self._engine(self.url)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        if migrate:
            self.migrate()

    @property
    def is_postgres(self) -> bool:
        return self.engine.dialect.name == "postgresql"

    @staticmethod
    def _engine(url: str) -> Engine:
        if url.startswith("sqlite"):
            engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})

            @event.listens_for(engine, "connect")
            def _pragmas(dbapi_conn: Any, _record: Any) -> None:
                cur = dbapi_conn.cursor()
                cur.execute("PRAGMA journal_mode=WAL")
                cur.execute("PRAGMA synchronous=NORMAL")
                cur.execute("PRAGMA foreign_keys=ON")
                cur.execute("PRAGMA busy_timeout=30000")
                cur.close()

            return engine
        if url.startswith("postgresql://"):
            url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
        return create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=5)

    def migrate(self) -> None:
        """Create or upgrade the schema to the newest Alembic revision (safe to run concurrently)."""
        from alembic import command
        from alembic.config import Config

        cfg = Config()
        cfg.set_main_option(
            "script_location", str(Path(__file__).resolve().parents[1] / "migrations")
        )
        with self.engine.begin() as conn:
            if self.is_postgres:
                from sqlalchemy import text

                conn.execute(text("SELECT pg_advisory_xact_lock(727001)"))
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")

    def close(self) -> None:
        self.engine.dispose()

    @contextmanager
    def session(self) -> Iterator[Session]:
        with self._sessions.begin() as s:
            yield s

    # -- jobs -------------------------------------------------------------------------------

    def submit(
        self,
        *,
        name: str,
        policy_yaml: str,
        policy_path: str | None,
        provider: str,
        provider_options: dict[str, Any] | None,
        now: datetime,
        deadline: datetime | None,
        work_total_h: float | None,
        job_id: str | None = None,
        workdir: str | None = None,
    ) -> JobRow:
        job = JobRow(
            id=job_id or new_job_id(name),
            name=name,
            policy_yaml=policy_yaml,
            policy_path=policy_path,
            workdir=workdir,
            provider=provider,
            provider_options=dict(provider_options or {}),
            state="pending",
            submitted_at=now,
            updated_at=now,
            deadline=deadline,
            attempt=0,
            restarts=0,
            spent_usd=0.0,
            work_total_h=work_total_h,
            work_done_h=0.0,
            progress={},
            result={},
            reason="",
            cancel_requested=False,
            owner=None,
            lease_until=None,
            version=0,
        )
        with self.session() as s:
            s.add(job)
            s.add(
                EventRow(
                    job_id=job.id,
                    at=now,
                    kind="submitted",
                    message=f"job {job.id} submitted ({provider})",
                    data={},
                )
            )
        return job

    def job(self, job_id: str) -> JobRow | None:
        """A job by id, or by a unique id prefix or name."""
        with self.session() as s:
            row = s.get(JobRow, job_id)
            if row is None:
                rows = s.scalars(select(JobRow).where(JobRow.id.startswith(job_id))).all()
                if len(rows) != 1:
                    rows = s.scalars(
                        select(JobRow)
                        .where(JobRow.name == job_id)
                        .order_by(JobRow.submitted_at.desc())
                    ).all()[:1]
                row = rows[0] if len(rows) == 1 else None
            return self._fix(row)

    def jobs(self, states: Sequence[str] | None = None, limit: int | None = None) -> list[JobRow]:
        with self.session() as s:
            q = select(JobRow).order_by(JobRow.submitted_at.desc())
            if states:
                q = q.where(JobRow.state.in_(states))
            if limit:
                q = q.limit(limit)
            return [self._fix(r) for r in s.scalars(q).all()]

    def jobs_by_id(
        self, job_ids: Sequence[str], states: Sequence[str] | None = None
    ) -> list[JobRow]:
        """The jobs with these ids (in the order given; missing ones left out)."""
        found: dict[str, JobRow] = {}
        with self.session() as s:
            for chunk in _chunks(list(job_ids)):
                q = select(JobRow).where(JobRow.id.in_(chunk))
                if states:
                    q = q.where(JobRow.state.in_(states))
                for r in s.scalars(q).all():
                    found[r.id] = self._fix(r)
        return [found[j] for j in job_ids if j in found]

    def job_states(self, job_ids: Sequence[str]) -> dict[str, str]:
        """``{id: state}`` for those of ``job_ids`` that exist (exact ids)."""
        out: dict[str, str] = {}
        with self.session() as s:
            for chunk in _chunks(list(dict.fromkeys(job_ids))):
                for jid, state in s.execute(
                    select(JobRow.id, JobRow.state).where(JobRow.id.in_(chunk))
                ):
                    out[jid] = state
        return out

    def update_jobs(self, values: Sequence[dict[str, Any]]) -> None:
        """Several jobs' columns in one transaction (``values``: dicts with the job ``id``)."""
        if not values:
            return
        with self.session() as s:
            s.execute(update(JobRow), list(values))

    @staticmethod
    def _fix(row: Any) -> Any:
        if row is None:
            return None
        for attr in (
            "submitted_at",
            "updated_at",
            "deadline",
            "lease_until",
            "created_at",
            "launched_at",
            "ended_at",
            "last_seen_at",
            "at",
            "until",
        ):
            if hasattr(row, attr):
                # as loaded, not as a change: the row must not be written back on commit
                set_committed_value(row, attr, _aware(getattr(row, attr)))
        return row

    def update_job(self, job_id: str, **values: Any) -> None:
        values.setdefault("updated_at", datetime.now(UTC))
        with self.session() as s:
            s.execute(
                update(JobRow)
                .where(JobRow.id == job_id)
                .values(version=JobRow.version + 1, **values)
            )

    def request_cancel(self, job_id: str) -> None:
        self.update_job(job_id, cancel_requested=True)

    # -- leases (one supervisor per job; several daemon replicas share the jobs) ---------------

    def claim_jobs(
        self,
        owner: str,
        now: datetime,
        lease: timedelta,
        limit: int = 100_000,
        job_ids: Iterable[str] | None = None,
    ) -> list[str]:
        """Claim (or renew) up to ``limit`` jobs for ``owner`` (see :meth:`claim`)."""
        return list(self.claim(owner, now, lease, limit, job_ids))

    def claim(
        self,
        owner: str,
        now: datetime,
        lease: timedelta,
        limit: int = 100_000,
        job_ids: Iterable[str] | None = None,
    ) -> dict[str, int]:
        """Claim (or renew) up to ``limit`` jobs for ``owner``: unowned, owned by us, or whose
        lease expired; ``job_ids`` restricts the claim to those jobs. Returns each claimed
        job's row version (it changes with every :meth:`update_job`).

        Jobs we hold already come first, so renewing never loses a job to a newcomer; jobs we
        hold beyond ``limit`` are released (another replica takes them on its next pass: this
        is how replicas even out). On PostgreSQL the candidate rows are locked with
        ``FOR UPDATE SKIP LOCKED``, so replicas claiming at the same moment never take the
        same job.
        """
        until = now + lease
        wanted = None if job_ids is None else list(job_ids)
        if wanted is not None and not wanted:
            return {}
        with self.session() as s:
            q = (
                select(JobRow.id, JobRow.version)
                .where(JobRow.state.in_(ACTIVE_STATES))
                .where(
                    (JobRow.owner.is_(None)) | (JobRow.owner == owner) | (JobRow.lease_until < now)
                )
                .order_by(case((JobRow.owner == owner, 0), else_=1), JobRow.submitted_at)
                .limit(limit)
            )
            if wanted is not None:
                q = q.where(JobRow.id.in_(wanted))
            if self.is_postgres:
                q = q.with_for_update(skip_locked=True)
            got = {jid: version for jid, version in s.execute(q)}
            ids = list(got)
            for chunk in _chunks(ids):
                s.execute(
                    update(JobRow)
                    .where(JobRow.id.in_(chunk))
                    .values(owner=owner, lease_until=until)
                )
            if len(ids) >= limit:  # we may hold more than our share: let the rest go
                s.execute(
                    update(JobRow)
                    .where(JobRow.owner == owner, JobRow.lease_until != until)
                    .values(owner=None, lease_until=None)
                )
            return got

    def renew_lease(self, job_id: str, owner: str, until: datetime) -> bool:
        """Extend ``owner``'s lease on a job to ``until`` if ``owner`` still holds it (even
        past its expiry, as long as no other replica claimed the job meanwhile). Called right
        before a launch: False means another replica owns the job and this one must not act."""
        with self.session() as s:
            done = s.execute(
                update(JobRow)
                .where(JobRow.id == job_id, JobRow.owner == owner)
                .values(lease_until=until)
            )
            return bool(done.rowcount)  # type: ignore[attr-defined]

    def count_active(self) -> int:
        with self.session() as s:
            return int(s.scalar(select(func.count()).where(JobRow.state.in_(ACTIVE_STATES))) or 0)

    def release_jobs(self, owner: str, job_ids: Iterable[str] | None = None) -> None:
        with self.session() as s:
            q = update(JobRow).where(JobRow.owner == owner)
            if job_ids is not None:
                q = q.where(JobRow.id.in_(list(job_ids)))
            s.execute(q.values(owner=None, lease_until=None))

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

    def upsert_instance(self, row: InstanceRow) -> None:
        with self.session() as s:
            s.merge(row)

    def upsert_instances(self, rows: Sequence[InstanceRow]) -> None:
        """Insert or update many instance rows in one statement per chunk."""
        if not rows:
            return
        if self.is_postgres:
            from sqlalchemy.dialects.postgresql import insert
        else:
            from sqlalchemy.dialects.sqlite import insert  # type: ignore[assignment]
        cols = [c.name for c in InstanceRow.__table__.columns]
        keys = ("provider", "instance_id")
        docs = [{c: getattr(r, c) for c in cols} for r in rows]
        with self.session() as s:
            for chunk in _chunks(docs, 1000):
                stmt = insert(InstanceRow).values(chunk)
                stmt = stmt.on_conflict_do_update(
                    index_elements=list(keys),
                    set_={c: stmt.excluded[c] for c in cols if c not in keys},
                )
                s.execute(stmt)

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
        at: datetime | None = None,
        **data: Any,
    ) -> None:
        from providers.base import redact

        with self.session() as s:
            s.add(
                EventRow(
                    job_id=job_id,
                    at=at or datetime.now(UTC),
                    kind=kind,
                    message=redact(message),
                    data=data,
                )
            )

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
            s.execute(delete(CooldownRow).where(CooldownRow.until < now))
            # the table holds only cooldowns in force: reading it whole beats a long IN list
            for r in s.scalars(select(CooldownRow)):
                if r.job_id in out:
                    out[r.job_id][(r.provider, r.location)] = _aware(r.until) or r.until
        return out

    def cooldowns(self, job_id: str, now: datetime) -> dict[tuple[str, str], datetime]:
        with self.session() as s:
            s.execute(delete(CooldownRow).where(CooldownRow.until < now))
            rows = s.scalars(select(CooldownRow).where(CooldownRow.job_id == job_id)).all()
            return {(r.provider, r.location): _aware(r.until) or r.until for r in rows}

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

    def prices(self, provider: str | None = None) -> list[PriceRow]:
        with self.session() as s:
            q = select(PriceRow)
            if provider:
                q = q.where(PriceRow.provider == provider)
            return [self._fix(r) for r in s.scalars(q).all()]


def heartbeat(store: Store, owner: str, now: datetime, version: str = "") -> None:
    """Record that daemon replica ``owner`` is alive."""
    with store.session() as s:
        row = s.get(ReplicaRow, owner)
        if row is None:
            s.add(ReplicaRow(owner=owner, started_at=now, last_seen=now, version=version))
            # replicas gone for a day (killed without a goodbye) are forgotten
            s.execute(delete(ReplicaRow).where(ReplicaRow.last_seen < now - timedelta(days=1)))
        else:
            row.last_seen = now


def live_replicas(
    store: Store, now: datetime, within: timedelta = timedelta(seconds=30)
) -> list[str]:
    with store.session() as s:
        rows = s.scalars(select(ReplicaRow)).all()
        return [r.owner for r in rows if (_aware(r.last_seen) or now) >= now - within]


def drop_replica(store: Store, owner: str) -> None:
    with store.session() as s:
        s.execute(delete(ReplicaRow).where(ReplicaRow.owner == owner))


def _chunks(items: Sequence[Any], size: int = 5000) -> Iterator[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def metadata_tables() -> list[str]:
    return sorted(Base.metadata.tables)
