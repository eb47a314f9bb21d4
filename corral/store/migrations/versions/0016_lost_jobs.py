"""Jobs lost with their runner's server, and their re-runs (`rerun_lost_jobs`): the job's name and attempt
(what a job's re-runs share), when and why corral saw it lost, and what it did about it; and an index of
completion times, for the jobs' traces.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import corral.store.schema

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("name", sa.String(256), nullable=True))
        batch.add_column(sa.Column("run_attempt", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("lost_at", corral.store.schema.UTCDateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("lost_reason", sa.Text(), nullable=True))
        batch.add_column(sa.Column("rerun", sa.String(200), nullable=True))
        batch.add_column(sa.Column("rerun_at", corral.store.schema.UTCDateTime(timezone=True), nullable=True))
        batch.create_index("ix_jobs_lost_at", ["lost_at"])
        # the jobs completed since a moment, for their traces (`corral.tracing`)
        batch.create_index("ix_jobs_completed_at", ["completed_at"])


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_index("ix_jobs_completed_at")
        batch.drop_index("ix_jobs_lost_at")
        for column in ("rerun_at", "rerun", "lost_reason", "lost_at", "run_attempt", "name"):
            batch.drop_column(column)
