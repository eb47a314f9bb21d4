"""Pool status: what one of the pool's servers costs of the quota, and how many runners for queued jobs the
quota holds back, so that replicas sharing a project plan with each other's creates and waits

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("pool_status") as batch:
        batch.add_column(sa.Column("server_cost", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("quota_waiting", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("quota_waiting_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("pool_status") as batch:
        batch.drop_column("quota_waiting_at")
        batch.drop_column("quota_waiting")
        batch.drop_column("server_cost")
