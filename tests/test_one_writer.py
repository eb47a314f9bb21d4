"""Replicas never act on a database they cannot share safely: one `corral serve` per SQLite file, migrations
one replica at a time on PostgreSQL, and a corral older than its database's schema refuses to act."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest
from sqlalchemy import text

from corral.cli import main
from corral.store import SchemaTooNew, Store
from corral_sandbox.local import LocalCorral
from tests.conftest import StartCorral
from tests.store_urls import postgres_url


def serve_again(config: Path) -> subprocess.CompletedProcess[str]:
    """`corral serve` on `config` as an operator would start a second one (bounded: it must refuse, not run)."""
    command = [sys.executable, "-m", "corral.cli", "serve", "--config", str(config), "--listen", "127.0.0.1:0"]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def test_a_second_corral_on_one_sqlite_file_refuses_to_start_and_says_what_to_use(
    start_corral: StartCorral,
) -> None:
    first: LocalCorral = start_corral()
    second = serve_again(first.config_path)
    assert second.returncode == 2
    assert "another corral" in second.stderr and "is already serving from" in second.stderr
    assert "PostgreSQL" in second.stderr, "the refusal says what to use for several replicas"
    assert first.runners() == [], "the refused corral touched nothing"


def test_the_sqlite_claim_ends_with_the_corral_that_held_it(start_corral: StartCorral) -> None:
    first: LocalCorral = start_corral()
    first.stop()
    again = start_corral()
    with again.api() as api:
        assert api.get("/healthz").status_code == 200


def test_a_corral_older_than_the_schema_refuses_to_act(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'corral.db'}"
    store = Store(url)
    store.migrate()
    store.run_blocking(lambda c: c.execute(text("UPDATE alembic_version SET version_num = '9001'")))
    with pytest.raises(SchemaTooNew, match="'9001', newer than this corral knows"):
        store.migrate()
    store.close()
    assert main(["migrate", "--database-url", url]) == 2
    assert "a newer corral migrated it" in capsys.readouterr().err


def test_replicas_starting_together_on_postgresql_migrate_once_without_colliding() -> None:
    with postgres_url() as url:
        stores = [Store(url) for _ in range(4)]
        failures: list[BaseException] = []
        start = threading.Barrier(len(stores))

        def migrate(store: Store) -> None:
            start.wait()
            try:
                store.migrate()
            except BaseException as exc:
                failures.append(exc)

        threads = [threading.Thread(target=migrate, args=(store,)) for store in stores]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        versions = stores[0].run_blocking(lambda c: c.execute(text("SELECT version_num FROM alembic_version")).all())
        for store in stores:
            store.close()
    assert failures == []
    assert len(versions) == 1
