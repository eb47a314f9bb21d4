"""The database half of `corral doctor`: reachable, and migrated to the revision this corral needs.

The doctor only reads: a SQLite file that does not exist is reported, not created (corral's own engine
would create it), and a schema behind is reported with the command that upgrades it, never upgraded here.
PostgreSQL is given a connect timeout and a statement timeout, so a host that drops packets or a server
that hangs gives a failure in seconds.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, make_url
from sqlalchemy.pool import NullPool

from corral.config import CorralConfig
from corral.doctor.report import Section
from corral.store.database import MIGRATIONS, is_sqlite, sqlite_file


def _describe(url: str) -> str:
    """The URL without its password, for the report."""
    return make_url(url).render_as_string(hide_password=True)


def _engine(url: str, timeout_s: float) -> Engine:
    if is_sqlite(url):
        path = sqlite_file(url)
        assert path is not None

        def read_only() -> sqlite3.Connection:
            return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=timeout_s)

        return create_engine("sqlite://", creator=read_only, poolclass=NullPool)
    milliseconds = int(timeout_s * 1000)
    return create_engine(
        url,
        poolclass=NullPool,
        connect_args={"connect_timeout": max(1, int(timeout_s)), "options": f"-c statement_timeout={milliseconds}"},
    )


def _heads() -> tuple[set[str], ScriptDirectory]:
    scripts = ScriptDirectory(str(MIGRATIONS))
    return set(scripts.get_heads()), scripts


def check_database(config: CorralConfig, section: Section, config_path: Path, timeout_s: float) -> None:
    url = config.database_url
    shown = _describe(url)
    migrate = f"run `corral migrate --config {config_path}` (corral serve also migrates when it starts)"
    if is_sqlite(url):
        path = sqlite_file(url)
        if path is None or not path.exists():
            section.failed(
                "database connection",
                f"{shown}: the file {path} does not exist",
                f"{migrate}, or fix database_url if it names the wrong file",
            )
            section.skipped("database schema", "the database could not be opened")
            return
    engine = _engine(url, timeout_s)
    try:
        try:
            connection = engine.connect()
        except Exception as exc:
            reason = getattr(exc, "orig", None) or exc
            section.failed(
                "database connection",
                f"{shown}: cannot connect ({type(reason).__name__}: {str(reason).strip().splitlines()[0][:300]})",
                "check that the database server runs and accepts connections from here, and the host, port, "
                "user and password in database_url",
            )
            section.skipped("database schema", "the database could not be reached")
            return
        with connection:
            section.passed("database connection", f"{shown}: connected")
            current = set(MigrationContext.configure(connection).get_current_heads())
        heads, scripts = _heads()
        if current == heads:
            section.passed("database schema", f"at revision {', '.join(sorted(heads))}, the newest this corral has")
        elif not current:
            section.failed("database schema", f"{shown} has no corral schema (never migrated)", migrate)
        elif current - {script.revision for script in scripts.walk_revisions()}:
            section.failed(
                "database schema",
                f"at revision {', '.join(sorted(current))}, which this corral does not know (a newer corral "
                "migrated it)",
                "run the same corral version that migrated it, or upgrade this one",
            )
        else:
            section.failed(
                "database schema",
                f"at revision {', '.join(sorted(current))}; this corral needs {', '.join(sorted(heads))}",
                migrate,
            )
    finally:
        engine.dispose()
