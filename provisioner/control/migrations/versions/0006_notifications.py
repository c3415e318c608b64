"""Notifications and the savings ledger: the outbox of messages to deliver (one per event and
target, the target by name, never its URL), and what each launch keeps for the ledger (the
offer's on-demand price, the cheapest on-demand placement the policy allowed, the estimate's
chance of missing the deadline).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-06
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
ATTEMPT_COLUMNS = (
    ("on_demand_price_per_hour", sa.Float),
    ("cheapest_on_demand_per_hour", sa.Float),
    ("cheapest_on_demand_offer", sa.String(256)),
    ("estimate_p_miss", sa.Float),
)


def upgrade() -> None:
    op.create_table(
        "notifications",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("event_id", sa.Integer, nullable=True),
        sa.Column("job_id", sa.String(64), nullable=True),
        sa.Column("target", sa.String(64), nullable=False),
        sa.Column("event", sa.String(32), nullable=False),
        sa.Column("title", sa.Text, nullable=False),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("tries", sa.Integer, nullable=False),
        sa.Column("next_try_at", TS, nullable=False),
        sa.Column("claimed_by", sa.String(128), nullable=True),
        sa.Column("claimed_until", TS, nullable=True),
        sa.Column("sent_at", TS, nullable=True),
        sa.Column("folded_into", sa.Integer, nullable=True),
        sa.Column("error", sa.Text, nullable=False),
        sa.UniqueConstraint("event_id", "target", name="uq_notification_event_target"),
    )
    op.create_index("ix_notifications_state", "notifications", ["state", "next_try_at"])
    op.create_index("ix_notifications_queue", "notifications", ["job_id", "target", "id"])
    # nullable: attempts launched before this revision have none (the ledger falls back to
    # the catalog's on-demand price for their type and region)
    with op.batch_alter_table("attempts") as batch:
        for name, kind in ATTEMPT_COLUMNS:
            batch.add_column(sa.Column(name, kind, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        for name, _ in reversed(ATTEMPT_COLUMNS):
            batch.drop_column(name)
    op.drop_index("ix_notifications_queue", "notifications")
    op.drop_index("ix_notifications_state", "notifications")
    op.drop_table("notifications")
