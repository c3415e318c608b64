"""Held capacity: an attempt launched into a reservation or capacity block keeps which one
(``reservation_id``), its kind, when it ends (``reservation_ends_at``, the cloud's end time)
and what it costs the team per instance-hour whether used or not (``held_usd_per_hour``: the
ledger's held figure; the attempt's own price, the marginal one, is 0). Rows on spot and
on-demand have none.

Revision ID: 0012_attempt_reservation
Revises: 0011_price_changed
Create Date: 2026-12-06
"""

import sqlalchemy as sa
from alembic import op

revision = "0012_attempt_reservation"
down_revision = "0011_price_changed"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("reservation_id", sa.String(256), nullable=True))
        batch.add_column(sa.Column("reservation_kind", sa.String(32), nullable=True))
        batch.add_column(
            sa.Column("reservation_ends_at", sa.DateTime(timezone=True), nullable=True)
        )
        batch.add_column(sa.Column("held_usd_per_hour", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("held_usd_per_hour")
        batch.drop_column("reservation_ends_at")
        batch.drop_column("reservation_kind")
        batch.drop_column("reservation_id")
