"""The database connection, its migrations, and the one path every query takes off the event loop.

Queries are plain functions of a SQLAlchemy `Connection` (in `corral.store.runners`, `.jobs`, ...); each runs
as one transaction. `Store.run` runs one in the database's own threads and awaits it, so no database call
ever blocks the event loop; `Store.run_blocking` runs one in the caller's thread, for the CLI, tests and
benchmarks, and refuses to run on an event loop.

Measured on this project's 2-core machine (one runner transition: a guarded UPDATE ... RETURNING and its
event INSERT in one transaction, 16 at a time): SQLAlchemy Core in one worker thread on SQLite cost 555 us of
corral's CPU per transition against 1,665 us through aiosqlite; on PostgreSQL psycopg in 8 threads cost
1,028 us against 1,089 us with asyncpg and 1,454 us with psycopg's async mode. So: synchronous Core,
offloaded, with no second driver to install. SQLite gets one thread (it has one writer anyway, and one
thread never waits on its own lock); PostgreSQL a few.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, create_engine, event, make_url, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import StaticPool

from corral.clock import SYSTEM_CLOCK, Clock
from corral.executors import Executors, call_blocking, thread_pool
from corral.files import create_private
from corral.metrics import DATABASE_ERRORS
from corral.outages import DependencyHealth, DependencyUnavailable, describe

logger = logging.getLogger("corral.store")

P = ParamSpec("P")
T = TypeVar("T")

MIGRATIONS = Path(__file__).with_name("migrations")
SQLITE_BUSY_TIMEOUT_MS = 30_000
POSTGRES_THREADS = 8
IN_MEMORY = "sqlite://"
"""A SQLite database in memory, gone with the store: `corral simulate`'s, whose history nobody keeps."""
MIGRATION_LOCK_KEY = 0x636F7272616C  # "corral": the advisory lock replicas take to migrate one at a time


class BlockingCallOnEventLoop(RuntimeError):
    """A blocking database call was made on the event loop: use `await Store.run(...)` there."""


class DatabaseUnavailable(DependencyUnavailable):
    """The database cannot be reached now: a connection refused, or lost again on a fresh one (a restart, a
    failover, connections refused). Expected while an outage lasts: the store logs the outage once when it
    begins and once when it ends (`Store.report_outages`), so a caller that meets this tries again later
    and logs no traceback of its own."""

    dependency = "database"


DATABASE_MEANWHILE = (
    "records no webhook (each is answered 503; once it is back, corral asks GitHub to redeliver them, with an "
    "App, and polls for queued jobs), starts and retires no runner, and tries again every pass"
)
"""What corral does while its database is unreachable, as the line that reports the outage says."""


class SchemaTooNew(RuntimeError):
    """The database was migrated by a newer corral than this one: acting on it could undo that one's work."""


class SchemaNotCurrent(RuntimeError):
    """A read-only command found the database's schema other than this corral's newest: it migrates nothing
    (a production database is upgraded by `corral migrate` or the serving corral, when the operator chooses)."""


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def sqlite_file(url: str) -> Path | None:
    """The database file of a SQLite URL, or None for an in-memory or `file:` URI database."""
    database = make_url(url).database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database)


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


IDLE_IN_TRANSACTION_S = 15.0
"""How long PostgreSQL lets one of corral's sessions sit in a transaction between two statements before it ends
the session (`idle_in_transaction_session_timeout`): a replica paused or frozen mid-transaction (SIGSTOP, a VM
migrated, a stalled disk) would otherwise hold its row locks until it wakes, and every other replica's write
to those rows (a pool it took over, say) would wait with it. corral's transactions never wait between
statements for more than a moment; `corral serve` sets this to its lease time, past which the paused replica's
pools are another's anyway. When it wakes, its statement fails on the ended session and runs again on a new
one, where the lease fence refuses its writes."""


def make_engine(url: str, *, idle_in_transaction_s: float = IDLE_IN_TRANSACTION_S) -> Engine:
    if is_sqlite(url):
        path = sqlite_file(url)
        if path is not None and path.parent.is_dir():
            # Before SQLite sees it: SQLite creates a missing file with the umask's mode (often 0644),
            # and gives the -wal and -shm files it makes later the mode of the database file.
            create_private(path)
        in_memory = path is None and make_url(url).database in (None, "", ":memory:")
        # An in-memory database lives as long as its connection: every thread shares the one (StaticPool).
        pool = {"poolclass": StaticPool} if in_memory else {}
        engine = create_engine(url, connect_args={"check_same_thread": False}, **pool)
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    engine = create_engine(url, pool_size=POSTGRES_THREADS + 2, max_overflow=10)
    event.listen(engine, "connect", functools.partial(_postgres_session, idle_in_transaction_s=idle_in_transaction_s))
    return engine


def _postgres_session(dbapi_connection: Any, _record: object, *, idle_in_transaction_s: float) -> None:
    """Session settings for each new PostgreSQL connection (`SET`, not the `options` startup parameter, which
    PgBouncer refuses by default)."""
    with dbapi_connection.cursor() as cursor:
        cursor.execute(f"SET idle_in_transaction_session_timeout = {round(idle_in_transaction_s * 1000)}")
    dbapi_connection.commit()


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _alembic_config() -> AlembicConfig:
    config = AlembicConfig()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


@functools.cache
def head_revision() -> str | None:
    """The newest schema revision this code knows."""
    return ScriptDirectory.from_config(_alembic_config()).get_current_head()


@functools.cache
def known_revisions() -> frozenset[str]:
    """The schema revisions this code knows (its migrations)."""
    return frozenset(script.revision for script in ScriptDirectory.from_config(_alembic_config()).walk_revisions())


def schema_revision(connection: Connection) -> str | None:
    """The database's schema revision now (a newer replica may have migrated it since this one started)."""
    return MigrationContext.configure(connection).get_current_revision()


class Store:
    """An engine, its migrations, and the threads queries run in."""

    def __init__(
        self, url: str, executors: Executors = thread_pool, *, idle_in_transaction_s: float = IDLE_IN_TRANSACTION_S
    ) -> None:
        """`executors` makes the executor queries run in: threads, or inline under `corral simulate`;
        `idle_in_transaction_s`: see `IDLE_IN_TRANSACTION_S` (PostgreSQL)."""
        self.url = url
        self.engine = make_engine(url, idle_in_transaction_s=idle_in_transaction_s)
        self.is_sqlite = is_sqlite(url)
        threads = 1 if self.is_sqlite else POSTGRES_THREADS
        self._threads = executors(threads, "corral-db")
        self._local = threading.local()
        self._connections: list[Connection] = []
        self._connections_lock = threading.Lock()
        self.health: DependencyHealth | None = None
        """Told of every transaction's fate once `report_outages` was called (by `corral serve`)."""

    def report_outages(self, clock: Clock = SYSTEM_CLOCK) -> None:
        """Log each database outage once when it begins and once when it ends (and keep its metrics): for a
        long-running corral. A command run once has its error to show instead. `clock` dates and times them."""
        self.health = DependencyHealth("database", DATABASE_MEANWHILE, clock=clock)

    def migrate(self) -> None:
        """Bring the schema to the newest migration; safe to run on every start, by any number of replicas
        at once: on PostgreSQL they take turns under an advisory lock held for the migration's transaction,
        and the ones after the first find nothing to do. A database migrated past what this code knows is
        refused (`SchemaTooNew`) rather than touched."""
        config = _alembic_config()
        known = known_revisions()
        with self.engine.begin() as connection:
            if not self.is_sqlite:
                connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
            current = MigrationContext.configure(connection).get_current_revision()
            if current is not None and current not in known:
                raise SchemaTooNew(
                    f"the database's schema is at revision {current!r}, newer than this corral knows "
                    f"(up to {max(known)!r}): a newer corral migrated it. Run that version (or newer) here; "
                    "this one refuses to act on a schema it does not understand."
                )
            config.attributes["connection"] = connection
            command.upgrade(config, "head")

    def check_schema(self) -> None:
        """Refuse, without touching it, a schema other than this code's newest: `SchemaTooNew` if a newer
        corral migrated it, `SchemaNotCurrent` if it is older (or empty). For commands that only read."""
        with self.engine.connect() as connection:
            current = schema_revision(connection)
        head = head_revision()
        if current == head:
            return
        if current is not None and current not in known_revisions():
            raise SchemaTooNew(
                f"the database's schema is at revision {current!r}, newer than this corral knows (up to {head!r}): "
                "run the corral that migrated it"
            )
        raise SchemaNotCurrent(
            f"the database's schema is at revision {current!r}, older than this corral's {head!r}; this command "
            "only reads and changes nothing: run `corral migrate` first, or use the corral version that serves it"
        )

    def _connection(self) -> Connection:
        """This thread's connection, opened once: checking one out of the pool for every transaction (and,
        on PostgreSQL, pinging it) cost more than most of the transactions themselves."""
        connection: Connection | None = getattr(self._local, "connection", None)
        if connection is None or connection.closed or connection.invalidated:
            connection = self.engine.connect()
            self._local.connection = connection
            with self._connections_lock:
                self._connections.append(connection)
        return connection

    def _transaction(self, query: Callable[Concatenate[Connection, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
        """One transaction; retried once on a fresh connection if the server dropped the old one (a
        PostgreSQL restart or failover, or an administrator ending the session). A database that cannot be
        reached raises `DatabaseUnavailable`; any other error is raised as it is."""
        began_at = self.health.monotonic() if self.health is not None else 0.0
        for attempt in (1, 2):
            connection = self._connect(began_at)
            try:
                with connection.begin():
                    result = query(connection, *args, **kwargs)
            except DBAPIError as exc:
                if not exc.connection_invalidated:
                    raise
                self._local.connection = None
                if attempt == 2:
                    raise self._unavailable(exc, began_at) from exc
                # No error yet, nor a line of its own: the retry below is what happens next, and if it fails
                # too, the outage is logged once.
                logger.debug("database connection lost (%s); retrying on a new one", type(exc.orig).__name__)
                continue
            if self.health is not None:
                self.health.succeeded()
            return result
        raise AssertionError("unreachable")

    def _connect(self, began_at: float) -> Connection:
        """This thread's connection, or `DatabaseUnavailable` when the server refuses a new one."""
        try:
            return self._connection()
        except DBAPIError as exc:
            raise self._unavailable(exc, began_at) from exc

    def _unavailable(self, exc: DBAPIError, began_at: float) -> DatabaseUnavailable:
        """Note an outage (logged once, when it begins) and the exception that says so to the caller."""
        cause = exc.orig if isinstance(exc.orig, BaseException) else exc
        DATABASE_ERRORS.labels("unavailable").inc()
        if self.health is not None:
            self.health.failed(cause, began_at)
        return DatabaseUnavailable(f"the database is unreachable ({describe(cause)})")

    async def run(self, query: Callable[Concatenate[Connection, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run `query(connection, ...)` as one transaction in the database's threads."""
        return await call_blocking(self._threads, functools.partial(self._transaction, query, *args, **kwargs))

    def run_blocking(self, query: Callable[Concatenate[Connection, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run `query` in this thread: for the CLI, tests and benchmarks, never on an event loop."""
        if _on_event_loop():
            raise BlockingCallOnEventLoop(f"{query.__name__}: a blocking database call on the event loop")
        return self._transaction(query, *args, **kwargs)

    def close(self) -> None:
        self._threads.shutdown(wait=True)
        with self._connections_lock:
            for connection in self._connections:
                connection.close()
            self._connections.clear()
        self.engine.dispose()
