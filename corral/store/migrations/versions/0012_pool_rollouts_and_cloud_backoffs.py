"""Pool status: per placement of the pool, the image its check last resolved to and its image rollout (a
canary's counts, a rollback), so that a restart or a replica taking the pool over carries a rollout on
instead of starting afresh; and, for a pool in several clouds, each cloud's backoff for it and the cloud
whose quota its runners wait for

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("pool_status") as batch:
        batch.add_column(sa.Column("rollouts", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("cloud_backoffs", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("quota_waiting_cloud", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("pool_status") as batch:
        batch.drop_column("quota_waiting_cloud")
        batch.drop_column("cloud_backoffs")
        batch.drop_column("rollouts")
