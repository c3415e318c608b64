"""The store: jobs, attempts, instances, events, the notification outbox, cooldowns and
prices, on SQLAlchemy 2.

SQLite (WAL) in the XDG state directory by default, for one controller; PostgreSQL for several
daemon replicas (``postgresql+psycopg://...``). The schema is created and upgraded by Alembic.
Every write is a short transaction; reads return detached rows (safe to use after the session).
"""

from __future__ import annotations

from provisioner.control.store.engine import (
    ACTIVE_STATES,
    FINAL_STATES,
    StoreBase,
    as_aware,
    chunked,
    default_url,
    new_job_id,
    redacted_url,
    state_dir,
    store_missing,
)
from provisioner.control.store.jobs import JobQueries
from provisioner.control.store.outbox import Notice
from provisioner.control.store.records import PREEMPTED_ROW, TERMINATED_RAW, RecordQueries
from provisioner.control.store.replicas import drop_replica, heartbeat, live_replicas
from provisioner.control.store.schema import (
    AttemptRow,
    CooldownRow,
    EventRow,
    InstanceRow,
    JobRow,
    NotificationRow,
    PriceRow,
    ReplicaRow,
)

__all__ = [
    "ACTIVE_STATES",
    "FINAL_STATES",
    "PREEMPTED_ROW",
    "TERMINATED_RAW",
    "AttemptRow",
    "CooldownRow",
    "EventRow",
    "InstanceRow",
    "JobRow",
    "Notice",
    "NotificationRow",
    "PriceRow",
    "ReplicaRow",
    "Store",
    "StoreBase",
    "as_aware",
    "chunked",
    "default_url",
    "drop_replica",
    "heartbeat",
    "live_replicas",
    "new_job_id",
    "redacted_url",
    "state_dir",
    "store_missing",
]


class Store(JobQueries, RecordQueries):
    """The store: one engine, the queries of every table (jobs and leases in ``jobs.py``; the
    other tables in ``records.py``; set-up and migrations in ``engine.py``)."""
