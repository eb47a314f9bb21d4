"""A pool's live runners kept between its passes by the replica acting for it, so that a pass reads in full
only the runners that changed since the pass before.

A pass used to read and build every runner of its pool, with the job naming each: at 10,000 runners
(`bench/reconcile.py`) that was two fifths of a pass's CPU, nearly all of it spent on rows unchanged since the
last pass. A runner's row is fixed by its state and its message: every write to it is a move to another
state (`runners.apply`) or a note that sets its message (`runners.note`), and runner states have no cycles
(`model.RunnerState.check_transition`), so a runner never enters a state twice. With the columns of the jobs
naming it, those make the row's fingerprint, read for every runner in one narrow statement (no column of it
parsed); the runners whose fingerprint is not the one kept are read in full, by id. Whoever wrote a change
(this replica, another one, an operator, an older release), the fingerprint shows it: nothing here relies on
being told of a write.
"""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import Connection, Select, Text, cast

from corral.model import RunnerState
from corral.store import runners
from corral.store.runners import RunnerAndJob
from corral.store.schema import JOBS, RUNNERS

Fingerprint = tuple[Any, ...]
"""A runner's state and message and the columns of the jobs naming it: equal fingerprints, equal rows."""
READ_BY_ID = 500
"""Changed runners read in full per statement (each id is a bound parameter)."""


class KnownRunners:
    """One pool's runners as last read, each with its fingerprint then. Only the pool's worker uses it, one pass
    at a time. Holds the pool's live runners at most: those gone by a read leave it."""

    def __init__(self) -> None:
        self.rows: dict[str, tuple[Fingerprint, RunnerAndJob]] = {}
        self.deleting: dict[str, tuple[Fingerprint, RunnerAndJob]] = {}
        """The rows of runners being deleted, as the last read of them found them: a read without them keeps
        these as they were. Apart, so that such a read copies them rather than picks them out of every row
        (runners deleted since the last look wait for the next one, a look's interval of them when busy)."""


@functools.cache
def _fingerprints(deleting: bool) -> Select[Any]:
    columns = (
        RUNNERS.c.id,
        RUNNERS.c.state,
        RUNNERS.c.message,
        JOBS.c.id,
        JOBS.c.status,
        JOBS.c.runners_started,
        cast(JOBS.c.started_at, Text),  # compared, never parsed
    )
    return runners.of_pool_with_jobs(columns, deleting)


def live_of_pool(
    connection: Connection, pool: str, known: KnownRunners, *, deleting: bool = True
) -> list[RunnerAndJob]:
    """What `runners.live_of_pool` answers, the same objects as the last read's for the runners that did not
    change since: one statement when none did, and one more per `READ_BY_ID` runners that did."""
    prints: dict[str, Fingerprint] = {}
    for line in connection.execute(_fingerprints(deleting), {"pool": pool}):
        runner_id, fingerprint = line[0], tuple(line[1:])
        earlier = prints.get(runner_id)
        # Two jobs naming one runner (a redelivery's race): both are part of what it is.
        prints[runner_id] = fingerprint if earlier is None else earlier + fingerprint
    kept = known.rows
    changed = [runner_id for runner_id, fingerprint in prints.items() if kept.get(runner_id, (None,))[0] != fingerprint]
    fresh: dict[str, RunnerAndJob] = {}
    for start in range(0, len(changed), READ_BY_ID):
        chunk = changed[start : start + READ_BY_ID]
        fresh.update(
            (read.runner.id, read) for read in runners.live_of_pool(connection, pool, deleting=deleting, ids=chunk)
        )
    # A read without the runners being deleted keeps those it knew: the next full read compares them.
    rows = {} if deleting else dict(known.deleting)
    being_deleted: dict[str, tuple[Fingerprint, RunnerAndJob]] = {} if deleting else known.deleting
    read_again = set(changed)
    found: list[RunnerAndJob] = []
    for runner_id, fingerprint in prints.items():
        row = fresh.get(runner_id) if runner_id in read_again else kept[runner_id][1]
        if row is None:
            continue  # it left the states asked for (or the table) between the two statements
        rows[runner_id] = (fingerprint, row)
        if deleting and row.runner.state is RunnerState.DELETING:
            being_deleted[runner_id] = (fingerprint, row)
        found.append(row)
    known.rows = rows
    known.deleting = being_deleted
    return found
