"""Replicas and pool leases: several corral processes on one PostgreSQL database share the pools

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import corral.store.schema

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    when = corral.store.schema.UTCDateTime(timezone=True)
    op.create_table(
        "replicas",
        sa.Column("id", sa.String(length=128), primary_key=True),
        sa.Column("version", sa.String(length=32), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("started_at", when, nullable=False),
        sa.Column("last_seen", when, nullable=False),
    )
    op.create_table(
        "pool_leases",
        sa.Column("pool", sa.String(length=64), primary_key=True),
        sa.Column("holder", sa.String(length=128), nullable=False),
        sa.Column("fence", sa.BigInteger(), nullable=False),
        sa.Column("acquired_at", when, nullable=False),
        sa.Column("expires_at", when, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("pool_leases")
    op.drop_table("replicas")
