"""API tokens, and drained pools

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import corral.store.schema

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.String(length=16), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("scope", sa.String(length=16), nullable=False),
        sa.Column("token_hash", sa.String(length=128), nullable=False),
        sa.Column("created_at", corral.store.schema.UTCDateTime(timezone=True), nullable=False),
        sa.Column("last_used_at", corral.store.schema.UTCDateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", corral.store.schema.UTCDateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("token_hash"),
    )
    with op.batch_alter_table("pool_status") as batch_op:
        batch_op.add_column(sa.Column("drained", sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("pool_status") as batch_op:
        batch_op.drop_column("drained")
    op.drop_table("api_tokens")
