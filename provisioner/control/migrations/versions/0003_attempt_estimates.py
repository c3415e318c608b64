"""The estimate made at launch: what the planner expected the job to cost on each attempt's
placement (provisioner cost shows it beside what was billed).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

COLUMNS = ("estimate_usd", "estimate_p10_usd", "estimate_p90_usd")


def upgrade() -> None:
    # nullable: rows written before this revision, and launches with no estimate, keep NULL
    with op.batch_alter_table("attempts") as batch:
        for name in COLUMNS:
            batch.add_column(sa.Column(name, sa.Float, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        for name in reversed(COLUMNS):
            batch.drop_column(name)
