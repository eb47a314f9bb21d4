"""The operator facade: everything the API (and through it the CLI) and the service ask of a running engine,
and nothing else. corral/api imports this module and no other of `corral.engine` (an import-linter
contract, `tests/test_layers.py`), so the engine's parts can change without the API noticing.

It reads: the running config and generation, each pool's readiness, status, rollouts and scale-set session,
which replica holds which pool, a job's story. It acts: drain and undrain, delete a runner, look again, adopt a
reloaded config, ask the other replicas to reload. The types the API answers with are re-exported here.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from corral.cloud.quota import Headroom, ServerCost
from corral.config import CorralConfig
from corral.engine import messages
from corral.engine.caches import CacheSummary
from corral.engine.coordinator import Engine
from corral.engine.deletes import DeleteFailed, DeleteOutcome
from corral.engine.observe import Observation
from corral.engine.rollouts import Rollout
from corral.engine.scalesets import ScaleSetStatus, SessionState
from corral.engine.status import PoolSnapshot
from corral.engine.timeline import JobStory, job_story
from corral.engine.workers import KeyStopped
from corral.store import pools
from corral.store.leases import LeaseRow, ReplicaRow

__all__ = [
    "CacheSummary",
    "DeleteFailed",
    "DeleteOutcome",
    "JobStory",
    "KeyStopped",
    "Operator",
    "PoolSnapshot",
    "Rollout",
    "ScaleSetStatus",
    "SessionState",
]


class Operator:
    """What operators see of one engine and do to it."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    # -- reads ------------------------------------------------------------------------------------

    @property
    def config(self) -> CorralConfig:
        """The running configuration (a reload swaps it whole)."""
        return self._engine.config

    @property
    def generation(self) -> int:
        return self._engine.generation

    @property
    def passes(self) -> int:
        """Looks at both far ends completed (each followed by a pass of every pool)."""
        return self._engine.passes

    @property
    def drained(self) -> set[str]:
        return self._engine.drained

    @property
    def latest(self) -> Observation | None:
        """The newest look at both far ends (None before the first)."""
        return self._engine.observer.latest

    @property
    def headroom(self) -> Headroom | None:
        """The first cloud's quota headroom as of the newest look (None: none yet, or no limit known)."""
        latest = self.latest
        return latest.headroom if latest is not None else None

    def pool_names(self) -> list[str]:
        """Every pool: configured, or removed with runners left (a worker here, on SQLite)."""
        return sorted(set(self.config.pools) | self._engine.workers.keys)

    def holds(self, name: str) -> bool:
        """Whether this replica acts for the pool (always, on SQLite)."""
        return self._engine.leases.holds(name)

    def pool_ready(self, name: str) -> tuple[bool, str | None]:
        """The pool's ready condition, as this replica (its holder) judges it, with the reason."""
        return self._engine.readiness.pool_ready(name)

    def snapshot(self, name: str) -> PoolSnapshot:
        """The pool as its last pass here left it."""
        return self._engine.snapshot(name)

    def applied_generation(self, name: str) -> int:
        """The generation the pool's last pass here applied (0: no pass here yet)."""
        return self.generation if name in self._engine.status.snapshots else 0

    def schedule_now(self) -> datetime:
        """The time warm-runner schedules are read at (the scaler's clock)."""
        return self._engine.scaler.clock()

    def scale_set_status(self, name: str) -> ScaleSetStatus | None:
        """A scale-set pool's listener held here (None: not a scale-set pool, or not held here)."""
        return self._engine.scalesets.status(name)

    def server_cost(self, name: str) -> ServerCost | None:
        """What one of the pool's servers takes of the quota, as its check found (None: not known yet)."""
        return self._engine.checker.cost(name)

    def rollouts_of(self, name: str) -> dict[str, Rollout]:
        """The image rollouts of a pool this replica holds, by placement key (none for a pool held elsewhere)."""
        if not self.holds(name):
            return {}
        return self._engine.rollouts.rollouts_of(name)

    async def holders(self) -> dict[str, str]:
        """Pool -> the replica acting for it (on SQLite, this one for every pool)."""
        return await self._engine.membership.holders()

    async def cache_volumes(self, config: CorralConfig) -> dict[str, CacheSummary]:
        """The pools' cache volumes by state, and how their runners started (from the database)."""
        return await self._engine.caches.summary(config)

    async def membership(self) -> tuple[list[ReplicaRow], list[LeaseRow]]:
        """The replicas on this database and the leases (on SQLite: this process, holding every pool)."""
        return await self._engine.membership.membership()

    async def remote_snapshots(self, names: Iterable[str]) -> dict[str, PoolSnapshot]:
        """Pools another replica holds, as the database has them."""
        return await self._engine.membership.remote_snapshots(names)

    async def job_story(self, job_id: int, *, scale_set: bool = False) -> JobStory | None:
        """A job's timeline and, while it waits, what holds it (None: no such job)."""
        return await job_story(self._engine, job_id, scale_set=scale_set, clock=self._engine.clock)

    # -- actions ----------------------------------------------------------------------------------

    async def set_drained(self, name: str, drained: bool) -> None:
        """Drain: no new runners and idle ones retired (busy ones finish); undrain to resume."""
        engine = self._engine
        held = engine.leases.holds(name)
        # Held elsewhere: the holder is told in the transaction that records the drain, committed before the
        # operator is answered, so it has the drain before any wake sent after (and never one not recorded).
        notices = () if held else (messages.DRAIN_CHANGED, messages.drain_message(name, drained))
        await engine.store.run(pools.set_drained, name, drained, now=engine.clock.now(), notices=notices)
        engine.running.set_drained(name, drained)
        if held:
            await engine.workers.run_now(name)

    async def delete_runner(self, runner_id: str) -> DeleteOutcome:
        """An operator's delete of one runner (`RunnerDeletes.delete_runner`): refused while it runs a job;
        raises `KeyStopped` when this corral stops reconciling its pool meanwhile, `DeleteFailed` when the
        replica holding it took it on and failed."""
        return await self._engine.deletes.delete_runner(runner_id)

    def look_again(self) -> None:
        """A fresh look at both far ends, and every pool's pass after it, on every replica."""
        self._engine.wake()

    async def apply_config(self, config: CorralConfig) -> None:
        """Adopt a reloaded configuration whole (`Reconfigurer.apply`: raises, adopting nothing, when it
        cannot be)."""
        await self._engine.reconfigure.apply(config)

    async def ask_replicas_to_reload(self) -> dict[str, str]:
        """Ask every other live replica to reload its own config file: replica -> `reloaded`, `refused` or
        `no answer`."""
        return await self._engine.bus.ask_replicas_to_reload()
