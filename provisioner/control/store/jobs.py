"""The store's queries on the jobs table: submit, look up, update, and the leases."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import Table, bindparam, case, func, select, update

from provisioner.control.store.engine import ACTIVE_STATES, StoreBase, chunked, new_job_id
from provisioner.control.store.schema import EventRow, JobRow

_JOBS = cast(Table, JobRow.__table__)


def update_job_rows(conn: Any, values: Sequence[dict[str, Any]]) -> None:
    """Several jobs' columns on ``conn``, in its transaction (``values``: dicts with the job
    ``id``): one UPDATE by id per set of columns, run with the jobs as its parameter sets
    (Core: the ORM's bulk update by primary key cost three times the CPU, at 10,000 jobs a
    tenth of a warm pass)."""
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for v in values:
        cols = tuple(sorted(k for k in v if k != "id"))
        groups.setdefault(cols, []).append({"job_id_": v["id"], **{k: v[k] for k in cols}})
    for cols, params in groups.items():
        if cols:
            stmt = update(_JOBS).where(_JOBS.c.id == bindparam("job_id_"))
            conn.execute(stmt.values({c: bindparam(c) for c in cols}), params)


class JobQueries(StoreBase):
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
        checkpoint_uri: str | None = None,
        code: dict[str, Any] | None = None,
    ) -> JobRow:
        job = JobRow(
            id=job_id or new_job_id(name),
            name=name,
            policy_yaml=policy_yaml,
            policy_path=policy_path,
            workdir=workdir,
            checkpoint_uri=checkpoint_uri,
            code=dict(code) if code else None,
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
            for chunk in chunked(list(job_ids)):
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
            for chunk in chunked(list(dict.fromkeys(job_ids))):
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
            update_job_rows(s.connection(), values)

    def update_job(self, job_id: str, *, at: datetime, **values: Any) -> None:
        """Change a job's columns; ``at`` (the caller's clock) becomes its ``updated_at``."""
        with self.session() as s:
            s.execute(
                update(JobRow)
                .where(JobRow.id == job_id)
                .values(version=JobRow.version + 1, updated_at=at, **values)
            )

    def request_cancel(self, job_id: str, at: datetime) -> None:
        self.update_job(job_id, at=at, cancel_requested=True)

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
            for chunk in chunked(ids):
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
