"""Causes: why a job reached its state (``jobs.cause``) and why an attempt ended
(``attempts.end_cause``), as :class:`provisioner.core.states.Cause` values; rows written
before keep ``""`` (read as ``unknown``).

Revision ID: 0009_causes
Revises: 0008_priors
Create Date: 2026-12-06
"""

import sqlalchemy as sa
from alembic import op

revision = "0009_causes"
down_revision = "0008_priors"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("cause", sa.String(32), nullable=False, server_default=""))
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("end_cause", sa.String(32), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("end_cause")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("cause")
