"""The durable record: runners (with their state history), jobs, webhook deliveries, pool status, API tokens.

SQLite by default, PostgreSQL for several replicas; the schema is owned by Alembic migrations. Queries are
functions of a connection grouped by subject (`runners`, `jobs`, `pools`, `tokens`, `retention`); `Store.run`
runs one as a transaction off the event loop, `Store.run_blocking` in the calling thread.
"""

from corral.store import jobs, leases, pools, retention, runners, tokens
from corral.store.database import (
    IN_MEMORY,
    BlockingCallOnEventLoop,
    DatabaseUnavailable,
    SchemaNotCurrent,
    SchemaTooNew,
    Store,
)
from corral.store.intake import Intake
from corral.store.serve_lock import AnotherCorralServing, ServeLock

__all__ = [
    "IN_MEMORY",
    "AnotherCorralServing",
    "BlockingCallOnEventLoop",
    "DatabaseUnavailable",
    "Intake",
    "SchemaNotCurrent",
    "SchemaTooNew",
    "ServeLock",
    "Store",
    "jobs",
    "leases",
    "pools",
    "retention",
    "runners",
    "tokens",
]
