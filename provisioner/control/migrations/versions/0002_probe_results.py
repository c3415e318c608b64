"""Probe results: what each attempt's node measured of its GPUs (provisioner probe).

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "probe_results",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.String(64), nullable=True),
        sa.Column("attempt", sa.Integer, nullable=True),
        sa.Column("provider", sa.String(32), nullable=False),
        sa.Column("instance_type", sa.String(64), nullable=False),
        sa.Column("gpu", sa.String(32), nullable=False),
        sa.Column("gpu_count", sa.Integer, nullable=False),
        sa.Column("zone", sa.String(64), nullable=False),
        sa.Column("instance_id", sa.String(128), nullable=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("backend", sa.String(32), nullable=False),
        sa.Column("precision", sa.String(8), nullable=True),
        sa.Column("fraction", sa.Float, nullable=True),
        sa.Column("tflops", sa.Float, nullable=True),
        sa.Column("verdict", sa.String(16), nullable=False),
        sa.Column("report", sa.JSON, nullable=False),
        sa.UniqueConstraint("job_id", "attempt", name="uq_probe_attempt"),
    )
    op.create_index("ix_probe_results_offer", "probe_results", ["provider", "instance_type", "gpu"])


def downgrade() -> None:
    op.drop_index("ix_probe_results_offer", table_name="probe_results")
    op.drop_table("probe_results")
