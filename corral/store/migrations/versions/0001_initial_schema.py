"""initial schema

Revision ID: 0001
Revises: (none)
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import corral.store.schema

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "deliveries",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("event", sa.String(length=64), nullable=False),
        sa.Column("action", sa.String(length=32), nullable=True),
        sa.Column("received_at", corral.store.schema.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "jobs",
        sa.Column("id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("repository", sa.String(length=256), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("conclusion", sa.String(length=32), nullable=True),
        sa.Column("pool", sa.String(length=64), nullable=True),
        sa.Column("run_id", sa.BigInteger(), nullable=True),
        sa.Column("runner_name", sa.String(length=128), nullable=True),
        sa.Column("queued_at", corral.store.schema.UTCDateTime(timezone=True), nullable=True),
        sa.Column("started_at", corral.store.schema.UTCDateTime(timezone=True), nullable=True),
        sa.Column("completed_at", corral.store.schema.UTCDateTime(timezone=True), nullable=True),
        sa.Column("received_at", corral.store.schema.UTCDateTime(timezone=True), nullable=False),
        sa.Column("runners_started", sa.Integer(), nullable=False),
        sa.Column("checked_at", corral.store.schema.UTCDateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.create_index("ix_jobs_status_pool", ["status", "pool"], unique=False)

    op.create_table(
        "pool_status",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("applied_generation", sa.Integer(), nullable=False),
        sa.Column("ready", sa.Boolean(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("removed", sa.Boolean(), nullable=False),
        sa.Column("updated_at", corral.store.schema.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "runners",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("pool", sa.String(length=64), nullable=False),
        sa.Column("scope", sa.String(length=300), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("server_id", sa.String(length=64), nullable=True),
        sa.Column("github_runner_id", sa.BigInteger(), nullable=True),
        sa.Column("job_id", sa.BigInteger(), nullable=True),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("failure_reason", sa.Text(), nullable=True),
        sa.Column("created_at", corral.store.schema.UTCDateTime(timezone=True), nullable=False),
        sa.Column("state_changed_at", corral.store.schema.UTCDateTime(timezone=True), nullable=False),
        sa.Column("registered_at", corral.store.schema.UTCDateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
    )
    with op.batch_alter_table("runners", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_runners_github_runner_id"), ["github_runner_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_runners_job_id"), ["job_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_runners_pool"), ["pool"], unique=False)
        batch_op.create_index(batch_op.f("ix_runners_server_id"), ["server_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_runners_state"), ["state"], unique=False)

    op.create_table(
        "runner_events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("runner_id", sa.String(length=32), nullable=False),
        sa.Column("from_state", sa.String(length=16), nullable=True),
        sa.Column("to_state", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("at", corral.store.schema.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["runner_id"], ["runners.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("runner_events", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_runner_events_runner_id"), ["runner_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("runner_events", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_runner_events_runner_id"))

    op.drop_table("runner_events")
    with op.batch_alter_table("runners", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_runners_state"))
        batch_op.drop_index(batch_op.f("ix_runners_server_id"))
        batch_op.drop_index(batch_op.f("ix_runners_pool"))
        batch_op.drop_index(batch_op.f("ix_runners_job_id"))
        batch_op.drop_index(batch_op.f("ix_runners_github_runner_id"))

    op.drop_table("runners")
    op.drop_table("pool_status")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index("ix_jobs_status_pool")

    op.drop_table("jobs")
    op.drop_table("deliveries")
