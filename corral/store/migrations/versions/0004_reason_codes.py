"""Reason codes on runners and their events; indexes for joins with jobs and for pruning history

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import corral.store.schema

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runners") as batch_op:
        batch_op.add_column(sa.Column("reason", sa.String(length=32), nullable=False, server_default="unknown"))
        batch_op.alter_column("failure_reason", new_column_name="message")
        batch_op.create_index("ix_runners_state_changed_at", ["state_changed_at"])
    with op.batch_alter_table("runner_events") as batch_op:
        batch_op.add_column(sa.Column("code", sa.String(length=32), nullable=False, server_default="unknown"))
        batch_op.alter_column("reason", new_column_name="message", existing_type=sa.Text(), nullable=True)
        batch_op.create_index("ix_runner_events_at", ["at"])
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.add_column(sa.Column("maybe_taken_at", corral.store.schema.UTCDateTime(timezone=True), nullable=True))
    op.create_index("ix_jobs_runner_name", "jobs", ["runner_name"])
    op.create_index("ix_jobs_received_at", "jobs", ["received_at"])
    op.create_index("ix_deliveries_received_at", "deliveries", ["received_at"])


def downgrade() -> None:
    op.drop_index("ix_deliveries_received_at", table_name="deliveries")
    op.drop_index("ix_jobs_received_at", table_name="jobs")
    op.drop_index("ix_jobs_runner_name", table_name="jobs")
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.drop_column("maybe_taken_at")
    with op.batch_alter_table("runner_events") as batch_op:
        batch_op.drop_index("ix_runner_events_at")
        batch_op.alter_column("message", new_column_name="reason", existing_type=sa.Text(), nullable=False)
        batch_op.drop_column("code")
    with op.batch_alter_table("runners") as batch_op:
        batch_op.drop_index("ix_runners_state_changed_at")
        batch_op.alter_column("message", new_column_name="failure_reason")
        batch_op.drop_column("reason")
