"""One pool's pass: judge its runners, start the deletes due, scale; the work each pool's worker runs.

`reconcile_pool` is idempotent and level-triggered: it reads the pool's runners (with the job each one took,
from the job table), the newest observation and the queued jobs, and acts on the difference. Its only memory
between passes is what is under way (the supervisor's actions), backoffs, how many runners were being
deleted as of the last look (read again only on the pass after a new look), and the pool's runners as last
read, which spare re-reading in full those that did not change (`store.known_runners`: it tells which did
from the database itself, so it is never out of date).
"""

from __future__ import annotations

import logging
import time
from collections import Counter, defaultdict

from corral.engine.cleaner import Cleaner
from corral.engine.judge import RunnerJudge
from corral.engine.leases import LeaseKeeper
from corral.engine.observe import Observer
from corral.engine.running import Running
from corral.engine.scaler import Scaler
from corral.engine.scalesets import ScaleSetIntake
from corral.engine.status import PoolSnapshot, StatusPublisher
from corral.engine.supervisor import ActionKind, Supervisor
from corral.engine.workers import KeyedWorkers
from corral.metrics import RECONCILE_SECONDS
from corral.model import Reason, RunnerState
from corral.store import Store, known_runners
from corral.store.known_runners import KnownRunners
from corral.store.leases import LeaseLost

logger = logging.getLogger("corral.engine")


class PoolReconciler:
    """Runs one pool's pass; `KeyedWorkers` calls it, never two of one pool at once."""

    def __init__(
        self,
        running: Running,
        store: Store,
        *,
        observer: Observer,
        judge: RunnerJudge,
        scaler: Scaler,
        cleaner: Cleaner,
        supervisor: Supervisor,
        status: StatusPublisher,
        workers: KeyedWorkers,
        leases: LeaseKeeper,
        scalesets: ScaleSetIntake,
    ) -> None:
        self.running = running
        self.store = store
        self.observer = observer
        self.judge = judge
        self.scaler = scaler
        self.cleaner = cleaner
        self.supervisor = supervisor
        self.status = status
        self.workers = workers
        self.leases = leases
        self.scalesets = scalesets
        self._looked_at: dict[str, int] = {}
        """The observation each pool's last full pass (deleting runners included) judged against."""
        self._deleting: dict[str, int] = {}
        """Runners being deleted per pool, as of that pass."""
        self._known: defaultdict[str, KnownRunners] = defaultdict(KnownRunners)
        """Each pool's runners as its last pass read them: a pass reads in full only those that changed."""

    async def reconcile_pool(self, name: str) -> float | None:
        """Judge the pool's runners, clean up, scale; returns when to run again (None: at the next wake)."""
        started = time.perf_counter()
        try:
            return await self._reconcile_pool(name)
        except LeaseLost:
            # The database refused a write: the pool's lease moved on (this replica was paused or cut off
            # past it). Not an error: stop acting for the pool; the lease keeper takes it back if it falls here.
            logger.warning("pool %s: lease lost (a write was refused); another replica acts for it now", name)
            self.leases.held.pop(name, None)
            self._known.pop(name, None)
            self.workers.ensure(set(self.workers.keys) - {name})
            self.scalesets.ensure(set(self.scalesets.listeners) - {name})
            return None
        finally:
            RECONCILE_SECONDS.labels(name).observe(time.perf_counter() - started)

    async def _reconcile_pool(self, name: str) -> float | None:
        pool = self.running.config.pools.get(name)
        observation = self.observer.latest
        # Runners being deleted only change with a new look at the far ends: read them on the pass after one.
        generation = observation.generation if observation is not None else 0
        full = self._looked_at.get(name) != generation
        rows = await self.store.run(known_runners.live_of_pool, name, self._known[name], deleting=full)
        if not rows and pool is None and full:
            await self.status.forget(name)
            self._looked_at.pop(name, None)
            self._known.pop(name, None)
            self.judge.forget(name)
            self.workers.ensure(set(self.workers.keys) - {name})  # this worker ends after this pass
            return None
        current = await self.judge.judge(rows, observation)
        for runner in current:
            deleting = runner.state is RunnerState.DELETING and not self.supervisor.busy(runner.id)
            if deleting and self.cleaner.due(runner, observation):
                self.supervisor.start(
                    ActionKind.DELETE,
                    runner.id,
                    self.cleaner.delete(runner, observation),
                    on_error=self.cleaner.on_error(runner),
                    group=name,
                )
        states = Counter(runner.state for runner in current)
        if full:
            self._looked_at[name] = generation
            self._deleting[name] = states[RunnerState.DELETING]
        else:
            states[RunnerState.DELETING] += self._deleting.get(name, 0)
        if pool is None:
            self.scaler.warmth.forget(name)
            self.scaler.retire(current, [RunnerState.IDLE, RunnerState.BOOTING], Reason.POOL_REMOVED, None)
            snapshot = PoolSnapshot(name, states, reason="removed from the configuration", removed=True)
            await self.status.publish(snapshot, self.running.generation)
            return None
        return await self.scaler.scale(name, current, states, deleting_known=full)
