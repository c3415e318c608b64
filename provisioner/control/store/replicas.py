"""Daemon replicas' heartbeats in the store."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import delete, select

from provisioner.control.store.engine import StoreBase, as_aware
from provisioner.control.store.schema import ReplicaRow


def heartbeat(store: StoreBase, owner: str, now: datetime, version: str = "") -> None:
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
    store: StoreBase, now: datetime, within: timedelta = timedelta(seconds=30)
) -> list[str]:
    with store.session() as s:
        rows = s.scalars(select(ReplicaRow)).all()
        return [r.owner for r in rows if (as_aware(r.last_seen) or now) >= now - within]


def drop_replica(store: StoreBase, owner: str) -> None:
    with store.session() as s:
        s.execute(delete(ReplicaRow).where(ReplicaRow.owner == owner))
