"""Quotas: the account's limits per cloud and region as last read (``provisioner quotas
--refresh``, or a launch the cloud refused for quota), with when they were read.

Revision ID: 0007_quotas
Revises: 0006
Create Date: 2026-12-05
"""

import sqlalchemy as sa
from alembic import op

revision = "0007_quotas"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "quotas",
        sa.Column("provider", sa.String(32), primary_key=True),
        sa.Column("region", sa.String(64), primary_key=True),
        sa.Column("zone", sa.String(64), primary_key=True),
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("note", sa.Text, nullable=False),
        sa.Column("unit", sa.String(16), nullable=False),
        sa.Column("quota_limit", sa.Float, nullable=False),
        sa.Column("used", sa.Float, nullable=True),
        sa.Column("market", sa.String(16), nullable=False),
        sa.Column("families", sa.JSON, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("quotas")
