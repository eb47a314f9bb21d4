"""Failed webhook deliveries corral asked GitHub to redeliver: how often each, shared by every replica."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import Connection, select
from sqlalchemy.dialects import postgresql, sqlite

from corral.store.schema import REDELIVERY_REQUESTS as REQUESTS


def attempts(connection: Connection, guids: Iterable[str]) -> dict[str, int]:
    """How often each of these deliveries was asked for again (absent: never)."""
    wanted = sorted(set(guids))
    if not wanted:
        return {}
    rows = connection.execute(select(REQUESTS.c.guid, REQUESTS.c.attempts).where(REQUESTS.c.guid.in_(wanted)))
    return {guid: count for guid, count in rows}


def asked(connection: Connection, guid: str, *, now: datetime) -> None:
    """One more redelivery of `guid` was asked for (at `now`)."""
    dialect = postgresql if connection.dialect.name == "postgresql" else sqlite
    statement = dialect.insert(REQUESTS).values(guid=guid, attempts=1, asked_at=now)
    connection.execute(
        statement.on_conflict_do_update(
            index_elements=[REQUESTS.c.guid],
            set_={"attempts": REQUESTS.c.attempts + 1, "asked_at": statement.excluded.asked_at},
        )
    )
