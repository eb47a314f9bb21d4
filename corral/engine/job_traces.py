"""Sending each completed job's trace (`corral.tracing`), from the replica that keeps house.

Only when the environment asks for traces: otherwise the engine starts no loop for it. Every `EVERY_S`, the jobs
completed since the last round (GitHub's completion time, looked at with `OVERLAP` for webhooks that come late)
are read with their runners and events, and each one not sent yet becomes a trace. A job is sent once by this
replica; one that completed while no replica kept house, or before this one started, is not sent.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from corral.clock import Clock
from corral.engine.leases import HOUSEKEEPING, LeaseKeeper
from corral.job_spans import job_trace
from corral.store import Store, stories
from corral.tracing import JobTracing

logger = logging.getLogger("corral.tracing")

EVERY_S = 5.0
OVERLAP = timedelta(minutes=2)
"""How far before the newest completion seen the next round looks again: a `completed` webhook that arrives
late still gets its trace."""
PER_PAGE = 500
REMEMBERED = 20_000
"""Jobs remembered as sent (the oldest forgotten first): more than `OVERLAP` holds at thousands of jobs a
minute."""


class JobTraces:
    def __init__(self, store: Store, tracing: JobTracing, leases: LeaseKeeper, clock: Clock) -> None:
        self._store = store
        self._tracing = tracing
        self._leases = leases
        self._since = clock.now()
        self._sent: dict[int, None] = {}

    async def send_completed(self) -> None:
        """One round: a trace for each job completed since the last that was not sent yet."""
        if not self._leases.holds(HOUSEKEEPING):
            return
        after = (self._since - OVERLAP, 0)
        while True:
            records = await self._store.run(stories.completed_since, after, limit=PER_PAGE)
            for record in records:
                completed = record.job.completed_at
                assert completed is not None  # the query's own condition
                after, self._since = (completed, record.job.id), max(self._since, completed)
                if record.job.id not in self._sent:
                    trace = job_trace(record.job, record.runners, record.events)
                    if trace is not None:
                        self._tracing.send(trace)
                    self._sent[record.job.id] = None
            if len(records) < PER_PAGE:
                break
        while len(self._sent) > REMEMBERED:
            self._sent.pop(next(iter(self._sent)))

    def close(self) -> None:
        """Export what is batched (the engine's stop)."""
        try:
            self._tracing.shutdown()
        except Exception as exc:  # an exporter that cannot reach its collector must not stop corral stopping
            logger.warning("the last job traces were not exported: %s", exc)
