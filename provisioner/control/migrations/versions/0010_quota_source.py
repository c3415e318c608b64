"""Quota sources: where each stored quota's figures come from (``quotas.source``: the cloud's
limit and usage, the limit with the usage counted from running instances, the limit alone, or
a refused launch; :data:`provisioner.core.quotas.SOURCES`), so `provisioner quotas` says which
are live. Rows written before keep ``""`` (read by what their figures say).

Revision ID: 0010_quota_source
Revises: 0009_causes
Create Date: 2026-12-06
"""

import sqlalchemy as sa
from alembic import op

revision = "0010_quota_source"
down_revision = "0009_causes"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("quotas") as batch:
        batch.add_column(sa.Column("source", sa.String(16), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("quotas") as batch:
        batch.drop_column("source")
