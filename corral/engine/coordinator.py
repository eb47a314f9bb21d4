"""The engine: one reconcile worker per pool, one shared look at the far ends, every action supervised.

    webhook ──> Intake (group commit) ──wake(pool)──┐
    API / reload / timers ──────────────wake(pool)──┤
    Observer (every reconcile_interval) ─wake(all)──┤
                                                    v
                        KeyedWorkers: one worker per pool, wakes folded, never two passes of one pool
                                                    │ reconcile_pool(pool) -> requeue_after
                                                    v
         RunnerJudge (policy.judge_runner) ─> Mover (guarded transitions, one transaction per step)
         deleting runners ─────────────────────────────────────────> Supervisor: Cleaner.delete
         Scaler (policy.judge_demand, plan_scale) ─> intents written ─> Supervisor: Creator.create
                  surplus idle, removed pools, drains ─────────────> Supervisor: Cleaner.retire
         snapshot ─> StatusPublisher (gauges, status row when changed)

    beside them, supervised and periodic: PoolChecker (pool checks with backoff), JobTracker (stale and
    lost jobs), pruning of history; after each look, servers no live runner owns are deleted.

`reconcile_pool` is idempotent and level-triggered: it reads the pool's runners (with the job each one
took, from the job table), the newest observation and the queued jobs, and acts on the difference. Its only
memory between passes is what is under way (the supervisor's actions) and backoffs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from enum import StrEnum
from string import Template
from typing import Any

from corral import __version__
from corral.clock import utcnow
from corral.cloud.clouds import CloudSet
from corral.cloud.quota import ServerCost
from corral.config import CorralConfig
from corral.engine import messages
from corral.engine.backoff import Backoff, LogOnce
from corral.engine.checks import PoolChecker
from corral.engine.cleaner import Cleaner
from corral.engine.creator import Creator, server_spec
from corral.engine.jobs import JobTracker
from corral.engine.judge import RunnerJudge
from corral.engine.leases import HOUSEKEEPING, LeaseKeeper
from corral.engine.messages import Answers
from corral.engine.observe import Observation, Observer, Outages, observe
from corral.engine.pauses import PoolPauses
from corral.engine.quota import QuotaBudget
from corral.engine.rollouts import Rollouts
from corral.engine.scaler import Scaler
from corral.engine.scalesets import ScaleSetIntake
from corral.engine.status import PoolSnapshot, StatusPublisher
from corral.engine.supervisor import ActionKind, Supervisor
from corral.engine.transitions import Mover
from corral.engine.workers import KeyedWorkers, KeyStopped
from corral.github.client import GitHubClient
from corral.metrics import ACTION_ERRORS, JOBS, RECONCILE_SECONDS, publish_headroom
from corral.model import (
    STARTING_STATES,
    IntakeResult,
    JobState,
    PoolStatus,
    Reason,
    Runner,
    RunnerState,
)
from corral.outages import log_unexpected
from corral.store import Store, jobs, leases, pools, retention, runners
from corral.store.leases import LeaseLost
from corral.store.wakes import WakeListener
from corral.userdata import load_template

logger = logging.getLogger("corral.engine")

RETENTION_EVERY_S = 3600.0
ANSWER_WAIT_S = 5.0
"""How long a request passed on to other replicas (a delete, a reload) waits for their answers (a delete: for
its holder to take it on)."""
DELETE_OUTCOME_WAIT_S = 300.0
"""How long a delete passed on waits for its outcome once the holder took it on: the holder's delete waits
for GitHub and the cloud, each call bounded by its own timeout, as a delete on a single corral does."""
SHUTDOWN_WAIT_S = 60.0
"""How long a stopping corral waits for creates and deletes under way (what it abandons, the next start finds)."""


class DeleteOutcome(StrEnum):
    """What an operator's delete of one runner did."""

    DELETING = "deleting"
    BUSY = "busy"
    """Refused: it runs a job (drain its pool instead), or an action on it is under way."""
    GONE = "gone"
    MISSING = "missing"
    FORWARDED = "forwarded"
    """Its pool is held by another replica: the request was passed on to it (PostgreSQL NOTIFY), and no
    replica took it on within ANSWER_WAIT_S (when one does, its own outcome is the answer)."""


class DeleteFailed(Exception):
    """The replica holding a runner's pool took an operator's delete on, and its delete raised."""


def _loop_ended(task: asyncio.Task[None]) -> None:
    if task.cancelled() or task.exception() is None:
        return
    ACTION_ERRORS.labels(ActionKind.LOOP.value).inc()
    logger.error("%s ended unexpectedly; restart corral", task.get_name(), exc_info=task.exception())


class Engine:
    """Keeps every pool at its desired state; one per process, all on one event loop."""

    def __init__(
        self,
        config: CorralConfig,
        store: Store,
        cloud: CloudSet,
        github: GitHubClient,
        *,
        user_data_template: Template | None = None,
        clock: Callable[[], float] = time.monotonic,
        replica: str = "corral",
    ) -> None:
        self.config = config
        self.generation = 1
        self.store = store
        self.cloud = cloud
        self.github = github
        self.template = user_data_template or load_template(config.user_data_template)
        self.clock = clock
        self.log_once = LogOnce(logger, clock=clock)
        self.supervisor = Supervisor()
        self._ask_github = asyncio.Event()
        """Set when a job's fate became uncertain (its runner took a job corral cannot name): ask GitHub soon."""
        self._cloud_threads = ThreadPoolExecutor(config.cloud.threads, "corral-cloud")
        self.leases = LeaseKeeper(
            store, replica, lease_s=config.lease_time, busy=self.supervisor.group_busy, log_once=self.log_once
        )
        self.mover = Mover(store, fence=self.leases.fence)
        self.checker = PoolChecker(
            cloud, self._cloud_threads, self.log_once, clock, lambda: self.config.tuning.pool_recheck
        )
        self.rollouts = Rollouts(lambda: self.config)
        self.scalesets = ScaleSetIntake(
            lambda: self.config, github, store, replica, lambda pool: self.workers.wake(pool), self.log_once
        )
        self.creator = Creator(
            self.mover,
            cloud,
            github,
            self.checker,
            PoolPauses(store, self.log_once, clock),
            self.log_once,
            max_concurrent_creates=config.cloud.max_concurrent_creates,
            jit_concurrency=config.tuning.jit_concurrency,
            scale_set_jit=self.scalesets.jit_config,
            image_for=self.rollouts.image_for_new_runner,
            clouds_of=lambda pool: self.config.clouds_of(pool),
            cloud_of=lambda recorded: self.config.cloud_of(recorded),
            ready_clouds=self._ready_clouds,
        )
        self.cleaner = Cleaner(
            self.mover, cloud, github, self._cloud_threads, self.log_once, lambda r: self.config.cloud_of(r)
        )
        self.jobs = JobTracker(store, github, self.log_once, clock)
        self.status = StatusPublisher(store)
        self.judge = RunnerJudge(
            lambda: self.config, self.mover, self.supervisor, self.creator, self._ask_github_in, self.rollouts
        )
        self.quotas = {name: QuotaBudget(clock) for name in cloud.names}
        """Each cloud's quota budget."""
        self.scaler = Scaler(
            config=lambda: self.config,
            template=lambda: self.template,
            generation=lambda: self.generation,
            drained=lambda: self.drained,
            readiness=self.pool_ready,
            store=store,
            supervisor=self.supervisor,
            creator=self.creator,
            cleaner=self.cleaner,
            status=self.status,
            log_once=self.log_once,
            fence=self.leases.fence,
            scale_sets=self.scalesets,
            quotas=lambda name: self.quotas[name],
            placement_ready=lambda key: self.checker.readiness(key)[0],
            server_cost=self.checker.cost,
            rollouts=self.rollouts,
            checked_image=self.checker.image_id,
            others=self._sharing_quota,
        )
        self.workers = KeyedWorkers(self.reconcile_pool, clock)
        self.observer = Observer(self._look, self._observed, lambda: self.config.reconcile_interval)
        self.outages = Outages()
        """The clouds' and GitHub's outages, as the looks find them (logged once each way)."""
        self.drained: set[str] = set()
        self._looked_at: dict[str, int] = {}
        """The observation each pool's last full pass (deleting runners included) judged against."""
        self._deleting: dict[str, int] = {}
        """Runners being deleted per pool, as of that pass."""
        self._notices = 0
        self._answers = Answers()
        self.reload_config: Callable[[], Awaitable[list[str]]] | None = None
        """Re-reads this replica's config file (set by the service): what another replica's reload asks for."""
        self.started_at = utcnow()
        self.passes = 0
        """Looks at both far ends completed (each followed by a pass of every pool)."""
        self._stop = asyncio.Event()
        self._loops: list[asyncio.Task[None]] = []
        self._wakes: WakeListener | None = None

    # -- life cycle -------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until `stop` is set, then wait for actions under way."""
        await self._start_workers(stop)
        if self.leases.enabled:
            self._wakes = WakeListener(
                self.store.url,
                asyncio.get_running_loop(),
                self._remote_wake,
                self.observer.refresh,
                health=self.store.health,
            )
            self._wakes.start()
        self._loops = [
            self._loop(self._every(ActionKind.LEASES, self._lease_tick, self.leases.renew_every_s), "corral-leases"),
            self._loop(self.observer.run(self._stop), "corral-observer"),
            self._loop(self._every(ActionKind.POOL_CHECK, self._check_due_pools, 1.0), "corral-checks"),
            self._loop(self._every(ActionKind.JOB_UPKEEP, self._job_upkeep, None, self._ask_github), "corral-jobs"),
            self._loop(self._every(ActionKind.PRUNE, self._prune, RETENTION_EVERY_S), "corral-prune"),
        ]
        await stop.wait()
        self._stop.set()
        for loop in self._loops:
            loop.cancel()
        await asyncio.gather(*self._loops, return_exceptions=True)
        await self.workers.stop()
        await self.scalesets.close()
        try:
            async with asyncio.timeout(SHUTDOWN_WAIT_S):
                await self.supervisor.drain()
        except TimeoutError:
            logger.warning("stopping with %d actions still under way", self.supervisor.count)
            await self.supervisor.cancel()
        if self._wakes is not None:
            self._wakes.stop()
        with contextlib.suppress(Exception):
            await self.leases.leave()
        self.creator.close()
        self._cloud_threads.shutdown(wait=False, cancel_futures=True)

    @staticmethod
    def _loop(loop: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        """One of the engine's loops as a task. Each catches what its steps raise; should the loop itself end
        on an exception (a bug), that is logged and counted now, not found (or lost) when corral stops."""
        task = asyncio.create_task(loop, name=name)
        task.add_done_callback(_loop_ended)
        return task

    def _ask_github_in(self, after_s: float) -> None:
        """Run job upkeep (which asks GitHub about uncertain jobs) in `after_s` seconds."""
        asyncio.get_running_loop().call_later(after_s, self._ask_github.set)

    async def _start_workers(self, stop: asyncio.Event) -> None:
        """Read what the store says about pools (operators' drains, pools with runners left) and start their
        workers; a database that is not there yet is waited for, with backoff, rather than ending corral."""
        backoff = Backoff(base_s=1.0, cap_s=60.0, clock=self.clock)
        while not stop.is_set():
            try:
                statuses = await self.store.run(pools.statuses)
                self.drained = pools.drained(statuses)
                self.creator.pauses.restore(statuses, self.leases.holds)
                self.rollouts.restore(statuses, self.leases.holds)
                await self._sync_workers()
                await self._lease_tick()
                return
            except Exception as exc:
                wait = backoff.failed()
                self.log_once.warning("start", f"cannot read the database, trying again in {wait:.0f}s: {exc}")
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await stop.wait()

    async def _every(
        self,
        kind: ActionKind,
        action: Callable[[], Awaitable[object]],
        every_s: float | None,
        sooner: asyncio.Event | None = None,
    ) -> None:
        """Run `action` periodically (every `reconcile_interval` when `every_s` is None), or as soon as
        `sooner` is set; an exception is logged and counted, and the loop carries on."""
        wake = sooner or asyncio.Event()
        while not self._stop.is_set():
            wake.clear()
            try:
                await action()
            except asyncio.CancelledError:
                raise
            except Exception:
                log_unexpected(
                    logger,
                    "%s failed unexpectedly; trying again next time",
                    kind.value,
                    counted=ACTION_ERRORS.labels(kind.value),
                )
            waiters = [asyncio.ensure_future(self._stop.wait()), asyncio.ensure_future(wake.wait())]
            interval = every_s if every_s is not None else self.config.reconcile_interval
            try:
                await asyncio.wait(waiters, timeout=interval, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiter in waiters:
                    waiter.cancel()

    async def apply_config(self, config: CorralConfig) -> None:
        """Adopt a new configuration: pools added, removed or changed converge from their next pass; so do
        clouds (an added one is connected now, a removed one is listed until nothing of corral's is left in
        it). Raises `CloudError` when an added cloud cannot be connected, and `UserDataError` or `OSError`
        when the template cannot be read: the reload then fails, and nothing of the new config is adopted.

        Everything the new config needs is prepared first; then config, generation and template are swapped in
        one step, with no await between them, so nothing on the loop ever reads half of a reload."""
        template = load_template(config.user_data_template)
        await self._connect_added_clouds(config)
        self.config, self.generation, self.template = config, self.generation + 1, template
        self.checker.forget()
        await self._check_due_pools()
        await self._sync_workers()
        self.workers.wake_all()

    async def _connect_added_clouds(self, config: CorralConfig) -> None:
        for name, settings in config.cloud_settings().items():
            if name not in self.cloud.names:
                await asyncio.get_running_loop().run_in_executor(self._cloud_threads, self.cloud.add, name, settings)
                self.quotas[name] = QuotaBudget(self.clock)
                logger.info("cloud %s added: pools may place runners in it", name)
        for name in set(self.quotas) - set(config.cloud_settings()):
            del self.quotas[name]  # no runner goes there any more; it is listed until empty
            logger.info("cloud %s removed from the config: its runners are retired, then it is left", name)

    async def _forget_empty_clouds(self, observation: Observation) -> None:
        """A cloud removed from the config is listed until this look saw nothing of corral's in it and no
        live runner records it; then it gets no more calls."""
        leaving = [name for name in self.cloud.names if name not in self.config.cloud_settings()]
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

    async def _sync_workers(self) -> None:
        """A worker for every configured pool and every pool that still has runners, of those this replica
        holds (all of them on SQLite)."""
        live = await self.store.run(runners.live_pools)
        wanted = set(self.config.pools) | live
        self.leases.wanted = wanted | {HOUSEKEEPING}
        held = {pool for pool in wanted if self.leases.holds(pool)}
        self.workers.ensure(held)
        self.scalesets.ensure(held)
        for name in self.scalesets.retiring - live:
            # Taken out of scale-set intake with no runner left: its scale set goes now (else after the last).
            self.supervisor.start(ActionKind.SCALE_SET, f"scale-set-delete:{name}", self.scalesets.forget(name))

    async def _lease_tick(self) -> None:
        """Renew, take and hand over pools (PostgreSQL); workers follow what this replica holds."""
        gained, lost = await self.leases.tick()
        if not gained and not lost:
            return
        if gained:
            # A pool taken over may have been drained or undrained on its former owner, and backing off.
            statuses = await self.store.run(pools.statuses)
            self.drained = pools.drained(statuses)
            self.creator.pauses.restore(statuses, gained.__contains__)
            self.rollouts.restore(statuses, gained.__contains__)
        await self._sync_workers()
        for pool in gained:
            self.workers.wake(pool)

    def _remote_wake(self, payload: str) -> None:
        """A message from another replica (PostgreSQL NOTIFY, `engine.messages`): mostly a pool's name."""
        if not payload.startswith("~"):
            if self.leases.holds(payload):
                self.workers.wake(payload)
        elif payload == messages.DRAIN_CHANGED:
            self.supervisor.start(ActionKind.LEASES, "drain-changed", self._read_pool_statuses())
        elif payload == messages.LOOK_NOW:
            self.observer.refresh()
        elif payload.startswith(messages.DELETE):
            runner_id = payload.removeprefix(messages.DELETE)
            self.supervisor.start(ActionKind.LEASES, payload, self._forwarded_delete(runner_id))
        elif payload.startswith(messages.DELETED):
            runner_id, _, outcome = payload.removeprefix(messages.DELETED).partition(":")
            self._answers.answer(messages.DELETE + runner_id, outcome)
        elif payload.startswith(messages.RELOAD):
            key, _, sender = payload.removeprefix(messages.RELOAD).partition(":")
            if sender != self.leases.replica:
                self.supervisor.start(ActionKind.LEASES, payload, self._reload_asked(key))
        elif payload.startswith(messages.RELOADED):
            key, _, answer = payload.removeprefix(messages.RELOADED).partition(":")
            self._answers.answer(messages.RELOAD + key, answer)

    async def _forwarded_delete(self, runner_id: str) -> None:
        """Another replica's operator deleted a runner of a pool held here: say at once that it is taken on,
        then answer with what the delete did, or that it failed (the exception goes on to the supervisor)."""
        runner = await self.store.run(runners.get, runner_id)
        if runner is None or not self.leases.holds(runner.pool):
            return
        answer = f"{messages.DELETED}{runner_id}:"
        self._notify({answer + messages.ACCEPTED})
        try:
            outcome = await self.delete_runner(runner_id)
        except Exception:
            self._notify({answer + messages.FAILED})
            raise
        logger.info("runner %s: delete passed on by another replica: %s", runner.name, outcome.value)
        self._notify({answer + outcome.value})

    async def _reload_asked(self, key: str) -> None:
        """Another replica's operator asked for a reload: re-read this replica's own file and say how it went."""
        problems = await self.reload_config() if self.reload_config else ["no config file to reload"]
        outcome = "refused" if problems else "reloaded"
        self._notify({f"{messages.RELOADED}{key}:{self.leases.replica}:{outcome}"})

    async def ask_replicas_to_reload(self) -> dict[str, str]:
        """Ask every other live replica to reload its own config file: replica -> `reloaded`, `refused` (its
        log says why) or `no answer` (within ANSWER_WAIT_S). Nothing to ask on SQLite."""
        if not self.leases.enabled:
            return {}
        live = await self.store.run(leases.replicas, timedelta(seconds=self.config.lease_time))
        others = {row.id for row in live} - {self.leases.replica}
        if not others:
            return {}
        key = secrets.token_hex(6)
        answers = await self._answers.collect(
            messages.RELOAD + key,
            lambda: self._notify({f"{messages.RELOAD}{key}:{self.leases.replica}"}),
            timeout_s=ANSWER_WAIT_S,
            enough=lambda answers: len(answers) >= len(others),
        )
        told = dict(answer.rsplit(":", 1) for answer in answers if ":" in answer)
        return {replica: told.get(replica, "no answer") for replica in sorted(others)}

    async def _read_pool_statuses(self) -> None:
        """Read every pool's status row: operators' drains, and the quota waits of pools others hold."""
        statuses = await self.store.run(pools.statuses)
        drained = pools.drained(statuses)
        changed, self.drained = drained ^ self.drained, drained
        for pool in changed:
            self.workers.wake(pool)
        waits = self._others_waiting(statuses)
        for cloud, budget in self.quotas.items():
            budget.others_waiting(wait for in_cloud, wait in waits if in_cloud == cloud)

    def _others_waiting(
        self, statuses: dict[str, PoolStatus]
    ) -> list[tuple[str, tuple[str, int, ServerCost, int, float]]]:
        """The quota waits of pools other replicas hold, as their status rows say, each with the cloud whose
        quota it waits for (the holder says which; rows that do not: the pool's first)."""
        now, elsewhere = utcnow(), set(self._held_elsewhere())
        waits = []
        for name, status in statuses.items():
            if name not in elsewhere or not status.quota_waiting or status.quota_waiting_at is None:
                continue
            cost = ServerCost.of(status.server_cost)
            if cost is not None:
                age = max((now - status.quota_waiting_at).total_seconds(), 0.0)
                cloud = status.quota_waiting_cloud or self.config.clouds_of(name)[0]
                waits.append((cloud, (name, self.config.pools[name].priority, cost, status.quota_waiting, age)))
        return waits

    def _sharing_quota(self, _pool: str) -> list[str]:
        """Every pool, with replicas (any may have another replica's creates under way: one held elsewhere, or
        one taken over from a replica that stalled past its lease); none on SQLite, where this replica makes
        every create."""
        return list(self.config.pools) if self.leases.enabled else []

    def _held_elsewhere(self, pool: str | None = None) -> list[str]:
        """The pools other replicas hold, `pool` aside (none on SQLite, where this replica holds all)."""
        if not self.leases.enabled:
            return []
        return [name for name in self.config.pools if name != pool and not self.leases.holds(name)]

    # -- wakes ------------------------------------------------------------------------------------

    def wake(self, pools_to_wake: Iterable[str] | None = None) -> None:
        """Reconcile these pools soon (all of them, after a fresh look at the far ends, when None: on every
        replica)."""
        if pools_to_wake is None:
            self.observer.refresh()
            if self.leases.enabled:
                self._notify({messages.LOOK_NOW})
            return
        for pool in pools_to_wake:
            self.workers.wake(pool)

    def recorded(self, intake: IntakeResult) -> None:
        """Webhooks were recorded: new demand is acted on at once; news of runners taking or finishing jobs
        waits a moment (`tuning.news_delay`), so that one pass takes many of them at once."""
        for pool in intake.demand:
            self.workers.wake(pool)
        for pool in intake.news:
            self.workers.wake(pool, after=self.config.tuning.news_delay)
        remote = {pool for pool in intake.demand | intake.news if not self.leases.holds(pool)}
        if remote:
            self._notify(remote)

    def _notify(self, payloads: set[str]) -> None:
        """Wake these pools' owners on other replicas (or send another message); one transaction, at once."""
        self._notices += 1
        self.supervisor.start(
            ActionKind.LEASES, f"notify:{self._notices}", self.store.run(leases.notify_wake, payloads)
        )

    async def settle(self) -> None:
        """Look at the far ends afresh and wait for every pool's pass after it (tests, `corral demo`).

        This asks the engine's own observer and workers; it never runs a pass beside them.
        """
        await self.observer.look_now()
        for pool in sorted(self.workers.keys):
            await self.workers.run_now(pool)

    async def drain(self) -> None:
        """Wait for the actions under way (creates, deletes...)."""
        await self.supervisor.drain()

    # -- the look at both far ends ----------------------------------------------------------------

    async def _look(self, generation: int) -> Observation:
        scopes = {pool.scope.key for pool in self.config.pools.values()}
        scopes |= set(await self.store.run(runners.live_scopes))
        began, began_wall = self.clock(), utcnow()
        observation = await observe(
            generation,
            self.cloud,
            self.github,
            scopes,
            log_once=self.log_once,
            executor=self._cloud_threads,
            volumes=self.config.uses_volumes(),
            outages=self.outages,
        )
        for name, budget in self.quotas.items():
            budget.refresh(observation.headrooms.get(name), began, began_wall)
        return observation

    async def _observed(self, observation: Observation) -> None:
        """After each look: every pool is judged against it, and servers nobody owns are deleted."""
        self.passes += 1
        if self.leases.enabled:
            # An operator's drain on another replica comes by NOTIFY, which a lost connection can miss; other
            # replicas' quota waits come only this way.
            await self._read_pool_statuses()
        await self._sync_workers()
        self.workers.wake_all()
        await self._delete_orphan_registrations(observation)
        await self._forget_empty_clouds(observation)
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
        corral's to judge."""
        prefix = f"{self.config.name_prefix}-"
        listed = {
            registration.name: (scope, registration)
            for scope, by_name in observation.registrations.items()
            for registration in by_name.values()
            if registration.name.startswith(prefix)
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

    def _cleans_up_after(self, pool: str) -> bool:
        """Whether this replica deletes a server of `pool` nobody owns: the pool's holder does, and the holder
        of the housekeeping lease does for pools no replica wants (removed from every configuration)."""
        if self.leases.holds(pool):
            return True
        return pool not in self.leases.wanted and self.leases.holds(HOUSEKEEPING)

    # -- one pool's pass --------------------------------------------------------------------------

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
            self.workers.ensure(set(self.workers.keys) - {name})
            self.scalesets.ensure(set(self.scalesets.listeners) - {name})
            return None
        finally:
            RECONCILE_SECONDS.labels(name).observe(time.perf_counter() - started)

    async def _reconcile_pool(self, name: str) -> float | None:
        pool = self.config.pools.get(name)
        observation = self.observer.latest
        # Runners being deleted only change with a new look at the far ends: read them on the pass after one.
        generation = observation.generation if observation is not None else 0
        full = self._looked_at.get(name) != generation
        rows = await self.store.run(runners.live_of_pool, name, deleting=full)
        if not rows and pool is None and full:
            await self.status.forget(name)
            self._looked_at.pop(name, None)
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
            self.scaler.retire(current, [RunnerState.IDLE, RunnerState.BOOTING], Reason.POOL_REMOVED, None)
            snapshot = PoolSnapshot(name, states, reason="removed from the configuration", removed=True)
            await self.status.publish(snapshot, self.generation)
            return None
        return await self.scaler.scale(name, current, states, deleting_known=full)

    # -- beside the passes ------------------------------------------------------------------------

    async def _check_due_pools(self) -> None:
        """Check each placement of the pools held here that is due (a pool's first is known by its name)."""
        config = self.config
        placements = {
            placement.key(name): (name, placement)
            for name in config.pools
            if self.leases.holds(name)
            for placement in config.placements(name)
        }
        due = self.checker.due(sorted(placements))
        if not due:
            return
        await asyncio.gather(
            *(
                self.checker.check(key, server_spec(config, placements[key][0], None, placement=placements[key][1]))
                for key in due
            )
        )
        self.wake(sorted({placements[key][0] for key in due}))

    async def _job_upkeep(self) -> None:
        if not self.leases.holds(HOUSEKEEPING):
            return
        changed = await self.jobs.upkeep(self.config)
        self.wake(changed)

    async def _prune(self) -> None:
        if not self.leases.holds(HOUSEKEEPING):
            return
        older_than = utcnow() - timedelta(seconds=self.config.retention)
        while not self._stop.is_set():
            batch = self.config.tuning.prune_batch
            deleted = await self.store.run(retention.prune_batch, older_than=older_than, batch=batch)
            if deleted < batch:
                return

    # -- what operators see and do ----------------------------------------------------------------

    def pool_ready(self, name: str) -> tuple[bool, str | None]:
        """The pool's ready condition: the worst of its parts, with the reason."""
        if name in self.drained:
            return False, "drained by an operator"
        ready, reason = self._placements_ready(name)
        if not ready:
            return ready, reason
        paused = self.creator.paused_s(name)
        if paused > 0:
            return False, f"creation paused for {paused:.0f}s after failures"
        pool = self.config.pools.get(name)
        github_paused = self.github.paused_for(pool.scope) if pool else 0.0
        if github_paused > 0:
            return False, f"GitHub calls paused for {github_paused:.0f}s (rate limited; resuming at the reset)"
        return True, None

    def _placements_ready(self, name: str) -> tuple[bool, str | None]:
        """A pool is fit to serve when one of its placements is; if none is, each one's reason says why."""
        if name not in self.config.pools:
            return self.checker.readiness(name)
        placements = self.config.placements(name)
        answers = [(placement, self.checker.readiness(placement.key(name))) for placement in placements]
        if any(ready for _, (ready, _) in answers):
            return True, None
        if len(answers) == 1:
            return answers[0][1]
        return False, "; ".join(f"in {placement.cloud}: {reason}" for placement, (_, reason) in answers)

    def _ready_clouds(self, pool: str) -> set[str]:
        """The clouds of the pool's placements whose check found nothing wrong."""
        if pool not in self.config.pools:
            return set()
        return {p.cloud for p in self.config.placements(pool) if self.checker.readiness(p.key(pool))[0]}

    def snapshot(self, name: str) -> PoolSnapshot:
        return self.status.snapshots.get(name) or PoolSnapshot(name)

    async def holders(self) -> dict[str, str]:
        """Pool -> the replica acting for it (on SQLite, this one for every pool)."""
        if not self.leases.enabled:
            return dict.fromkeys(set(self.config.pools) | self.workers.keys, self.leases.replica)
        return {row.pool: row.holder for row in await self.store.run(leases.leases) if row.valid}

    async def membership(self) -> tuple[list[leases.ReplicaRow], list[leases.LeaseRow]]:
        """The replicas on this database and the leases (on SQLite: this process, holding every pool)."""
        if self.leases.enabled:
            return await self.store.run(leases.replicas), await self.store.run(leases.leases)
        now = utcnow()
        me = leases.ReplicaRow(self.leases.replica, __version__, os.getpid(), self.started_at, now)
        held = [leases.LeaseRow(pool, me.id, 0, self.started_at, now, True) for pool in await self.holders()]
        return [me], held

    async def remote_snapshots(self, names: Iterable[str]) -> dict[str, PoolSnapshot]:
        """Pools another replica holds, as the database has them: their runners by state, queued jobs, and
        the readiness their holder last published (its in-memory snapshot is not ours to read)."""
        names = sorted(names)
        if not names:
            return {}
        counts = await self.store.run(runners.counts)
        statuses = await self.store.run(pools.statuses)
        snapshots = {}
        for name in names:
            status = statuses.get(name)
            snapshots[name] = PoolSnapshot(
                name,
                Counter({state: n for (pool, state), n in counts.items() if pool == name}),
                queued_jobs=await self.store.run(jobs.queued_count, name),
                ready=status.ready if status else False,
                reason=status.reason if status else "not reconciled yet",
                removed=status.removed if status else False,
                scale_set_id=status.scale_set_id if status else None,
                session_open=bool(status and status.scale_set_session),
            )
        return snapshots

    async def set_drained(self, name: str, drained: bool) -> None:
        """Drain: no new runners and idle ones retired (busy ones finish); undrain to resume."""
        await self.store.run(pools.set_drained, name, drained)
        (self.drained.add if drained else self.drained.discard)(name)
        if self.leases.holds(name):
            await self.workers.run_now(name)
        else:
            self._notify({messages.DRAIN_CHANGED})

    async def _pass_delete_on(self, runner: Runner) -> DeleteOutcome:
        """Ask the replica holding the runner's pool to delete it, and answer with its outcome, however long
        its delete takes (within DELETE_OUTCOME_WAIT_S). FORWARDED only when no replica took it on within
        ANSWER_WAIT_S; raises `DeleteFailed` when the holder's delete raised."""
        key = messages.DELETE + runner.id
        answers = await self._answers.collect(
            key,
            lambda: self._notify({key}),
            timeout_s=ANSWER_WAIT_S + DELETE_OUTCOME_WAIT_S,
            first_within_s=ANSWER_WAIT_S,
            enough=lambda answers: any(answer != messages.ACCEPTED for answer in answers),
        )
        if messages.FAILED in answers:
            raise DeleteFailed(f"the replica holding pool {runner.pool} could not delete the runner; its log says why")
        outcomes = [outcome for outcome in DeleteOutcome if outcome.value in answers]
        return outcomes[0] if outcomes else DeleteOutcome.FORWARDED

    async def delete_runner(self, runner_id: str) -> DeleteOutcome:
        """An operator's delete of one runner; refused while it runs a job.

        It acts in the pool's worker, between two passes (`KeyedWorkers.call`), as the engine's own actions
        on a pool do: a pass never judges the runner while the delete moves it, nor the reverse. Raises
        `KeyStopped` when this corral no longer reconciles the pool (it is stopping)."""
        runner = await self.store.run(runners.get, runner_id)
        if runner is None:
            return DeleteOutcome.MISSING
        if runner.state in (RunnerState.DELETING, RunnerState.DELETED):
            return DeleteOutcome.GONE
        if not self.leases.holds(runner.pool):
            return await self._pass_delete_on(runner)
        try:
            outcome, needs_pass = await self.workers.call(runner.pool, lambda: self._delete_held(runner_id))
        except (KeyStopped, LeaseLost):
            if not self.leases.enabled:
                raise
            # The pool moved to another replica while the delete waited for its worker: its new owner acts.
            return await self._pass_delete_on(runner)
        if needs_pass:
            await self.workers.run_now(runner.pool)
        return outcome

    async def _delete_held(self, runner_id: str) -> tuple[DeleteOutcome, bool]:
        """The delete itself, in the pool's worker: the runner is read again, as the pass before may have moved
        it. Also says whether a pass must follow before the delete is under way (a finished runner's)."""
        runner = await self.store.run(runners.get, runner_id)
        if runner is None:
            return DeleteOutcome.MISSING, False
        if runner.state in (RunnerState.DELETING, RunnerState.DELETED):
            return DeleteOutcome.GONE, False
        if runner.state is RunnerState.BUSY or (
            self.supervisor.busy(runner.id) and runner.state not in STARTING_STATES
        ):
            return DeleteOutcome.BUSY, False
        if runner.state in (RunnerState.PENDING, RunnerState.CREATING):
            await self.mover.fail(runner, Reason.OPERATOR, "deleted by an operator while starting")
            self.workers.wake(runner.pool)
            return DeleteOutcome.DELETING, False
        if runner.state in (RunnerState.FINISHED, RunnerState.FAILED):
            return DeleteOutcome.DELETING, True  # the pass (after this action) moves it to deleting
        if await self.cleaner.retire(runner, Reason.OPERATOR, "deleted by an operator"):
            self.workers.wake(runner.pool)  # its place is refilled now, not at the next periodic pass
            return DeleteOutcome.DELETING, False
        return DeleteOutcome.BUSY, False
