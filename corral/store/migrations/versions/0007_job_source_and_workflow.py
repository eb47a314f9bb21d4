"""Jobs: how corral first heard of each (for its timeline) and its workflow's name (for usage)

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


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("workflow")
        batch.drop_column("source")
