"""Runners: an index on (pool, registered_at), so that a pool's recent boots are read without its history.

A pool with `min_idle: {auto: ...}` takes its boot time from the runners that came online lately, and reads
those it has not seen yet every few seconds; by this index that read finds just them.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-05
"""

from __future__ import annotations

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runners") as batch:
        batch.create_index("ix_runners_pool_registered", ["pool", "registered_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("runners") as batch:
        batch.drop_index("ix_runners_pool_registered")
