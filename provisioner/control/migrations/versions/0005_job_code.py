"""The job's road to the VM: the checkpoint store it was submitted with (absolute, the
provider's default bucket filled in) and its code's descriptor (an archive's digest and URI,
or a pinned git commit; never the code itself).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-05
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # rows written before this revision: the policy's URI (resolved where the job was
    # submitted) and no code, as before
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("checkpoint_uri", sa.Text, nullable=True))
        batch.add_column(sa.Column("code", sa.JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("code")
        batch.drop_column("checkpoint_uri")
