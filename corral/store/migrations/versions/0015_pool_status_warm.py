"""Pool status: what `min_idle: {auto: ...}` kept warm on the holder's last pass, and its forecast's figures,
so that every replica shows an auto pool as its holder sees it (not the schedule's floor).

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("pool_status") as batch:
        batch.add_column(sa.Column("warm", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("pool_status") as batch:
        batch.drop_column("warm")
