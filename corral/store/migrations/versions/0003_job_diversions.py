"""Jobs count the runners that went to other jobs, and when the last one did

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import corral.store.schema

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.add_column(sa.Column("runners_diverted", sa.Integer(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("diverted_at", corral.store.schema.UTCDateTime(timezone=True), nullable=True))
    op.create_index("ix_jobs_status_checked", "jobs", ["status", "checked_at"])


def downgrade() -> None:
    op.drop_index("ix_jobs_status_checked", table_name="jobs")
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.drop_column("diverted_at")
        batch_op.drop_column("runners_diverted")
