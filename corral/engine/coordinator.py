"""The engine: one reconcile worker per pool, one shared look at the far ends, every action supervised.

    webhook ──> Intake (group commit) ──wake(pool)──┐
    API / reload / timers ──────────────wake(pool)──┤
    Observer (every reconcile_interval) ─wake(all)──┤
                                                    v
                        KeyedWorkers: one worker per pool, wakes folded, never two passes of one pool
                                                    │ reconcile_pool(pool) -> requeue_after
                                                    v
         judge runners (policy.judge_runner) ─> Mover (guarded transitions, one transaction per step)
         scale (policy.judge_demand, plan_scale) ─> intents written ─> Supervisor: Creator.create
         deleting runners, surplus, removed pools ─────────────────> Supervisor: Cleaner.delete/retire
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
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from enum import StrEnum
from string import Template

from corral.clock import utcnow
from corral.cloud.provider import CloudProvider
from corral.config import CorralConfig
from corral.engine.backoff import Backoff, LogOnce
from corral.engine.checks import PoolChecker
from corral.engine.cleaner import Cleaner
from corral.engine.creator import Creator, server_spec
from corral.engine.jobs import JobTracker
from corral.engine.observe import Observation, Observer, observe
from corral.engine.status import PoolSnapshot, StatusPublisher
from corral.engine.supervisor import ActionKind, Supervisor
from corral.engine.transitions import Mover, log_new_runners
from corral.engine.workers import KeyedWorkers
from corral.github.client import GitHubClient
from corral.metrics import ACTION_ERRORS, JOBS, RECONCILE_SECONDS, RUNNER_BOOT_SECONDS
from corral.model import (
    FREE_STATES,
    STARTING_STATES,
    IntakeResult,
    JobState,
    QueuedJob,
    Reason,
    Runner,
    RunnerState,
    Transition,
)
from corral.policy import Demand, PoolCounts, RunnerFacts, Verdict, judge_demand, judge_runner, plan_scale
from corral.store import Store, jobs, pools, retention, runners
from corral.store.runners import NewRunner, RunnerAndJob
from corral.userdata import load_template

logger = logging.getLogger("corral.engine")

MAX_STEPS_PER_PASS = 4
"""Transitions one runner may make in one pass (booting -> idle -> busy -> finished, say), each recorded."""
DEFAULT_BOOTSTRAP_TIMEOUT_S = 600.0
"""For runners of a pool removed from the configuration, whose own timeout is gone with it."""
RETENTION_EVERY_S = 3600.0
BOOT_FAILURES = frozenset({Reason.SERVER_ERROR, Reason.SERVER_VANISHED, Reason.BOOTSTRAP_TIMEOUT})
"""Servers the cloud accepted that never became runners: each backs the pool off like a failed create."""
SHUTDOWN_WAIT_S = 60.0
"""How long a stopping corral waits for creates and deletes under way (what it abandons, the next start finds)."""


class DeleteOutcome(StrEnum):
    """What an operator's delete of one runner did."""

    DELETING = "deleting"
    BUSY = "busy"
    """Refused: it runs a job (drain its pool instead), or an action on it is under way."""
    GONE = "gone"
    MISSING = "missing"


class Engine:
    """Keeps every pool at its desired state; one per process, all on one event loop."""

    def __init__(
        self,
        config: CorralConfig,
        store: Store,
        cloud: CloudProvider,
        github: GitHubClient,
        *,
        user_data_template: Template | None = None,
        clock: Callable[[], float] = time.monotonic,
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
        self._cloud_threads = ThreadPoolExecutor(config.cloud.threads, "corral-cloud")
        self.mover = Mover(store)
        self.checker = PoolChecker(
            cloud, self._cloud_threads, self.log_once, clock, lambda: self.config.tuning.pool_recheck
        )
        self.creator = Creator(
            self.mover,
            cloud,
            github,
            self.checker,
            self.log_once,
            clock,
            max_concurrent_creates=config.cloud.max_concurrent_creates,
            jit_concurrency=config.tuning.jit_concurrency,
        )
        self.cleaner = Cleaner(self.mover, cloud, github, self._cloud_threads, self.log_once)
        self.jobs = JobTracker(store, github, self.log_once, clock)
        self.status = StatusPublisher(store)
        self.workers = KeyedWorkers(self.reconcile_pool, clock)
        self.observer = Observer(self._look, self._observed, lambda: self.config.reconcile_interval)
        self.drained: set[str] = set()
        self._looked_at: dict[str, int] = {}
        """The observation each pool's last full pass (deleting runners included) judged against."""
        self._deleting: dict[str, int] = {}
        """Runners being deleted per pool, as of that pass."""
        self.passes = 0
        """Looks at both far ends completed (each followed by a pass of every pool)."""
        self._stop = asyncio.Event()
        self._ask_github = asyncio.Event()
        """Set when a job's fate became uncertain (its runner took a job corral cannot name): ask GitHub soon."""
        self._loops: list[asyncio.Task[None]] = []

    # -- life cycle -------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until `stop` is set, then wait for actions under way."""
        await self._start_workers(stop)
        self._loops = [
            asyncio.create_task(self.observer.run(self._stop), name="corral-observer"),
            asyncio.create_task(self._every(ActionKind.POOL_CHECK, self._check_due_pools, 1.0), name="corral-checks"),
            asyncio.create_task(
                self._every(ActionKind.JOB_UPKEEP, self._job_upkeep, None, self._ask_github), name="corral-jobs"
            ),
            asyncio.create_task(self._every(ActionKind.PRUNE, self._prune, RETENTION_EVERY_S), name="corral-prune"),
        ]
        await stop.wait()
        self._stop.set()
        for loop in self._loops:
            loop.cancel()
        await asyncio.gather(*self._loops, return_exceptions=True)
        await self.workers.stop()
        try:
            async with asyncio.timeout(SHUTDOWN_WAIT_S):
                await self.supervisor.drain()
        except TimeoutError:
            logger.warning("stopping with %d actions still under way", self.supervisor.count)
            await self.supervisor.cancel()
        self.creator.close()
        self._cloud_threads.shutdown(wait=False, cancel_futures=True)

    async def _start_workers(self, stop: asyncio.Event) -> None:
        """Read what the store says about pools (operators' drains, pools with runners left) and start their
        workers; a database that is not there yet is waited for, with backoff, rather than ending corral."""
        backoff = Backoff(base_s=1.0, cap_s=60.0, clock=self.clock)
        while not stop.is_set():
            try:
                statuses = await self.store.run(pools.statuses)
                self.drained = {name for name, status in statuses.items() if status.drained}
                await self._sync_workers()
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
                ACTION_ERRORS.labels(kind.value).inc()
                logger.exception("%s failed unexpectedly; trying again next time", kind.value)
            waiters = [asyncio.ensure_future(self._stop.wait()), asyncio.ensure_future(wake.wait())]
            interval = every_s if every_s is not None else self.config.reconcile_interval
            try:
                await asyncio.wait(waiters, timeout=interval, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiter in waiters:
                    waiter.cancel()

    async def apply_config(self, config: CorralConfig) -> None:
        """Adopt a new configuration: pools added, removed or changed converge from their next pass."""
        self.config = config
        self.generation += 1
        self.template = load_template(config.user_data_template)
        self.checker.forget()
        await self._check_due_pools()
        await self._sync_workers()
        self.workers.wake_all()

    async def _sync_workers(self) -> None:
        """A worker for every configured pool and every pool that still has runners."""
        live = await self.store.run(runners.live_pools)
        self.workers.ensure(set(self.config.pools) | live)

    # -- wakes ------------------------------------------------------------------------------------

    def wake(self, pools_to_wake: Iterable[str] | None = None) -> None:
        """Reconcile these pools soon (all of them, after a fresh look at the far ends, when None)."""
        if pools_to_wake is None:
            self.observer.refresh()
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
        return await observe(
            generation, self.cloud, self.github, scopes, log_once=self.log_once, executor=self._cloud_threads
        )

    async def _observed(self, observation: Observation) -> None:
        """After each look: every pool is judged against it, and servers nobody owns are deleted."""
        self.passes += 1
        await self._sync_workers()
        self.workers.wake_all()
        if observation.servers is None:
            return
        live = await self.store.run(runners.live_ids, list(observation.servers))
        for runner_id, server in observation.servers.items():
            if runner_id not in live and not self.supervisor.busy(runner_id):
                self.supervisor.start(ActionKind.ORPHAN, f"orphan:{server.id}", self.cleaner.delete_orphan(server))
        counts = await self.store.run(jobs.counts)
        for status in JobState:
            JOBS.labels(status.value).set(counts.get(status.value, 0))

    # -- one pool's pass --------------------------------------------------------------------------

    async def reconcile_pool(self, name: str) -> float | None:
        """Judge the pool's runners, clean up, scale; returns when to run again (None: at the next wake)."""
        started = time.perf_counter()
        try:
            return await self._reconcile_pool(name)
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
        current = await self._judge(rows, observation)
        for runner in current:
            deleting = runner.state is RunnerState.DELETING and not self.supervisor.busy(runner.id)
            if deleting and self.cleaner.due(runner, observation):
                self.supervisor.start(
                    ActionKind.DELETE,
                    runner.id,
                    self.cleaner.delete(runner, observation),
                    on_error=self.cleaner.on_error(runner),
                )
        states = Counter(runner.state for runner in current)
        if full:
            self._looked_at[name] = generation
            self._deleting[name] = states[RunnerState.DELETING]
        else:
            states[RunnerState.DELETING] += self._deleting.get(name, 0)
        if pool is None:
            self._retire(current, [RunnerState.IDLE, RunnerState.BOOTING], Reason.POOL_REMOVED, None)
            snapshot = PoolSnapshot(name, states, reason="removed from the configuration", removed=True)
            await self.status.publish(snapshot, self.generation)
            return None
        return await self._scale(name, current, states)

    async def _judge(self, rows: list[RunnerAndJob], observation: Observation | None) -> list[Runner]:
        """Move every runner as far as what is known takes it, a step (one transaction) at a time."""
        by_id = {row.runner.id: row for row in rows}
        current = {row.runner.id: row.runner for row in rows}
        pending = list(current)
        for _ in range(MAX_STEPS_PER_PASS):
            transitions = []
            for runner_id in pending:
                runner = current[runner_id]
                row = by_id[runner_id]
                verdict = judge_runner(self._facts(runner, row, observation))
                if verdict is not None:
                    transitions.append(self._transition(runner, row, verdict))
            if not transitions:
                break
            moved = await self.mover.apply(transitions)
            pending = []
            for transition, result in zip(transitions, moved, strict=True):
                if result is not None:
                    current[result.id] = result
                    pending.append(result.id)
                    self._learn(transition)
                    if transition.presumed_taken:
                        self._ask_github.set()
        return [runner for runner in current.values() if runner.state is not RunnerState.DELETED]

    def _facts(self, runner: Runner, row: RunnerAndJob, observation: Observation | None) -> RunnerFacts:
        pool = self.config.pools.get(runner.pool)
        timeout = pool.bootstrap_timeout if pool else DEFAULT_BOOTSTRAP_TIMEOUT_S
        in_flight = self.supervisor.busy(runner.id)
        if observation is None:
            return RunnerFacts(
                state=runner.state,
                in_flight=in_flight,
                observed_age_s=0.0,
                bootstrap_timeout_s=timeout,
                server_known=False,
                registration_known=False,
                had_registration=runner.github_runner_id is not None,
                job_status=row.job_status,
            )
        # Absence only counts against a runner that was already in its state when the look began.
        seen_before = runner.state_changed_at < observation.started_at
        server = observation.server_for(runner.id)
        registration = observation.registration_for(runner.scope, runner.name)
        return RunnerFacts(
            state=runner.state,
            in_flight=in_flight,
            observed_age_s=(observation.started_at - runner.created_at).total_seconds(),
            bootstrap_timeout_s=timeout,
            server_known=observation.servers is not None and (server is not None or seen_before),
            server_status=server.status if server else None,
            server_fault=server.fault if server else None,
            registration_known=runner.scope in observation.registrations and (registration is not None or seen_before),
            registered=registration is not None,
            online=bool(registration and registration.online),
            busy=bool(registration and registration.busy),
            had_registration=runner.github_runner_id is not None,
            job_status=row.job_status,
        )

    def _learn(self, transition: Transition) -> None:
        """What a runner's move says about its pool's way from intent to runner: back off, or carry on."""
        if transition.reason is Reason.CAME_ONLINE:
            self.creator.came_online(transition.runner.pool)
        elif transition.target is RunnerState.FAILED and transition.reason in BOOT_FAILURES:
            self.creator.booting_failed(transition.runner, transition.reason, transition.message)

    def _transition(self, runner: Runner, row: RunnerAndJob, verdict: Verdict) -> Transition:
        registered_at = None
        # It came online: seen online, seen busy, or its job was done (which it must have come online for).
        came_online = verdict.target in (RunnerState.IDLE, RunnerState.BUSY) or verdict.reason is Reason.JOB_DONE
        if came_online and runner.registered_at is None:
            registered_at = utcnow()
            RUNNER_BOOT_SECONDS.labels(runner.pool).observe((registered_at - runner.created_at).total_seconds())
        # A runner that turned busy, or finished from booting or idle (its job was over before corral saw it
        # busy), took a job; unless the job table says which, it may not be the one it was started for.
        took_a_job = verdict.target is RunnerState.BUSY or (
            verdict.target is RunnerState.FINISHED and runner.state in (RunnerState.BOOTING, RunnerState.IDLE)
        )
        took = row.job_id if row.job_status is not None else None
        diverted = runner.job_id if took_a_job and runner.job_id is not None and took != runner.job_id else None
        return Transition(
            runner,
            verdict.target,
            verdict.reason,
            verdict.message,
            registered_at=registered_at,
            diverted_job=diverted,
            # Unless it took a job nobody else was started for, the job it was started for has most likely
            # gone to another of the pool's runners (runners take the oldest fitting job, not their own).
            presumed_taken=diverted is not None and (took is None or row.job_had_runner),
        )

    async def _scale(self, name: str, current: list[Runner], states: Counter[RunnerState]) -> float | None:
        pool = self.config.pools[name]
        ready, reason = self.pool_ready(name)
        drained = name in self.drained
        # Jobs beyond these cannot change the plan (creates are capped by max_runners, and runners go to the
        # oldest uncovered jobs): read no more of a backlog than that.
        covering = sum(1 for runner in current if runner.state in FREE_STATES and runner.job_id is not None)
        needed = 0 if drained else max(pool.max_runners - states[RunnerState.BUSY], 0) + covering
        queued, demand, exhausted = await self._demand(name, needed)
        queued_total = len(queued) if exhausted else await self.store.run(jobs.queued_count, name)
        if demand.held:
            self.log_once.warning(
                f"held:{name}",
                f"pool {name}: {len(demand.held)} queued job(s) held back: their runners went to other jobs "
                f"{self.config.max_runners_per_job} times (max_runners_per_job); each gets another once GitHub "
                "confirms it still queued",
            )
        counts = PoolCounts(
            starting=sum(states[state] for state in STARTING_STATES),
            idle=states[RunnerState.IDLE],
            busy=states[RunnerState.BUSY],
            queued_jobs=len(demand.wanted),
        )
        min_idle, max_runners = (0, 0) if drained else (pool.min_idle, pool.max_runners)
        plan = plan_scale(counts, min_idle=min_idle, max_runners=max_runners)
        requeue_after: float | None = None
        if plan.create and ready:
            await self._start(name, current, queued, demand.wanted, plan.create)
        elif plan.create and self.creator.paused_s(name) > 0:
            requeue_after = self.creator.paused_s(name)
        if plan.surplus_idle:
            grace_left = self._retire_surplus(name, current, plan.surplus_idle, drained)
            if grace_left is not None:
                requeue_after = min(requeue_after or grace_left, grace_left)
        snapshot = PoolSnapshot(
            name,
            states,
            queued_jobs=queued_total,
            held_jobs=len(demand.held),
            desired=plan.desired,
            ready=ready,
            reason=reason,
        )
        await self.status.publish(snapshot, self.generation)
        return requeue_after

    async def _demand(self, name: str, needed: int) -> tuple[list[QueuedJob], Demand, bool]:
        """The pool's queued jobs judged (`policy.judge_demand`), read a page at a time until `needed` of them
        count as demand or none are left (then the third value is True: every queued job was read)."""
        now = utcnow()
        queued: list[QueuedJob] = []
        demand = Demand()
        page = needed * 2 + 20
        while len(demand.wanted) < needed:
            batch = await self.store.run(jobs.queued_of_pool, name, limit=page, offset=len(queued))
            queued += batch
            judged = judge_demand(
                batch,
                now=now,
                stale_after=timedelta(seconds=self.config.stale_job_check),
                max_runners_per_job=self.config.max_runners_per_job,
                max_hold=timedelta(seconds=self.config.tuning.max_hold),
                busy_covers_job=timedelta(seconds=self.config.tuning.busy_covers_job),
            )
            demand.wanted += judged.wanted
            demand.held += judged.held
            if len(batch) < page:
                return queued, demand, True
        return queued, demand, False

    async def _start(
        self, name: str, current: list[Runner], queued: list[QueuedJob], wanted: list[int], count: int
    ) -> None:
        """Write the intents for `count` new runners, each for the oldest uncovered job (or warm), and start
        creating them. A job is covered while a runner started for it can still take it."""
        pool = self.config.pools[name]
        covered = {runner.job_id for runner in current if runner.state in FREE_STATES and runner.job_id is not None}
        uncovered: list[int | None] = [job_id for job_id in wanted if job_id not in covered]
        for_jobs = (uncovered + [None] * count)[:count]
        intents = [
            NewRunner(
                pool=name,
                scope=pool.scope.key,
                labels=tuple(pool.labels),
                reason=Reason.DEMAND if job_id is not None else Reason.WARM,
                job_id=job_id,
            )
            for job_id in for_jobs
        ]
        created = await self.store.run(runners.add, self.config.name_prefix, intents)
        log_new_runners(created)
        received = {job.id: job.received_at for job in queued}
        config, template = self.config, self.template
        for runner in created:
            job_received_at = received.get(runner.job_id) if runner.job_id is not None else None
            self.supervisor.start(
                ActionKind.CREATE,
                runner.id,
                self.creator.create(runner, config, template, job_received_at),
                on_error=self.creator.on_error(runner),
            )

    def _retire_surplus(self, name: str, current: list[Runner], surplus: int, drained: bool) -> float | None:
        """Retire the oldest idle runners above what is wanted once they have idled `idle_grace`; returns the
        seconds until the next one has (None if none waits)."""
        grace = self.config.pools[name].idle_grace
        now = utcnow()
        idle = [
            runner for runner in current if runner.state is RunnerState.IDLE and not self.supervisor.busy(runner.id)
        ]
        ripe = [runner for runner in idle if (now - runner.state_changed_at).total_seconds() >= grace]
        reason = Reason.POOL_DRAINED if drained else Reason.SCALE_DOWN
        self._retire(ripe[:surplus], [RunnerState.IDLE], reason, "idle above what the pool wants")
        waiting = [grace - (now - runner.state_changed_at).total_seconds() for runner in idle if runner not in ripe]
        return min(waiting) if waiting and len(ripe) < surplus else None

    def _retire(self, candidates: list[Runner], states: list[RunnerState], reason: Reason, message: str | None) -> None:
        for runner in candidates:
            if runner.state in states and not self.supervisor.busy(runner.id):
                self.supervisor.start(ActionKind.RETIRE, runner.id, self.cleaner.retire(runner, reason, message))

    # -- beside the passes ------------------------------------------------------------------------

    async def _check_due_pools(self) -> None:
        due = self.checker.due(sorted(self.config.pools))
        if not due:
            return
        config = self.config
        await asyncio.gather(*(self.checker.check(name, server_spec(config, name, None)) for name in due))
        self.wake(due)

    async def _job_upkeep(self) -> None:
        changed = await self.jobs.upkeep(self.config)
        self.wake(changed)

    async def _prune(self) -> None:
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
        ready, reason = self.checker.readiness(name)
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

    def snapshot(self, name: str) -> PoolSnapshot:
        return self.status.snapshots.get(name) or PoolSnapshot(name)

    async def set_drained(self, name: str, drained: bool) -> None:
        """Drain: no new runners and idle ones retired (busy ones finish); undrain to resume."""
        await self.store.run(pools.set_drained, name, drained)
        (self.drained.add if drained else self.drained.discard)(name)
        await self.workers.run_now(name)

    async def delete_runner(self, runner_id: str) -> DeleteOutcome:
        """An operator's delete of one runner; refused while it runs a job."""
        runner = await self.store.run(runners.get, runner_id)
        if runner is None:
            return DeleteOutcome.MISSING
        if runner.state in (RunnerState.DELETING, RunnerState.DELETED):
            return DeleteOutcome.GONE
        if runner.state is RunnerState.BUSY or (
            self.supervisor.busy(runner.id) and runner.state not in STARTING_STATES
        ):
            return DeleteOutcome.BUSY
        if runner.state in (RunnerState.PENDING, RunnerState.CREATING):
            await self.mover.fail(runner, Reason.OPERATOR, "deleted by an operator while starting")
            self.workers.wake(runner.pool)
            return DeleteOutcome.DELETING
        if runner.state in (RunnerState.FINISHED, RunnerState.FAILED):
            await self.workers.run_now(runner.pool)
            return DeleteOutcome.DELETING
        if await self.cleaner.retire(runner, Reason.OPERATOR, "deleted by an operator"):
            return DeleteOutcome.DELETING
        return DeleteOutcome.BUSY
