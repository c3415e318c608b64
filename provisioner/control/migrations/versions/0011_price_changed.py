"""Price change times: a stored quote keeps when the cloud last changed the price
(``prices.changed_at``, nullable) beside when it was read (``prices.at``, by which plan ranks
it). Rows written before have none.

Revision ID: 0011_price_changed
Revises: 0010_quota_source
Create Date: 2026-12-06
"""

import sqlalchemy as sa
from alembic import op

revision = "0011_price_changed"
down_revision = "0010_quota_source"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("prices") as batch:
        batch.add_column(sa.Column("changed_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("prices") as batch:
        batch.drop_column("changed_at")
