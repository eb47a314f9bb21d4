"""Scale-set jobs: what each scale-set pool's listener heard of its jobs, for their timeline and usage

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import corral.store.schema

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    when = corral.store.schema.UTCDateTime(timezone=True)
    op.create_table(
        "scale_set_jobs",
        sa.Column("request_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("pool", sa.String(length=64), nullable=False),
        sa.Column("repository", sa.String(length=256), nullable=False),
        sa.Column("workflow", sa.String(length=256), nullable=True),
        sa.Column("display_name", sa.String(length=256), nullable=True),
        sa.Column("job_guid", sa.String(length=64), nullable=True),
        sa.Column("run_id", sa.BigInteger(), nullable=True),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("conclusion", sa.String(length=32), nullable=True),
        sa.Column("runner_name", sa.String(length=128), nullable=True),
        sa.Column("queued_at", when, nullable=True),
        sa.Column("started_at", when, nullable=True),
        sa.Column("completed_at", when, nullable=True),
        sa.Column("received_at", when, nullable=False),
        sa.Column("source", sa.String(length=80), nullable=True),
        sa.PrimaryKeyConstraint("request_id"),
    )
    for column in ("pool", "run_id", "runner_name", "started_at", "received_at"):
        op.create_index(f"ix_scale_set_jobs_{column}", "scale_set_jobs", [column])


def downgrade() -> None:
    for column in ("pool", "run_id", "runner_name", "started_at", "received_at"):
        op.drop_index(f"ix_scale_set_jobs_{column}", table_name="scale_set_jobs")
    op.drop_table("scale_set_jobs")
