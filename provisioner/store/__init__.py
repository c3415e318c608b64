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

from sqlalchemy import Engine, create_engine, delete, event, select, update
from sqlalchemy.orm import Session, sessionmaker

from provisioner.store.schema import (
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
                setattr(row, attr, _aware(getattr(row, attr)))
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
        self, owner: str, now: datetime, lease: timedelta, limit: int = 100_000
    ) -> list[str]:
        """Claim (or renew) jobs for ``owner``: unowned, owned by us, or whose lease expired.

        On PostgreSQL the candidate rows are locked with ``FOR UPDATE SKIP LOCKED``, so replicas
        claiming at the same moment never take the same job.
        """
        until = now + lease
        with self.session() as s:
            q = (
                select(JobRow.id)
                .where(JobRow.state.in_(ACTIVE_STATES))
                .where(
                    (JobRow.owner.is_(None)) | (JobRow.owner == owner) | (JobRow.lease_until < now)
                )
                .limit(limit)
            )
            if self.is_postgres:
                q = q.with_for_update(skip_locked=True)
            ids = list(s.scalars(q).all())
            if ids:
                s.execute(
                    update(JobRow).where(JobRow.id.in_(ids)).values(owner=owner, lease_until=until)
                )
            return ids

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


def metadata_tables() -> list[str]:
    return sorted(Base.metadata.tables)
