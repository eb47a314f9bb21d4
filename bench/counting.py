"""Counting the work corral does: SQL statements it sends its database, and calls it makes to each far end.

A count does not depend on the machine, its load or the clock, so a test can assert one exactly and a change
that adds a statement per job fails it anywhere (`tests/test_costs.py`); `bench/costs.py` prints the same
counts. Statements are counted where SQLAlchemy hands them to the driver (`before_cursor_execute`): an
`executemany` of 500 rows is one statement, as it is one round trip's worth of work to plan; the SQLite
pragmas run on connect through a raw cursor are not counted. Calls are the sandbox's own count per side and
endpoint (`GET /_sandbox/stats`), so they include every retry and every page.
"""

from __future__ import annotations

import functools
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
from sqlalchemy import Engine, event


class StatementCounter:
    """Statements sent through `engine` while counting, by kind (`SELECT jobs`, `UPDATE runners`, ...).

    The store runs queries in threads of its own, hence the lock. `engine` may be the `Engine` class itself, to
    count the statements of an engine made inside the code under test (a simulation's own store, which runs its
    queries inline): then only those sent from the thread that counts, so that whatever else the process still
    runs (another test's corral, in the same worker) is not counted with them."""

    def __init__(self, engine: Engine | type[Engine]) -> None:
        self._engine = engine
        self._thread: int | None = None
        """The thread that counts, when counting on the class."""
        self._lock = threading.Lock()
        self.kinds: Counter[str] = Counter()
        self.texts: list[str] = []

    @property
    def total(self) -> int:
        return sum(self.kinds.values())

    def _heard(self, _conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if self._thread is not None and threading.get_ident() != self._thread:
            return
        with self._lock:
            self.kinds[statement_kind(statement)] += 1
            self.texts.append(statement)

    @contextmanager
    def counting(self) -> Iterator[StatementCounter]:
        """Count from a clean slate until the block ends."""
        with self._lock:
            self.kinds.clear()
            self.texts.clear()
        self._thread = threading.get_ident() if isinstance(self._engine, type) else None
        event.listen(self._engine, "before_cursor_execute", self._heard)
        try:
            yield self
        finally:
            event.remove(self._engine, "before_cursor_execute", self._heard)


@functools.lru_cache(maxsize=4096)
def statement_kind(statement: str) -> str:
    """`VERB table`: the verb and the first table it names, enough to tell one statement of a pass from
    another in an assertion's message (`SELECT runners`, `INSERT deliveries`, `UPDATE jobs`)."""
    words = statement.split()
    verb = words[0].upper() if words else "?"
    markers = {"SELECT": "FROM", "DELETE": "FROM", "INSERT": "INTO", "UPDATE": None}
    marker = markers.get(verb, "")
    if marker is None:
        return f"{verb} {words[1].strip(chr(34))}" if len(words) > 1 else verb
    if marker:
        upper = [word.upper() for word in words]
        if marker in upper:
            index = upper.index(marker) + 1
            if index < len(words):
                return f"{verb} {words[index].strip(chr(34)).rstrip(',')}"
    return verb


def sandbox_calls(control: httpx.Client) -> dict[str, Counter[str]]:
    """The sandbox's calls so far, per side (`openstack`, `github`) and endpoint (`GET /servers/detail`)."""
    api = control.get("/stats").raise_for_status().json()["api_calls"]
    return {side: Counter(api.get(side, {})) for side in ("openstack", "github")}


def calls_since(control: httpx.Client, before: dict[str, Counter[str]]) -> dict[str, dict[str, int]]:
    """Calls per side and endpoint made since `before` (endpoints with none left out)."""
    now = sandbox_calls(control)
    return {side: dict(sorted((now[side] - before[side]).items())) for side in now}
