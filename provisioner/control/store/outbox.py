"""The notification outbox: rows written in an event's own transaction, claimed and marked by
the daemon's delivery (:mod:`provisioner.control.notify.outbox`).

A *queue* is one job's rows for one target, delivered strictly in order: a replica claims a
queue whole (from its oldest pending row), only while no other replica holds any row of it,
and holds it for a lease. On PostgreSQL the queue's rows are locked with ``FOR UPDATE SKIP
LOCKED`` and the locked ids must be the queue's first ids, so two replicas claiming at once
never split a queue; on SQLite the claim takes the database's write lock before it reads, so
claims are serialised. A replica that dies holding a queue loses it when its lease runs out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import false, func, select, update
from sqlalchemy.orm import Session

from provisioner.control.store.engine import StoreBase, as_aware
from provisioner.control.store.schema import NotificationRow

PENDING, SENT, FAILED, EXPIRED = "pending", "sent", "failed", "expired"


@dataclass(frozen=True)
class Notice:
    """What one event tells whom: an event name (``policies.notify.EVENTS``), the targets by
    name, and the message."""

    event: str
    targets: tuple[str, ...]
    title: str
    body: str


def _held(rows: Any, owner: str, now: datetime) -> bool:
    """Whether another owner holds any of these rows (a claim not yet run out)."""
    return any(
        r.claimed_by not in (None, owner) and (as_aware(r.claimed_until) or now) >= now
        for r in rows
    )


def fix_row(row: NotificationRow) -> NotificationRow:
    for attr in ("created_at", "next_try_at", "claimed_until", "sent_at"):
        setattr(row, attr, as_aware(getattr(row, attr)))
    return row


class OutboxQueries(StoreBase):
    def enqueue(
        self, s: Session, event_id: int | None, job_id: str | None, notice: Notice, at: datetime
    ) -> None:
        """One pending row per target, in the caller's transaction (the event's)."""
        from providers.base import redact

        for target in dict.fromkeys(notice.targets):
            s.add(
                NotificationRow(
                    event_id=event_id,
                    job_id=job_id,
                    target=target,
                    event=notice.event,
                    title=redact(notice.title)[:500],
                    body=redact(notice.body)[:4000],
                    created_at=at,
                    state=PENDING,
                    tries=0,
                    next_try_at=at,
                    claimed_by=None,
                    claimed_until=None,
                    sent_at=None,
                    folded_into=None,
                    error="",
                )
            )

    def claim_notifications(
        self,
        owner: str,
        now: datetime,
        lease: timedelta,
        queues: int = 20,
        per_queue: int = 50,
        scan: int = 2000,
        target: str | None = None,
    ) -> list[list[NotificationRow]]:
        """Claim up to ``queues`` queues whose oldest pending row is due (``target``'s only,
        when given), each with up to ``per_queue`` of its pending rows in order; ``owner``
        holds them until ``now + lease`` (or until it marks, releases or renews them). A
        handful of statements, whatever the number of queues (SQLite's write lock is held
        for the claim)."""
        N = NotificationRow
        mine = N.target == target if target is not None else N.id.isnot(None)
        with self.session() as s:  # nothing due: no write transaction (SQLite's lock) at all
            due_now = (N.state == PENDING) & (N.next_try_at <= now)
            free = N.claimed_until.is_(None) | (N.claimed_until < now) | (N.claimed_by == owner)
            if s.scalar(select(N.id).where(due_now, free, mine).limit(1)) is None:
                return []
        with self.session() as s:
            if not self.is_postgres:  # SQLite: the write lock first, then read what is committed
                s.execute(update(N).where(false()).values(claimed_by=None))
            cols = (N.id, N.job_id, N.target, N.claimed_by, N.claimed_until, N.next_try_at)
            rows = s.execute(
                select(*cols).where(N.state == PENDING, mine).order_by(N.id).limit(scan)
            ).all()
            by_queue: dict[tuple[Any, str], list[Any]] = {}
            for r in rows:
                by_queue.setdefault((r.job_id, r.target), []).append(r)
            chosen: dict[tuple[Any, str], list[int]] = {}
            for key, q in by_queue.items():  # oldest head first (rows came in id order)
                if len(chosen) >= queues:
                    break
                if (as_aware(q[0].next_try_at) or now) > now or _held(q, owner, now):
                    continue
                chosen[key] = [r.id for r in q[:per_queue]]
            if not chosen:
                return []
            wanted = [i for ids in chosen.values() for i in ids]
            if self.is_postgres:  # what another claimer holds is skipped, and so its queue
                got = {
                    r.id: r
                    for r in s.execute(
                        select(N.id, N.claimed_by, N.claimed_until)
                        .where(N.id.in_(wanted), N.state == PENDING)
                        .with_for_update(skip_locked=True)
                    )
                }
                chosen = {
                    k: ids
                    for k, ids in chosen.items()
                    if all(i in got for i in ids) and not _held([got[i] for i in ids], owner, now)
                }
                wanted = [i for ids in chosen.values() for i in ids]
            if not wanted:
                return []
            until = now + lease
            s.execute(
                update(N).where(N.id.in_(wanted)).values(claimed_by=owner, claimed_until=until)
            )
            full = {r.id: r for r in s.scalars(select(N).where(N.id.in_(wanted)))}
            s.expunge_all()
        return [[fix_row(full[i]) for i in ids] for ids in chosen.values()]

    def due_targets(self, owner: str, now: datetime) -> list[str]:
        """The targets with a pending row that is due and free for ``owner`` (whose workers
        the daemon wakes)."""
        N = NotificationRow
        free = N.claimed_until.is_(None) | (N.claimed_until < now) | (N.claimed_by == owner)
        with self.session() as s:
            q = select(N.target).where(N.state == PENDING, N.next_try_at <= now, free).distinct()
            return sorted(s.scalars(q))

    def renew_notifications(self, owner: str, ids: Sequence[int], until: datetime) -> bool:
        """Hold ``owner``'s claimed rows until ``until``; False (and nothing changed) when any
        of them is no longer pending and ``owner``'s: its lease ran out and another replica
        claimed the queue, so ``owner`` must send no more of it."""
        if not ids:
            return True
        N = NotificationRow
        with self.session() as s:
            if not self.is_postgres:  # SQLite: the write lock first, as a claim takes it
                s.execute(update(N).where(false()).values(claimed_by=None))
            held = select(func.count()).where(
                N.id.in_(list(ids)), N.state == PENDING, N.claimed_by == owner
            )
            if self.is_postgres:
                rows = s.execute(
                    select(N.id, N.state, N.claimed_by).where(N.id.in_(list(ids))).with_for_update()
                ).all()
                n = sum(1 for r in rows if r.state == PENDING and r.claimed_by == owner)
            else:
                n = int(s.scalar(held) or 0)
            if n != len(set(ids)):
                return False
            s.execute(update(N).where(N.id.in_(list(ids))).values(claimed_until=until))
        return True

    def mark_notifications_sent(
        self, ids: Sequence[int], now: datetime, carrier: int | None = None
    ) -> None:
        """``ids`` were delivered now: in one message, ``carrier``'s (a summary) when given."""
        if not ids:
            return
        N = NotificationRow
        with self.session() as s:
            s.execute(
                update(N)
                .where(N.id.in_(list(ids)))
                .values(state=SENT, sent_at=now, claimed_by=None, claimed_until=None)
            )
            if carrier is not None:
                others = [i for i in ids if i != carrier]
                if others:
                    s.execute(update(N).where(N.id.in_(others)).values(folded_into=carrier))

    def retry_notification(
        self, row_id: int, next_try_at: datetime, error: str, *, give_up: bool = False
    ) -> None:
        """A send that failed: tried once more, next at ``next_try_at`` (or given up)."""
        from providers.base import redact

        N = NotificationRow
        values: dict[str, Any] = {
            "tries": N.tries + 1,
            "next_try_at": next_try_at,
            "error": redact(error)[:1000],
            "claimed_by": None,
            "claimed_until": None,
        }
        if give_up:
            values["state"] = FAILED
        with self.session() as s:
            s.execute(update(N).where(N.id == row_id).values(**values))

    def end_notifications(self, ids: Sequence[int], state: str, error: str) -> None:
        """Rows that will not be sent (``failed``: no such target; ``expired``: too old)."""
        if not ids:
            return
        from providers.base import redact

        N = NotificationRow
        with self.session() as s:
            s.execute(
                update(N)
                .where(N.id.in_(list(ids)), N.state == PENDING)
                .values(state=state, error=redact(error)[:1000], claimed_by=None,
                        claimed_until=None)
            )  # fmt: skip

    def release_notifications(self, owner: str, ids: Sequence[int]) -> None:
        """Claimed rows this replica did not try (the queue's head failed): free again."""
        if not ids:
            return
        N = NotificationRow
        with self.session() as s:
            s.execute(
                update(N)
                .where(N.id.in_(list(ids)), N.claimed_by == owner, N.state == PENDING)
                .values(claimed_by=None, claimed_until=None)
            )

    def messages_sent_since(self, job_id: str | None, target: str, since: datetime) -> int:
        """Messages (a summary counts once) sent to ``target`` about the job since ``since``."""
        N = NotificationRow
        with self.session() as s:
            return int(
                s.scalar(
                    select(func.count()).where(
                        N.job_id == job_id,
                        N.target == target,
                        N.state == SENT,
                        N.folded_into.is_(None),
                        N.sent_at > since,
                    )
                )
                or 0
            )

    def notifications(
        self, job_id: str | None = None, states: Sequence[str] | None = None
    ) -> list[NotificationRow]:
        N = NotificationRow
        with self.session() as s:
            q = select(N).order_by(N.id)
            if job_id is not None:
                q = q.where(N.job_id == job_id)
            if states:
                q = q.where(N.state.in_(list(states)))
            rows = list(s.scalars(q))
            s.expunge_all()
        return [fix_row(r) for r in rows]

    def outbox_pending(self) -> int:
        N = NotificationRow
        with self.session() as s:
            return int(s.scalar(select(func.count()).where(N.state == PENDING)) or 0)
