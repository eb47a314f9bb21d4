"""Files corral writes that hold secrets are its owner's alone (0600), whatever the umask."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.store import Store, tokens
from corral_sandbox.local import LocalCorral, corral_config, pool_spec
from corral_sandbox.server import Sandbox


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def permissive_umask() -> Iterator[None]:
    """The umask a careless service manager might leave: without care, files would be world-readable."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def test_a_sqlite_database_and_its_wal_and_shm_files_are_created_0600(tmp_path: Path, permissive_umask: None) -> None:
    store = Store(f"sqlite:///{tmp_path / 'corral.db'}")
    try:
        store.migrate()
        store.run_blocking(tokens.create, "ops", "read")
        with store.engine.connect():  # WAL mode: -wal and -shm exist while a connection is open
            files = sorted(tmp_path.glob("corral.db*"))
            assert [path.name for path in files] == ["corral.db", "corral.db-shm", "corral.db-wal"]
            assert {path.name: oct(mode(path)) for path in files} == {path.name: "0o600" for path in files}
    finally:
        store.close()


def test_an_existing_database_keeps_the_mode_its_owner_chose(tmp_path: Path) -> None:
    path = tmp_path / "corral.db"
    path.touch()
    path.chmod(0o640)
    store = Store(f"sqlite:///{path}")
    store.migrate()
    store.close()
    assert mode(path) == 0o640


def test_the_config_and_sandbox_credentials_written_for_a_local_corral_are_0600(
    sandbox: Sandbox, tmp_path: Path, permissive_umask: None
) -> None:
    config = tmp_path / "corral.yaml"
    config.write_text("")
    config.chmod(0o644)  # rewritten over a world-readable file: the secrets must not inherit its mode
    document = corral_config(sandbox.info, f"sqlite:///{tmp_path / 'c.db'}", {"small": pool_spec(["small"])})
    LocalCorral(sandbox.info, config, document).start().stop()
    assert sandbox.info.webhook_secret in config.read_text()
    assert mode(config) == 0o600
    assert mode(Path(sandbox.info.clouds_yaml)) == 0o600
    assert mode(Path(sandbox.info.private_key_path)) == 0o600
