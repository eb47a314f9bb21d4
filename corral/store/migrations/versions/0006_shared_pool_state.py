"""Pool state every replica shares: create backoffs, redelivery counts, a scale-set pool's scale set and session

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import corral.store.schema

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    when = corral.store.schema.UTCDateTime(timezone=True)
    with op.batch_alter_table("pool_status") as batch:
        batch.add_column(sa.Column("create_failures", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("create_paused_until", when, nullable=True))
        batch.add_column(sa.Column("scale_set_id", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("scale_set_session", sa.String(length=64), nullable=True))
    op.create_table(
        "redelivery_requests",
        sa.Column("guid", sa.String(length=64), primary_key=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("asked_at", when, nullable=False),
    )
    op.create_index("ix_redelivery_requests_asked_at", "redelivery_requests", ["asked_at"])


def downgrade() -> None:
    op.drop_index("ix_redelivery_requests_asked_at", table_name="redelivery_requests")
    op.drop_table("redelivery_requests")
    with op.batch_alter_table("pool_status") as batch:
        batch.drop_column("scale_set_session")
        batch.drop_column("scale_set_id")
        batch.drop_column("create_paused_until")
        batch.drop_column("create_failures")
