"""Everything beside the pools' passes: the look at both far ends and what follows it (orphaned servers and
registrations deleted, removed clouds left, every pool woken), the pool checks that are due, job upkeep
(stale and lost jobs) and the pruning of history.

Orphans of a pool are its holder's to delete; job upkeep, pruning and the orphans of pools no replica wants
are the work of the replica holding the housekeeping lease (on SQLite: this one).
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Executor
from datetime import timedelta

from corral.clock import Clock
from corral.cloud.clouds import CloudSet
from corral.config import Placement
from corral.engine.backoff import LogOnce
from corral.engine.caches import CacheVolumes
from corral.engine.checks import PoolChecker
from corral.engine.cleaner import Cleaner
from corral.engine.creator import server_spec
from corral.engine.jobs import JobTracker
from corral.engine.leases import HOUSEKEEPING, LeaseKeeper
from corral.engine.membership import Membership
from corral.engine.observe import Observation, Outages, observe
from corral.engine.quota import QuotaBudget
from corral.engine.running import Running
from corral.engine.supervisor import ActionKind, Supervisor
from corral.engine.workers import KeyedWorkers
from corral.github.client import GitHubClient
from corral.metrics import JOBS, publish_headroom
from corral.model import JobState
from corral.store import Store, jobs, retention, runners

CACHE_KEEPER = "cache-volumes"
"""The supervisor's key of the cache keeper's round: one at a time."""
CHECK_LOOP_LONGEST_S = 60.0
"""The longest the pool-check loop sleeps with nothing due (a guard: what falls due sooner wakes it)."""

logger = logging.getLogger("corral.engine")


class Housekeeper:
    def __init__(
        self,
        running: Running,
        store: Store,
        cloud: CloudSet,
        github: GitHubClient,
        *,
        leases: LeaseKeeper,
        membership: Membership,
        workers: KeyedWorkers,
        supervisor: Supervisor,
        cleaner: Cleaner,
        checker: PoolChecker,
        jobs: JobTracker,
        caches: CacheVolumes,
        quotas: dict[str, QuotaBudget],
        log_once: LogOnce,
        cloud_threads: Executor,
        clock: Clock,
        stopping: asyncio.Event,
    ) -> None:
        self.running = running
        self.store = store
        self.cloud = cloud
        self.github = github
        self.leases = leases
        self.membership = membership
        self.workers = workers
        self.supervisor = supervisor
        self.cleaner = cleaner
        self.checker = checker
        self.jobs = jobs
        self.caches = caches
        self.quotas = quotas
        self.log_once = log_once
        self.cloud_threads = cloud_threads
        self.clock = clock
        self.stopping = stopping
        self.outages = Outages(clock)
        """The clouds' and GitHub's outages, as the looks find them (logged once each way)."""
        self.ask_github = asyncio.Event()
        """Set when a job's fate became uncertain (its runner took a job corral cannot name): ask GitHub soon."""
        self.passes = 0
        """Looks at both far ends completed (each followed by a pass of every pool)."""

    def ask_github_in(self, after_s: float) -> None:
        """Run job upkeep (which asks GitHub about uncertain jobs) in `after_s` seconds."""
        asyncio.get_running_loop().call_later(after_s, self.ask_github.set)

    # -- the look at both far ends ----------------------------------------------------------------

    async def look(self, generation: int) -> Observation:
        scopes = {pool.scope.key for pool in self.running.config.pools.values()}
        scopes |= set(await self.store.run(runners.live_scopes))
        began, began_wall = self.clock.monotonic(), self.clock.now()
        observation = await observe(
            generation,
            self.cloud,
            self.github,
            scopes,
            log_once=self.log_once,
            executor=self.cloud_threads,
            volumes=self.running.config.uses_volumes(),
            outages=self.outages,
            clock=self.clock,
        )
        for name, budget in self.quotas.items():
            budget.refresh(observation.headrooms.get(name), began, began_wall)
        return observation

    async def observed(self, observation: Observation) -> None:
        """After each look: every pool is judged against it, and servers nobody owns are deleted."""
        self.passes += 1
        if self.leases.enabled:
            # An operator's drain on another replica comes by NOTIFY, which a lost connection can miss; other
            # replicas' quota waits come only this way.
            await self.membership.read_pool_statuses()
        await self.membership.sync_workers()
        self.workers.wake_all()
        await self._delete_orphan_registrations(observation)
        await self._forget_empty_clouds(observation)
        self._keep_cache_volumes(observation)
        publish_headroom(observation.headrooms)
        if observation.servers is None:
            return
        live = await self.store.run(runners.live_ids, list(observation.servers))
        for runner_id, server in observation.servers.items():
            if not self._cleans_up_after(server.pool):
                continue
            if runner_id not in live and not self.supervisor.busy(runner_id):
                self.supervisor.start(ActionKind.ORPHAN, f"orphan:{server.id}", self.cleaner.delete_orphan(server))
        counts = await self.store.run(jobs.counts)
        for status in JobState:
            JOBS.labels(status.value).set(counts.get(status.value, 0))

    async def _delete_orphan_registrations(self, observation: Observation) -> None:
        """Registrations GitHub lists for runners corral has already deleted are deleted again. Only names of
        runners in corral's own table count: another manager's runners in the same organisation are not
        corral's to judge.

        Only offline ones are asked about: a deleted runner's server is gone, so its registration is offline
        (or soon is, and a later look finds it); an online registration is a runner at work. Most of a busy
        pool's registrations are online, and asking about them all cost the store a query of every name at
        every look (measured under `corral simulate`: a seventh of the engine's time over four days)."""
        prefix = f"{self.running.config.name_prefix}-"
        listed = {
            registration.name: (scope, registration)
            for scope, by_name in observation.registrations.items()
            for registration in by_name.values()
            if registration.name.startswith(prefix) and not registration.online
        }
        if not listed:
            return
        for name, runner in (await self.store.run(runners.deleted_named, list(listed))).items():
            key = f"orphan-registration:{runner.id}"
            if self._cleans_up_after(runner.pool) and not self.supervisor.busy(key):
                scope, registration = listed[name]
                self.supervisor.start(
                    ActionKind.ORPHAN, key, self.cleaner.delete_orphan_registration(runner, scope, registration.id)
                )

    def _keep_cache_volumes(self, observation: Observation) -> None:
        """The pools' cache volumes are joined with Cinder's after each look, by the housekeeping replica (the
        store's claims keep the pools' holders, which take volumes, and it apart), with the servers the look
        listed in each cloud."""
        config = self.running.config
        if not self.leases.holds(HOUSEKEEPING) or self.supervisor.busy(CACHE_KEEPER) or self.caches.idle(config):
            return
        servers: dict[str, set[str]] = {cloud: set() for cloud in observation.listed}
        for server in (observation.servers or {}).values():
            servers.setdefault(server.cloud, set()).add(server.id)
        self.supervisor.start(ActionKind.CACHE_VOLUMES, CACHE_KEEPER, self.caches.keep(config, servers))

    def _cleans_up_after(self, pool: str) -> bool:
        """Whether this replica deletes a server of `pool` nobody owns: the pool's holder does, and the holder
        of the housekeeping lease does for pools no replica wants (removed from every configuration)."""
        if self.leases.holds(pool):
            return True
        return pool not in self.leases.wanted and self.leases.holds(HOUSEKEEPING)

    async def _forget_empty_clouds(self, observation: Observation) -> None:
        """A cloud removed from the config is listed until this look saw nothing of corral's in it and no
        live runner records it; then it gets no more calls."""
        leaving = [name for name in self.cloud.names if name not in self.running.config.cloud_settings()]
        if not leaving:
            return
        live = await self.store.run(runners.live_clouds)
        listed = observation.servers or {}
        for name in leaving:
            if name in live or not observation.listed_cloud(name):
                continue
            if any(server.cloud == name for server in listed.values()):
                continue
            self.cloud.remove(name)
            logger.info("cloud %s left: nothing of this installation is in it any more", name)

    # -- periodic ---------------------------------------------------------------------------------

    def _held_placements(self) -> dict[str, tuple[str, Placement]]:
        """The placements of the pools held here, by key (a pool's first is known by its name)."""
        config = self.running.config
        return {
            placement.key(name): (name, placement)
            for name in config.pools
            if self.leases.holds(name)
            for placement in config.placements(name)
        }

    def check_wait_s(self) -> float:
        """How long the check loop may sleep: until the first check of a held placement falls due, a minute at
        most (the checker's `sooner` wakes it for what comes due earlier: a refusal, a reload, a pool taken
        over)."""
        return self.checker.wait_s(sorted(self._held_placements()), CHECK_LOOP_LONGEST_S)

    async def check_due_pools(self) -> None:
        """Check each placement of the pools held here that is due."""
        config = self.running.config
        placements = self._held_placements()
        due = self.checker.due(sorted(placements))
        if not due:
            return
        await asyncio.gather(
            *(
                self.checker.check(key, server_spec(config, placements[key][0], None, placement=placements[key][1]))
                for key in due
            )
        )
        for pool in sorted({placements[key][0] for key in due}):
            self.workers.wake(pool)

    async def job_upkeep(self) -> None:
        if not self.leases.holds(HOUSEKEEPING):
            return
        changed = await self.jobs.upkeep(self.running.config)
        for pool in changed:
            self.workers.wake(pool)
        if self.jobs.lost.waiting:
            self.ask_github_in(self.running.config.tuning.lost_job_recheck)

    async def prune(self) -> None:
        if not self.leases.holds(HOUSEKEEPING):
            return
        older_than = self.clock.now() - timedelta(seconds=self.running.config.retention)
        while not self.stopping.is_set():
            batch = self.running.config.tuning.prune_batch
            deleted = await self.store.run(retention.prune_batch, older_than=older_than, batch=batch)
            if deleted < batch:
                return
