"""Gangs (issue 10): how many nodes an attempt launched (its cost is every node's) and the
placement group they went into (deleted with the gang).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # rows written before this revision are single instances: nodes 1, no group
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("nodes", sa.Integer, nullable=False, server_default="1"))
        batch.add_column(sa.Column("placement_group", sa.String(256), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("placement_group")
        batch.drop_column("nodes")
