"""Databases the store is tested against: a SQLite file, and a fresh database on the real PostgreSQL."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

from corral.store.database import Store
from corral.store.leases import WAKE_CHANNEL
from corral.store.wakes import libpq_url

POSTGRES_ADMIN_URL = os.environ.get("CORRAL_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")


@contextmanager
def sqlite_url(folder: Path) -> Iterator[str]:
    yield f"sqlite:///{folder / 'corral.db'}"


@contextmanager
def postgres_url() -> Iterator[str]:
    """A database of its own on the local PostgreSQL server, dropped afterwards."""
    name = f"corral_test_{secrets.token_hex(4)}"
    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    base = POSTGRES_ADMIN_URL.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1)
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def postgres_store_heard() -> Iterator[tuple[Store, psycopg.Connection[tuple[object, ...]]]]:
    """A migrated store on a fresh PostgreSQL database, and a connection of its own listening on the channel
    replicas wake each other on (`listener.notifies()` reads what was sent)."""
    with postgres_url() as url:
        store = Store(url)
        store.migrate()
        try:
            with psycopg.connect(libpq_url(url), autocommit=True) as listener:
                listener.execute(f"LISTEN {WAKE_CHANNEL}")
                yield store, listener
        finally:
            store.close()
