"""Runners: one index on (pool, state) in place of the index on pool alone.

Every pass reads its pool's live runners. By the pool's index alone, that read went through every runner the
pool ever had and the store still keeps (14 days of history by default: tens of thousands of rows for a busy
pool), to keep the few alive; the pair finds just those. Measured by `corral simulate` over four days of 10,000
jobs: the pass's read grew with the history until it dominated the run.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-04
"""

from __future__ import annotations

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runners") as batch:
        batch.create_index("ix_runners_pool_state", ["pool", "state"], unique=False)
        batch.drop_index("ix_runners_pool")


def downgrade() -> None:
    with op.batch_alter_table("runners") as batch:
        batch.create_index("ix_runners_pool", ["pool"], unique=False)
        batch.drop_index("ix_runners_pool_state")
