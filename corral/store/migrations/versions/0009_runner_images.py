"""Runners: the image each server was created from, so that a rollout can tell which idle runners to replace

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runners") as batch:
        batch.add_column(sa.Column("image_id", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runners") as batch:
        batch.drop_column("image_id")
