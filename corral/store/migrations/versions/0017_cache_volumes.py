"""Cache volumes (`cache_volumes`): the pools' volumes and who holds each, and how each runner started (warm,
cold or without a cache volume).

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import corral.store.schema

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "cache_volumes",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("pool", sa.String(64), nullable=False),
        sa.Column("cloud", sa.String(64), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("volume_id", sa.String(64), nullable=True, unique=True),
        sa.Column("runner", sa.String(128), nullable=True),
        sa.Column("size_gb", sa.Integer(), nullable=False),
        sa.Column("uses", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("created_at", corral.store.schema.UTCDateTime(timezone=True), nullable=False),
        sa.Column("state_changed_at", corral.store.schema.UTCDateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_cache_volumes_pool_state", "cache_volumes", ["pool", "state"])
    with op.batch_alter_table("runners") as batch:
        batch.add_column(sa.Column("cache", sa.String(8), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runners") as batch:
        batch.drop_column("cache")
    op.drop_index("ix_cache_volumes_pool_state", "cache_volumes")
    op.drop_table("cache_volumes")
