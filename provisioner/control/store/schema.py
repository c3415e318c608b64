"""Tables of the store: jobs, attempts, instances, events, the notification outbox, cooldowns,
prices, probe results.

The schema is owned by the Alembic migrations in ``provisioner/control/migrations``; these ORM classes
describe the same tables for queries (a test checks that the two agree).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        dict[str, Any]: JSON,
        datetime: DateTime(timezone=True),
    }


class JobRow(Base):
    __tablename__ = "jobs"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(63))
    policy_yaml: Mapped[str] = mapped_column(Text)
    policy_path: Mapped[str | None] = mapped_column(Text, nullable=True)
    workdir: Mapped[str | None] = mapped_column(Text, nullable=True)  # relative paths resolve here
    #: the checkpoint store the job runs with (absolute; None: the policy's, resolved in workdir)
    checkpoint_uri: Mapped[str | None] = mapped_column(Text, nullable=True)
    #: the code's descriptor (provisioner.jobcode): archive digest and URI, or a pinned commit
    code: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    provider: Mapped[str] = mapped_column(String(32))
    provider_options: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    state: Mapped[str] = mapped_column(String(16), index=True)
    submitted_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    deadline: Mapped[datetime | None] = mapped_column(nullable=True)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    restarts: Mapped[int] = mapped_column(Integer, default=0)
    spent_usd: Mapped[float] = mapped_column(Float, default=0.0)
    work_total_h: Mapped[float | None] = mapped_column(Float, nullable=True)
    work_done_h: Mapped[float] = mapped_column(Float, default=0.0)
    progress: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    result: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    reason: Mapped[str] = mapped_column(Text, default="")
    #: why it is in its state (a provisioner.core.states.Cause value; "" before causes)
    cause: Mapped[str] = mapped_column(String(32), default="", server_default="")
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    owner: Mapped[str | None] = mapped_column(String(128), nullable=True)  # supervising process
    lease_until: Mapped[datetime | None] = mapped_column(nullable=True)
    version: Mapped[int] = mapped_column(Integer, default=0)


class AttemptRow(Base):
    __tablename__ = "attempts"
    __table_args__ = (UniqueConstraint("job_id", "attempt", name="uq_attempt"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    attempt: Mapped[int] = mapped_column(Integer)
    token: Mapped[str] = mapped_column(String(96))
    provider: Mapped[str] = mapped_column(String(32))
    region: Mapped[str] = mapped_column(String(64))
    zone: Mapped[str] = mapped_column(String(64))
    instance_type: Mapped[str] = mapped_column(String(64))
    gpu: Mapped[str] = mapped_column(String(32))
    gpu_count: Mapped[int] = mapped_column(Integer)
    market: Mapped[str] = mapped_column(String(16))
    price_per_hour: Mapped[float] = mapped_column(Float)
    bid_cap_per_hour: Mapped[float | None] = mapped_column(Float, nullable=True)
    instance_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    state: Mapped[str] = mapped_column(String(16))  # launching|running|preempted|ended|failed
    reason: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime]
    launched_at: Mapped[datetime | None] = mapped_column(nullable=True)
    ended_at: Mapped[datetime | None] = mapped_column(nullable=True)
    end_reason: Mapped[str] = mapped_column(Text, default="")
    #: why it ended (a provisioner.core.states.Cause value; "" for rows from before causes)
    end_cause: Mapped[str] = mapped_column(String(32), default="", server_default="")
    cost_usd: Mapped[float] = mapped_column(Float, default=0.0)
    # the estimate made at launch (records.launch_estimate; migration 0003): the job's expected
    # cost on this placement from this launch on, and its P10-P90 range where known
    estimate_usd: Mapped[float | None] = mapped_column(Float, nullable=True, default=None)
    estimate_p10_usd: Mapped[float | None] = mapped_column(Float, nullable=True, default=None)
    estimate_p90_usd: Mapped[float | None] = mapped_column(Float, nullable=True, default=None)
    # a gang (migration 0004): the nodes launched under this attempt (price_per_hour is per
    # node; the attempt bills every node) and the placement group they went into, cleared
    # once the group is deleted
    nodes: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    placement_group: Mapped[str | None] = mapped_column(String(256), nullable=True, default=None)
    # the ledger's references, kept at launch (migration 0006): the offer's own on-demand price
    # per node-hour (same type and zone), the cheapest on-demand placement the policy allowed
    # then (per node-hour, and which), and the estimate's chance of missing the deadline
    on_demand_price_per_hour: Mapped[float | None] = mapped_column(
        Float, nullable=True, default=None
    )
    cheapest_on_demand_per_hour: Mapped[float | None] = mapped_column(
        Float, nullable=True, default=None
    )
    cheapest_on_demand_offer: Mapped[str | None] = mapped_column(
        String(256), nullable=True, default=None
    )
    estimate_p_miss: Mapped[float | None] = mapped_column(Float, nullable=True, default=None)
    # held capacity (migration 0012): the reservation or block the attempt was launched into,
    # its kind, the cloud's end time, and its rate per instance-hour whether used or not
    reservation_id: Mapped[str | None] = mapped_column(String(256), nullable=True, default=None)
    reservation_kind: Mapped[str | None] = mapped_column(String(32), nullable=True, default=None)
    reservation_ends_at: Mapped[datetime | None] = mapped_column(nullable=True, default=None)
    held_usd_per_hour: Mapped[float | None] = mapped_column(Float, nullable=True, default=None)


class InstanceRow(Base):
    __tablename__ = "instances"

    provider: Mapped[str] = mapped_column(String(32), primary_key=True)
    instance_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    job_id: Mapped[str | None] = mapped_column(String(64), index=True, nullable=True)
    attempt: Mapped[int | None] = mapped_column(Integer, nullable=True)
    region: Mapped[str] = mapped_column(String(64))
    zone: Mapped[str] = mapped_column(String(64))
    instance_type: Mapped[str] = mapped_column(String(64))
    market: Mapped[str] = mapped_column(String(16))
    state: Mapped[str] = mapped_column(String(16))
    raw_state: Mapped[str] = mapped_column(String(64), default="")
    state_reason: Mapped[str] = mapped_column(Text, default="")
    price_per_hour: Mapped[float | None] = mapped_column(Float, nullable=True)
    launched_at: Mapped[datetime | None] = mapped_column(nullable=True)
    ended_at: Mapped[datetime | None] = mapped_column(nullable=True)
    last_seen_at: Mapped[datetime | None] = mapped_column(nullable=True)


class EventRow(Base):
    __tablename__ = "events"
    __table_args__ = (Index("ix_events_job_at", "job_id", "id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    at: Mapped[datetime]
    kind: Mapped[str] = mapped_column(String(32))
    message: Mapped[str] = mapped_column(Text)
    data: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class NotificationRow(Base):
    """The outbox (migration 0006): one message for one target about one event, written in
    the event's transaction and delivered by the daemon (provisioner.control.notify). It holds
    the target's name, never its URL."""

    __tablename__ = "notifications"
    __table_args__ = (
        UniqueConstraint("event_id", "target", name="uq_notification_event_target"),
        Index("ix_notifications_state", "state", "next_try_at"),
        Index("ix_notifications_queue", "job_id", "target", "id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    event_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    job_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    target: Mapped[str] = mapped_column(String(64))
    event: Mapped[str] = mapped_column(String(32))  # what it tells of (policies.notify.EVENTS)
    title: Mapped[str] = mapped_column(Text)
    body: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime]
    state: Mapped[str] = mapped_column(String(16))  # pending | sent | failed | expired
    tries: Mapped[int] = mapped_column(Integer, default=0)
    next_try_at: Mapped[datetime]
    claimed_by: Mapped[str | None] = mapped_column(String(128), nullable=True)
    claimed_until: Mapped[datetime | None] = mapped_column(nullable=True)
    sent_at: Mapped[datetime | None] = mapped_column(nullable=True)
    #: sent inside another row's summary message (the rate limit folds the rest into one)
    folded_into: Mapped[int | None] = mapped_column(Integer, nullable=True)
    error: Mapped[str] = mapped_column(Text, default="")


class CooldownRow(Base):
    __tablename__ = "cooldowns"

    job_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    provider: Mapped[str] = mapped_column(String(32), primary_key=True)
    location: Mapped[str] = mapped_column(String(64), primary_key=True)
    until: Mapped[datetime]
    reason: Mapped[str] = mapped_column(Text, default="")


class PriceRow(Base):
    __tablename__ = "prices"

    provider: Mapped[str] = mapped_column(String(32), primary_key=True)
    region: Mapped[str] = mapped_column(String(64), primary_key=True)
    zone: Mapped[str] = mapped_column(String(64), primary_key=True)
    instance_type: Mapped[str] = mapped_column(String(64), primary_key=True)
    spot_price: Mapped[float | None] = mapped_column(Float, nullable=True)
    on_demand_price: Mapped[float | None] = mapped_column(Float, nullable=True)
    at: Mapped[datetime]  # when the quote was read (the price in effect then)
    #: when the cloud last changed the spot price, where it says (migration 0011)
    changed_at: Mapped[datetime | None] = mapped_column(nullable=True)


class QuotaRow(Base):
    """An account's quota in a region (or zone) as last read (provisioner.core.quotas.Quota)."""

    __tablename__ = "quotas"

    provider: Mapped[str] = mapped_column(String(32), primary_key=True)
    region: Mapped[str] = mapped_column(String(64), primary_key=True)
    zone: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    note: Mapped[str] = mapped_column(Text, default="")
    unit: Mapped[str] = mapped_column(String(16))
    quota_limit: Mapped[float] = mapped_column(Float)
    used: Mapped[float | None] = mapped_column(Float, nullable=True)
    market: Mapped[str] = mapped_column(String(16))
    families: Mapped[list[str]] = mapped_column(JSON, default=list)
    at: Mapped[datetime]
    #: where the figures come from (provisioner.core.quotas.SOURCES; migration 0010)
    source: Mapped[str] = mapped_column(String(16), default="", server_default="")


class PriorRow(Base):
    """A cloud's availability figure for a type in a zone or region as last read
    (provisioner.core.zone_priors.ZonePrior; migration 0008_priors)."""

    __tablename__ = "zone_priors"

    provider: Mapped[str] = mapped_column(String(32), primary_key=True)
    region: Mapped[str] = mapped_column(String(64), primary_key=True)
    zone: Mapped[str] = mapped_column(String(64), primary_key=True)
    instance_type: Mapped[str] = mapped_column(String(64), primary_key=True)
    kind: Mapped[str] = mapped_column(String(32), primary_key=True)
    value: Mapped[float] = mapped_column(Float)
    label: Mapped[str] = mapped_column(String(32), default="")
    at: Mapped[datetime]


class ReplicaRow(Base):
    """A running daemon replica and its heartbeat (``provisioner up`` hands jobs to one)."""

    __tablename__ = "replicas"

    owner: Mapped[str] = mapped_column(String(128), primary_key=True)
    started_at: Mapped[datetime]
    last_seen: Mapped[datetime]
    version: Mapped[str] = mapped_column(String(32))


class ProbeRow(Base):
    """What one attempt's node measured of its GPUs (``provisioner probe``; migration 0002).
    Keyed for the planner by (provider, instance_type, gpu); see
    provisioner.control.store.probes."""

    __tablename__ = "probe_results"
    __table_args__ = (
        UniqueConstraint("job_id", "attempt", name="uq_probe_attempt"),
        Index("ix_probe_results_offer", "provider", "instance_type", "gpu"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    attempt: Mapped[int | None] = mapped_column(Integer, nullable=True)
    provider: Mapped[str] = mapped_column(String(32))
    instance_type: Mapped[str] = mapped_column(String(64))
    gpu: Mapped[str] = mapped_column(String(32))
    gpu_count: Mapped[int] = mapped_column(Integer)
    zone: Mapped[str] = mapped_column(String(64), default="")
    instance_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    at: Mapped[datetime]
    backend: Mapped[str] = mapped_column(String(32))
    precision: Mapped[str | None] = mapped_column(String(8), nullable=True)
    fraction: Mapped[float | None] = mapped_column(Float, nullable=True)  # of the datasheet
    tflops: Mapped[float | None] = mapped_column(Float, nullable=True)  # the node's, measured
    verdict: Mapped[str] = mapped_column(String(16))  # ok | below | unknown | failed
    report: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
