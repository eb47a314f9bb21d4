"""Jobs: how corral first heard of each (for its timeline), its workflow's name and a start-time index (usage)

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("source", sa.String(length=80), nullable=True))
        batch.add_column(sa.Column("workflow", sa.String(length=256), nullable=True))
    op.create_index("ix_jobs_started_at", "jobs", ["started_at"])


def downgrade() -> None:
    op.drop_index("ix_jobs_started_at", table_name="jobs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("workflow")
        batch.drop_column("source")
