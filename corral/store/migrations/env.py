"""Alembic environment: migrations run on the connection `Store.migrate` hands over."""

from __future__ import annotations

from alembic import context

from corral.store.schema import Base

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations through corral (corral migrate / Store.migrate), not bare alembic")

context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
