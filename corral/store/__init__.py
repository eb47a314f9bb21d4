"""The durable record: runners (with their state history), jobs, webhook deliveries and pool status.

SQLite by default, PostgreSQL for several replicas; the schema is owned by Alembic migrations.
"""

from corral.store.schema import Base, Delivery, Job, PoolStatus, Runner, RunnerEvent
from corral.store.store import StaleRunner, Store

__all__ = ["Base", "Delivery", "Job", "PoolStatus", "Runner", "RunnerEvent", "StaleRunner", "Store"]
