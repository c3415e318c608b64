"""Availability priors: what each cloud says of a zone's spot capacity (AWS placement scores
and price volatility, Azure eviction rates, Alibaba spot advice) as last read by
``provisioner priors --refresh``, with when they were read.

Revision ID: 0008_priors
Revises: 0007_quotas
Create Date: 2026-12-05
"""

import sqlalchemy as sa
from alembic import op

revision = "0008_priors"
down_revision = "0007_quotas"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "zone_priors",
        sa.Column("provider", sa.String(32), primary_key=True),
        sa.Column("region", sa.String(64), primary_key=True),
        sa.Column("zone", sa.String(64), primary_key=True),
        sa.Column("instance_type", sa.String(64), primary_key=True),
        sa.Column("kind", sa.String(32), primary_key=True),
        sa.Column("value", sa.Float, nullable=False),
        sa.Column("label", sa.String(32), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("zone_priors")
