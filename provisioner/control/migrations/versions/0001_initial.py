"""Initial schema: jobs, attempts, instances, events, cooldowns, prices.

Revision ID: 0001
Revises:
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    """Over 80 lines: the first schema, one table per statement; a migration is history and is
    never edited once released."""
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("policy_yaml", sa.Text, nullable=False),
        sa.Column("policy_path", sa.Text, nullable=True),
        sa.Column("workdir", sa.Text, nullable=True),
        sa.Column("provider", sa.String(32), nullable=False),
        sa.Column("provider_options", sa.JSON, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("submitted_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.Column("deadline", TS, nullable=True),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("restarts", sa.Integer, nullable=False),
        sa.Column("spent_usd", sa.Float, nullable=False),
        sa.Column("work_total_h", sa.Float, nullable=True),
        sa.Column("work_done_h", sa.Float, nullable=False),
        sa.Column("progress", sa.JSON, nullable=False),
        sa.Column("result", sa.JSON, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("cancel_requested", sa.Boolean, nullable=False),
        sa.Column("owner", sa.String(128), nullable=True),
        sa.Column("lease_until", TS, nullable=True),
        sa.Column("version", sa.Integer, nullable=False),
    )
    op.create_index("ix_jobs_state", "jobs", ["state"])
    op.create_table(
        "attempts",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column(
            "job_id", sa.String(64), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("token", sa.String(96), nullable=False),
        sa.Column("provider", sa.String(32), nullable=False),
        sa.Column("region", sa.String(64), nullable=False),
        sa.Column("zone", sa.String(64), nullable=False),
        sa.Column("instance_type", sa.String(64), nullable=False),
        sa.Column("gpu", sa.String(32), nullable=False),
        sa.Column("gpu_count", sa.Integer, nullable=False),
        sa.Column("market", sa.String(16), nullable=False),
        sa.Column("price_per_hour", sa.Float, nullable=False),
        sa.Column("bid_cap_per_hour", sa.Float, nullable=True),
        sa.Column("instance_id", sa.String(128), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("launched_at", TS, nullable=True),
        sa.Column("ended_at", TS, nullable=True),
        sa.Column("end_reason", sa.Text, nullable=False),
        sa.Column("cost_usd", sa.Float, nullable=False),
        sa.UniqueConstraint("job_id", "attempt", name="uq_attempt"),
    )
    op.create_index("ix_attempts_job_id", "attempts", ["job_id"])
    op.create_table(
        "instances",
        sa.Column("provider", sa.String(32), primary_key=True),
        sa.Column("instance_id", sa.String(128), primary_key=True),
        sa.Column("job_id", sa.String(64), nullable=True),
        sa.Column("attempt", sa.Integer, nullable=True),
        sa.Column("region", sa.String(64), nullable=False),
        sa.Column("zone", sa.String(64), nullable=False),
        sa.Column("instance_type", sa.String(64), nullable=False),
        sa.Column("market", sa.String(16), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("raw_state", sa.String(64), nullable=False),
        sa.Column("state_reason", sa.Text, nullable=False),
        sa.Column("price_per_hour", sa.Float, nullable=True),
        sa.Column("launched_at", TS, nullable=True),
        sa.Column("ended_at", TS, nullable=True),
        sa.Column("last_seen_at", TS, nullable=True),
    )
    op.create_index("ix_instances_job_id", "instances", ["job_id"])
    op.create_table(
        "events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.String(64), nullable=True),
        sa.Column("at", TS, nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("data", sa.JSON, nullable=False),
    )
    op.create_index("ix_events_job_at", "events", ["job_id", "id"])
    op.create_table(
        "cooldowns",
        sa.Column("job_id", sa.String(64), primary_key=True),
        sa.Column("provider", sa.String(32), primary_key=True),
        sa.Column("location", sa.String(64), primary_key=True),
        sa.Column("until", TS, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
    )
    op.create_table(
        "prices",
        sa.Column("provider", sa.String(32), primary_key=True),
        sa.Column("region", sa.String(64), primary_key=True),
        sa.Column("zone", sa.String(64), primary_key=True),
        sa.Column("instance_type", sa.String(64), primary_key=True),
        sa.Column("spot_price", sa.Float, nullable=True),
        sa.Column("on_demand_price", sa.Float, nullable=True),
        sa.Column("at", TS, nullable=False),
    )

    op.create_table(
        "replicas",
        sa.Column("owner", sa.String(128), primary_key=True),
        sa.Column("started_at", TS, nullable=False),
        sa.Column("last_seen", TS, nullable=False),
        sa.Column("version", sa.String(32), nullable=False),
    )


def downgrade() -> None:
    for table in ("replicas", "prices", "cooldowns", "events", "instances", "attempts", "jobs"):
        op.drop_table(table)
