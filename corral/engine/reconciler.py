"""The reconcile loop: level-triggered passes over every pool, woken early by events.

A full pass observes both far ends once, moves every runner to the state the joined view says it is in
(`policy.judge_runner`), cleans up what is finished or failed, deletes what nobody owns any more, then
scales every pool (`policy.plan_scale`). `request_scale` is the fast path for events: it scales one pool
from the store alone, without listing anything, so a queued job turns into a create request at once.

Intent is written before acting: a runner row exists (`pending`) before GitHub is asked for a JIT config
and before the cloud is asked for a server, so a crash at any point leaves a row the next pass can judge.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from string import Template
from typing import Any

from corral.clock import utcnow
from corral.cloud.provider import (
    META_INSTALLATION,
    META_POOL,
    META_RUNNER,
    CloudError,
    CloudProvider,
    CloudQuotaExceeded,
    CloudServer,
    ServerSpec,
)
from corral.cloud.userdata import load_template, render_user_data
from corral.config import CorralConfig, PoolConfig, ScopeConfig
from corral.engine.backoff import Backoff, LogOnce
from corral.engine.jobs import JobTracker
from corral.engine.observe import Observation, observe
from corral.github.client import GitHubClient, GitHubError
from corral.metrics import (
    CLOUD_CALL_SECONDS,
    CLOUD_CALLS,
    CREATE_FAILURES,
    GITHUB_ERRORS,
    JOBS,
    QUEUED_TO_CREATE_SECONDS,
    RECONCILE_SECONDS,
    RUNNER_BOOT_SECONDS,
    RUNNER_TRANSITIONS,
    RUNNERS,
)
from corral.model import STARTING_STATES, InvalidTransition, JobState, RunnerState
from corral.policy import PoolCounts, RunnerFacts, judge_runner, plan_scale
from corral.store import StaleRunner, Store
from corral.store.schema import Runner
from corral.store.store import QueuedJob

logger = logging.getLogger("corral.engine")

MAX_STEPS_PER_PASS = 6
BUSY_COVERS_JOB = timedelta(seconds=30)
"""How long a runner that turned busy is taken to be running the job it was started for, unless GitHub says
otherwise first (the job's own webhook); after that, a job still queued gets another runner."""
CLOUD_THREADS = 8
LIVE_STATES = frozenset(RunnerState) - {RunnerState.DELETED}
MAX_DIVERTED_HOLD = timedelta(minutes=10)
"""The longest a job whose runners keep going to other jobs waits before it may get another."""
RECHECK_BROKEN_POOL_S = 300.0
"""How often a pool with a definite problem (no such image) is looked at again, in case the cloud was fixed."""


@dataclass
class Demand:
    """A pool's queued jobs split into those that get runners now and those held back for now."""

    wanted: list[QueuedJob] = field(default_factory=list)
    held: list[QueuedJob] = field(default_factory=list)


@dataclass
class PoolCheck:
    """What the last look at the cloud said of a pool: `problems` is None until a check got an answer."""

    backoff: Backoff
    problems: list[str] | None = None
    error: str | None = None
    due: float = 0.0


class Engine:
    """Keeps every pool at its desired state. One per process; all methods run on one event loop."""

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
        self.template = user_data_template or load_template(None)
        self.clock = clock
        self.log_once = LogOnce(logger, clock=clock)
        self.backoffs: dict[str, Backoff] = {}
        self.checks: dict[str, PoolCheck] = {}
        self._checking: asyncio.Task[Any] | None = None
        self._in_flight: set[str] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._wake = asyncio.Event()
        self._create_slots = asyncio.Semaphore(config.cloud.max_concurrent_creates)
        self._create_threads = ThreadPoolExecutor(config.cloud.max_concurrent_creates, "corral-create")
        self._cloud_threads = ThreadPoolExecutor(CLOUD_THREADS, "corral-cloud")
        self.jobs = JobTracker(store, github, self.log_once, clock)
        self._upkeep: asyncio.Task[Any] | None = None
        self._scale_requested: set[str] = set()
        self.drained = {name for name, status in store.pool_statuses().items() if status.drained}
        self.passes = 0

    # -- configuration ----------------------------------------------------------------------------

    async def apply_config(self, config: CorralConfig) -> None:
        """Adopt a new configuration: pools added, removed or changed converge from the next pass."""
        self.config = config
        self.generation += 1
        self.template = load_template(config.user_data_template)
        self.checks.clear()
        await self.check_pools()
        self.wake()

    async def check_pools(self, only_due: bool = False) -> None:
        """Ask the cloud whether each pool's image, flavor, networks... exist; a pool with problems is not ready.

        A check the cloud could not answer is retried with backoff; a definite problem (no such image) keeps
        the pool not ready and is looked at again now and then, so fixing the cloud needs no reload.
        """
        now = self.clock()
        for name, pool in self.config.pools.items():
            check = self.checks.setdefault(name, PoolCheck(backoff=Backoff(base_s=1.0, cap_s=300.0, clock=self.clock)))
            if only_due and now < check.due:
                continue
            spec = self._server_spec(name, pool, runner_id="check", runner_name="check", user_data="")
            try:
                problems = await asyncio.get_running_loop().run_in_executor(
                    self._cloud_threads, self.cloud.check_pool, spec
                )
            except CloudError as exc:
                wait = check.backoff.failed()
                check.error, check.due = str(exc), self.clock() + wait
                self.log_once.warning(
                    f"check:{name}", f"pool {name}: cannot check it against the cloud, retrying in {wait:.0f}s: {exc}"
                )
                continue
            check.backoff.succeeded()
            check.error = None
            check.due = self.clock() + RECHECK_BROKEN_POOL_S if problems else float("inf")
            if problems and problems != check.problems:
                logger.warning("pool %s is not ready: %s", name, "; ".join(problems))
            check.problems = problems

    def _check_due_pools(self) -> None:
        """Re-check, beside the pass, pools whose last check failed or found problems."""
        now = self.clock()
        due = any(check.due <= now for check in self.checks.values())
        if due and (self._checking is None or self._checking.done()):
            self._checking = self._spawn(self.check_pools(only_due=True))

    # -- the loop ---------------------------------------------------------------------------------

    def wake(self) -> None:
        """Run a full pass as soon as the current one ends."""
        self._wake.set()

    async def run(self, stop: asyncio.Event) -> None:
        await self.check_pools()
        while not stop.is_set():
            try:
                await self.reconcile()
            except Exception:
                logger.exception("reconcile pass failed; retrying at the next interval")
            self._wake.clear()
            waiters = [asyncio.ensure_future(self._wake.wait()), asyncio.ensure_future(stop.wait())]
            await asyncio.wait(waiters, timeout=self.config.reconcile_interval, return_when=asyncio.FIRST_COMPLETED)
            for waiter in waiters:
                waiter.cancel()

    async def drain(self) -> None:
        """Wait for creations and deletions under way (on shutdown, and in tests)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def reconcile(self) -> None:
        """One full pass: observe, judge every runner, clean up, scale every pool."""
        started = time.perf_counter()
        rows = self.store.runners(states=LIVE_STATES)
        scope_keys = {row.scope for row in rows} | {pool.scope.key for pool in self.config.pools.values()}
        observation = await observe(
            self.cloud,
            self.github,
            scope_keys,
            log_once=self.log_once,
            executor=self._cloud_threads,
        )
        judged = []
        for row in rows:
            judged.append(self._judge(row, observation))
            # The store calls here are synchronous; yielding between runners lets webhooks and their
            # fast path in, instead of waiting for a whole pass (measured: p50 webhook-to-create 408 ms).
            await asyncio.sleep(0)
        rows = judged
        self._clean_up([row for row in rows if row.state == RunnerState.DELETING], observation)
        await self._delete_orphans(observation, rows)
        self._retire_removed_pools(rows)
        self._check_due_pools()
        if self._upkeep is None or self._upkeep.done():
            self._upkeep = self._spawn(self._job_upkeep())
        for name in self.config.pools:
            self.scale(name)
            await asyncio.sleep(0)
        self._publish(rows)
        self.passes += 1
        RECONCILE_SECONDS.observe(time.perf_counter() - started)

    async def _job_upkeep(self) -> None:
        """Confirm stale jobs and recover missed ones beside the pass (GitHub calls must not slow it)."""
        try:
            changed = await self.jobs.upkeep(self.config)
        except Exception:
            logger.exception("job upkeep failed; trying again next pass")
            return
        for pool in changed:
            self.request_scale(pool)

    # -- judging ----------------------------------------------------------------------------------

    def _facts(self, row: Runner, observation: Observation) -> RunnerFacts:
        pool = self.config.pools.get(row.pool)
        server = observation.server_for(row.id)
        registration = observation.registration_for(row.scope, row.name)
        return RunnerFacts(
            state=RunnerState(row.state),
            in_flight=row.id in self._in_flight,
            age_s=(utcnow() - row.created_at).total_seconds(),
            bootstrap_timeout_s=pool.bootstrap_timeout if pool else 600.0,
            server_known=observation.servers is not None,
            server_status=server.status if server else None,
            server_fault=server.fault if server else None,
            registration_known=row.scope in observation.registrations,
            registered=registration is not None,
            online=bool(registration and registration.online),
            busy=bool(registration and registration.busy),
            had_registration=row.github_runner_id is not None,
        )

    def _judge(self, row: Runner, observation: Observation) -> Runner:
        for _ in range(MAX_STEPS_PER_PASS):
            verdict = judge_runner(self._facts(row, observation))
            if verdict is None:
                return row
            server = observation.server_for(row.id)
            fields: dict[str, Any] = {"server_id": server.id} if server and row.server_id is None else {}
            if verdict.target in (RunnerState.IDLE, RunnerState.BUSY) and row.registered_at is None:
                fields["registered_at"] = utcnow()
                RUNNER_BOOT_SECONDS.labels(row.pool).observe((utcnow() - row.created_at).total_seconds())
            moved = self._move(row, verdict.target, verdict.reason, **fields)
            if moved is None:
                return row
            row = moved
        return row

    def _move(
        self, row: Runner, target: RunnerState, reason: str, *, took_job: int | None = None, **fields: object
    ) -> Runner | None:
        """Apply one transition; None if someone else moved the runner first (their move stands).

        `took_job` names the job a runner turned busy with, when a webhook said so.
        """
        if target is RunnerState.FAILED:
            fields.setdefault("failure_reason", reason)
        try:
            moved = self.store.transition(row.id, target, reason, expect=RunnerState(row.state), **fields)
        except (StaleRunner, InvalidTransition) as exc:
            logger.info("runner %s: not moved to %s: %s", row.name, target.value, exc)
            return None
        if target is RunnerState.FAILED:
            CREATE_FAILURES.labels(row.pool, reason.split(":", 1)[0][:60]).inc()
        took_a_job = target is RunnerState.BUSY or (target is RunnerState.FINISHED and row.state == RunnerState.IDLE)
        if took_a_job and row.job_id is not None and took_job != row.job_id:
            self.store.runner_diverted(row.job_id)
        RUNNER_TRANSITIONS.labels(row.pool, target.value).inc()
        logger.info(
            "runner %s (pool %s): %s -> %s: %s",
            row.name,
            row.pool,
            row.state,
            target.value,
            reason,
            extra={
                "runner": row.name,
                "pool": row.pool,
                "from_state": row.state,
                "to_state": target.value,
                "reason": reason,
            },
        )
        return moved

    # -- cleaning up ------------------------------------------------------------------------------

    def _clean_up(self, rows: list[Runner], observation: Observation) -> None:
        """Start deleting what each runner leaves behind, beside the pass: slow deletes must not delay scaling."""
        for row in rows:
            if row.id not in self._in_flight:
                self._in_flight.add(row.id)
                self._spawn(self._delete_runner_resources(row, observation))

    async def _delete_runner_resources(self, row: Runner, observation: Observation) -> None:
        try:
            await self._delete_server_and_registration(row, observation)
        finally:
            self._in_flight.discard(row.id)

    async def _delete_server_and_registration(self, row: Runner, observation: Observation) -> None:
        server = observation.server_for(row.id)
        server_id = server.id if server else (row.server_id if observation.servers is None else None)
        if server_id is not None:
            await self._cloud_call("delete_server", self.cloud.delete_server, server_id)
        # By name too: a crash between the JIT config and recording its id leaves a registration we know
        # only by the name we gave it.
        registration = observation.registration_for(row.scope, row.name)
        unknown = row.scope not in observation.registrations
        registration_id = registration.id if registration else (row.github_runner_id if unknown else None)
        if registration_id is not None:
            await self._github_delete(row, registration_id)

    async def _github_delete(self, row: Runner, registration_id: int) -> bool:
        try:
            return await self.github.delete_runner(ScopeConfig.from_key(row.scope), registration_id)
        except GitHubError as exc:
            self._github_failed(exc, f"delete runner {row.name}")
            return False

    async def _delete_orphans(self, observation: Observation, rows: list[Runner]) -> None:
        """Servers owned by this installation whose runner row is gone or deleted: delete them."""
        if observation.servers is None:
            return
        live = {row.id for row in rows}
        for runner_id, server in observation.servers.items():
            if runner_id in live or runner_id in self._in_flight:
                continue
            known = self.store.runner(runner_id)
            if known is not None and known.state != RunnerState.DELETED:
                continue
            logger.info("deleting orphaned server %s (%s): no live runner owns it", server.name, server.id)
            self._spawn(self._cloud_call("delete_server", self.cloud.delete_server, server.id))

    def _retire_removed_pools(self, rows: list[Runner]) -> None:
        """A pool gone from the config: its idle and starting runners go now, busy ones when their job ends."""
        for row in rows:
            if row.pool in self.config.pools or row.id in self._in_flight:
                continue
            if row.state in (RunnerState.IDLE, RunnerState.BOOTING):
                self._spawn(self._retire(row, f"pool {row.pool} was removed from the configuration"))

    async def _retire(self, row: Runner, reason: str) -> None:
        """Remove an unneeded runner: its registration first, so GitHub cannot hand it a job meanwhile."""
        self._in_flight.add(row.id)
        try:
            if row.github_runner_id is not None and not await self._github_delete(row, row.github_runner_id):
                return  # busy (it took a job after all) or GitHub unavailable: judged again next pass
            moved = self._move(row, RunnerState.DELETING, reason)
            if moved is not None and moved.server_id is not None:
                await self._cloud_call("delete_server", self.cloud.delete_server, moved.server_id)
        finally:
            self._in_flight.discard(row.id)

    # -- scaling ----------------------------------------------------------------------------------

    def job_event(self, status: JobState, runner_name: str | None, job_id: int) -> None:
        """A job's webhook names the runner that took it: move one of ours at once instead of waiting for
        the next pass to see it busy. Until then it would count as a free runner, and the jobs queued
        meanwhile would wait for that pass to get runners of their own."""
        if runner_name is None or status is JobState.QUEUED:
            return
        row = self.store.runner_by_name(runner_name)
        if row is None:
            return
        state = RunnerState(row.state)
        if status is JobState.IN_PROGRESS and state in (RunnerState.BOOTING, RunnerState.IDLE):
            self._move(row, RunnerState.BUSY, f"took job {job_id} (webhook)", took_job=job_id)
        elif status is JobState.COMPLETED and state in (RunnerState.BOOTING, RunnerState.IDLE, RunnerState.BUSY):
            self._move(row, RunnerState.FINISHED, f"job {job_id} completed (webhook)", took_job=job_id)
            self.wake()

    def request_scale(self, pool_name: str) -> None:
        """The event fast path: scale one pool from what the store knows, without listing anything.

        Requests are coalesced per pool until the loop's next turn: a burst of webhooks arriving together
        costs one scaling decision, not one per webhook, and each still waits no longer than a loop turn.
        """
        if pool_name in self.config.pools and pool_name not in self._scale_requested:
            self._scale_requested.add(pool_name)
            asyncio.get_running_loop().call_soon(self._scale_requested_pool, pool_name)

    def _scale_requested_pool(self, pool_name: str) -> None:
        self._scale_requested.discard(pool_name)
        if pool_name in self.config.pools:
            self.scale(pool_name)

    def demand(self, pool_name: str) -> list[QueuedJob]:
        """Queued jobs that count as demand: fresh ones, and old ones GitHub recently confirmed as queued."""
        return self.judge_demand(pool_name).wanted

    def judge_demand(self, pool_name: str) -> Demand:
        """Which queued jobs get runners now, and which are held back for a while.

        An old job nobody has confirmed waits for the next full pass to ask GitHub, so a cancelled or
        already-taken job does not get a runner. A job whose own runner has just turned busy is not demand
        either: that runner most likely took it, and the `in_progress` webhook saying so is on its way
        (without this, the race between a pass and that webhook started a second runner for the job).
        A job whose runners went to other jobs `max_runners_per_job` times is held: each further runner is
        a likely duplicate (the job's own runner may be the one about to free up), so it gets another only
        once GitHub confirms it still queued after a backoff that doubles with every further diversion.
        """
        now = utcnow()
        stale = timedelta(seconds=self.config.stale_job_check)
        fresh_after = confirmed_after = now - stale
        busy_since = now - BUSY_COVERS_JOB
        taken = self.store.jobs_of_runners(pool_name, [RunnerState.BUSY], changed_since=busy_since)
        bound = self.config.max_runners_per_job
        demand = Demand()
        for job in self.store.demand(pool_name):
            if job.id in taken:
                continue
            confirmed = job.checked_at is not None and job.checked_at >= confirmed_after
            if job.received_at < fresh_after and not confirmed:
                continue
            if job.runners_diverted >= bound:
                hold = min(stale * 2 ** (job.runners_diverted - bound), MAX_DIVERTED_HOLD)
                due = (job.diverted_at or now) + hold
                if job.checked_at is None or job.checked_at < due:
                    demand.held.append(job)
                    continue
            demand.wanted.append(job)
        if demand.held:
            self.log_once.warning(
                f"held:{pool_name}",
                f"pool {pool_name}: {len(demand.held)} queued job(s) held back: their runners went to other jobs "
                f"{bound} times (max_runners_per_job); each gets another once GitHub confirms it still queued",
            )
        return demand

    def pool_counts(
        self, pool_name: str, demand: list[QueuedJob] | None = None, states: Counter[RunnerState] | None = None
    ) -> PoolCounts:
        """Runners by kind and the demand waiting for them; pass what the caller already read."""
        states = self.store.runner_states(pool_name) if states is None else states
        return PoolCounts(
            starting=sum(states[state] for state in STARTING_STATES),
            idle=states[RunnerState.IDLE],
            busy=states[RunnerState.BUSY],
            queued_jobs=len(self.demand(pool_name) if demand is None else demand),
        )

    def pool_ready(self, pool_name: str) -> tuple[bool, str | None]:
        """The pool's ready condition: the worst of its parts, with the reason."""
        if pool_name in self.drained:
            return False, "drained by an operator"
        check = self.checks.get(pool_name)
        if check is None or check.problems is None:
            if check is not None and check.error is not None:
                wait = max(check.due - self.clock(), 0.0)
                return False, f"cannot check the pool against the cloud (retrying in {wait:.0f}s): {check.error}"
            return False, "not checked against the cloud yet"
        if check.problems:
            return False, "; ".join(check.problems)
        backoff = self.backoffs.get(pool_name)
        if backoff is not None and backoff.waiting:
            return False, f"creation paused for {backoff.remaining_s:.0f}s after failures"
        paused_s = self.github.paused_for(self.config.pools[pool_name].scope)
        if paused_s > 0:
            return False, f"GitHub calls paused for {paused_s:.0f}s (rate limited; resuming at the reset)"
        return True, None

    def set_drained(self, pool_name: str, drained: bool) -> None:
        """Drain: no new runners and idle ones retired (busy ones finish); undrain to resume."""
        self.store.set_drained(pool_name, drained)
        (self.drained.add if drained else self.drained.discard)(pool_name)
        if pool_name in self.config.pools:
            self.scale(pool_name)

    async def delete_runner(self, runner_id: str) -> str:
        """An operator's delete: 'deleting', 'busy' (refused: it runs a job), 'gone' or 'missing'."""
        row = self.store.runner(runner_id)
        if row is None:
            return "missing"
        state = RunnerState(row.state)
        if state is RunnerState.BUSY:
            return "busy"
        if state in (RunnerState.DELETING, RunnerState.DELETED):
            return "gone"
        if row.id in self._in_flight:
            return "busy"
        if state in (RunnerState.PENDING, RunnerState.CREATING):
            self._move(row, RunnerState.FAILED, "deleted by an operator while starting")
            self.wake()
            return "deleting"
        await self._retire(row, "deleted by an operator")
        after = self.store.runner(runner_id)
        return "deleting" if after is not None and after.state == RunnerState.DELETING.value else "busy"

    def scale(self, pool_name: str) -> None:
        pool = self.config.pools[pool_name]
        ready, _ = self.pool_ready(pool_name)
        demand = self.demand(pool_name)
        counts = self.pool_counts(pool_name, demand)
        if pool_name in self.drained:
            plan = plan_scale(PoolCounts(idle=counts.idle, busy=counts.busy), min_idle=0, max_runners=0)
        else:
            plan = plan_scale(counts, min_idle=pool.min_idle, max_runners=pool.max_runners)
        if ready and plan.create:
            free = counts.starting + counts.idle
            reason = f"scale up: {counts.queued_jobs} queued, {free} free, min_idle {pool.min_idle}"
            for job_id in self._jobs_to_cover(pool_name, demand, plan.create):
                row = self.store.add_runner(
                    pool_name,
                    self.config.name_prefix,
                    list(pool.labels),
                    scope=pool.scope.key,
                    job_id=job_id,
                    reason=reason if job_id is None else f"{reason}; for job {job_id}",
                )
                if job_id is not None:
                    self.store.runner_started_for(job_id)
                RUNNER_TRANSITIONS.labels(pool_name, RunnerState.PENDING.value).inc()
                logger.info(
                    "runner %s (pool %s): -> pending: %s",
                    row.name,
                    pool_name,
                    reason,
                    extra={
                        "runner": row.name,
                        "pool": pool_name,
                        "from_state": None,
                        "to_state": "pending",
                        "reason": reason,
                    },
                )
                self._in_flight.add(row.id)
                self._spawn(self._create(row, pool_name, pool))
        if plan.surplus_idle:
            self._retire_surplus(pool_name, pool, plan.surplus_idle)

    def _jobs_to_cover(self, pool_name: str, demand: list[QueuedJob], count: int) -> list[int | None]:
        """Which queued job each new runner is started for (oldest uncovered first; None for warm ones).

        A job is covered while a runner started for it is still starting or idle; once that runner is
        busy (perhaps with another job) the job is uncovered again and may get another runner, up to
        `max_runners_per_job`.
        """
        free = [RunnerState.PENDING, RunnerState.CREATING, RunnerState.BOOTING, RunnerState.IDLE]
        covered = self.store.jobs_of_runners(pool_name, free)
        uncovered: list[int | None] = [job.id for job in demand if job.id not in covered]
        return (uncovered + [None] * count)[:count]

    def _retire_surplus(self, pool_name: str, pool: PoolConfig, surplus: int) -> None:
        now = utcnow()
        idle = [
            row
            for row in self.store.runners(pool=pool_name, states=[RunnerState.IDLE])
            if row.id not in self._in_flight and (now - row.state_changed_at).total_seconds() >= pool.idle_grace
        ]
        for row in idle[:surplus]:
            self._spawn(self._retire(row, "scale down: idle above desired"))

    async def _create(self, row: Runner, pool_name: str, pool: PoolConfig) -> None:
        try:
            async with self._create_slots:
                await self._create_steps(row, pool_name, pool)
        finally:
            self._in_flight.discard(row.id)

    async def _create_steps(self, row: Runner, pool_name: str, pool: PoolConfig) -> None:
        backoff = self.backoffs.setdefault(pool_name, Backoff(clock=self.clock))
        try:
            jit = await self.github.generate_jit_config(pool.scope, row.name, list(pool.labels), pool.runner_group)
        except GitHubError as exc:
            self._github_failed(exc, f"JIT config for {row.name}")
            backoff.failed()
            self._move(row, RunnerState.FAILED, f"GitHub refused a JIT config: {exc}")
            return
        self.store.update_runner(row.id, github_runner_id=jit.runner_id)
        row.github_runner_id = jit.runner_id
        moved = self._move(row, RunnerState.CREATING, "server requested")
        if moved is None:
            return
        self._observe_queued_to_create(moved)
        user_data = render_user_data(
            self.template, jit_config=jit.encoded, runner_name=row.name, pool=pool_name, labels=list(pool.labels)
        )
        spec = self._server_spec(pool_name, pool, runner_id=row.id, runner_name=row.name, user_data=user_data)
        try:
            server = await self._cloud_call("create_server", self.cloud.create_server, spec, raise_errors=True)
        except CloudQuotaExceeded as exc:
            wait = backoff.failed(at_least_s=self.config.cloud.quota_retry)
            self.log_once.warning(f"quota:{pool_name}", f"pool {pool_name}: out of quota, waiting {wait:.0f}s: {exc}")
            self._move(moved, RunnerState.FAILED, f"quota exceeded: {exc}")
            return
        except CloudError as exc:
            wait = backoff.failed()
            self.log_once.warning(
                f"create:{pool_name}", f"pool {pool_name}: create failed, retry in {wait:.0f}s: {exc}"
            )
            self._move(moved, RunnerState.FAILED, f"create failed: {exc}")
            return
        assert server is not None
        backoff.succeeded()
        self.log_once.clear(f"quota:{pool_name}")
        self._move(moved, RunnerState.BOOTING, f"server {server.id} created", server_id=server.id)

    def _observe_queued_to_create(self, row: Runner) -> None:
        job = self.store.job(row.job_id) if row.job_id is not None else None
        if job is not None:
            QUEUED_TO_CREATE_SECONDS.labels(row.pool).observe((utcnow() - job.received_at).total_seconds())

    def _server_spec(
        self, pool_name: str, pool: PoolConfig, *, runner_id: str, runner_name: str, user_data: str
    ) -> ServerSpec:
        metadata = {
            **pool.metadata,
            META_INSTALLATION: self.config.installation,
            META_POOL: pool_name,
            META_RUNNER: runner_id,
        }
        return ServerSpec(
            name=runner_name,
            image=pool.image,
            flavor=pool.flavor,
            networks=tuple(pool.networks),
            security_groups=tuple(pool.security_groups),
            key_name=pool.key_name,
            availability_zone=pool.availability_zone,
            config_drive=pool.config_drive,
            boot_volume_gb=pool.boot_volume_gb,
            boot_volume_type=pool.boot_volume_type,
            volumes=tuple(self.config.volumes_for(pool_name)),
            metadata=metadata,
            user_data=user_data,
        )

    # -- plumbing ---------------------------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, object]) -> asyncio.Task[Any]:
        """Run beside the pass, tracked so `drain` can wait for it."""
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _cloud_call(
        self, operation: str, fn: Callable[..., object], *args: object, raise_errors: bool = False
    ) -> CloudServer | None:
        """A blocking cloud call in a worker thread; creates have threads of their own, so a burst of
        slow creates never makes listings and deletes wait for a thread."""
        started = time.perf_counter()
        executor = self._create_threads if operation == "create_server" else self._cloud_threads
        try:
            result = await asyncio.get_running_loop().run_in_executor(executor, fn, *args)
        except CloudError as exc:
            CLOUD_CALLS.labels(operation, type(exc).__name__).inc()
            if raise_errors:
                raise
            self.log_once.warning(f"cloud:{operation}", f"{operation} failed: {exc}")
            return None
        finally:
            CLOUD_CALL_SECONDS.labels(operation).observe(time.perf_counter() - started)
        CLOUD_CALLS.labels(operation, "ok").inc()
        return result if isinstance(result, CloudServer) else None

    def _github_failed(self, exc: GitHubError, what: str) -> None:
        GITHUB_ERRORS.labels(type(exc).__name__).inc()
        self.log_once.warning(f"github:{what.split(' ', 1)[0]}", f"GitHub: {what} failed: {exc}")

    def _publish(self, rows: list[Runner]) -> None:
        """Gauges and pool status rows, from this pass's view."""
        for status, count in self.store.job_counts().items():
            JOBS.labels(status).set(count)
        counts = Counter((row.pool, row.state) for row in self.store.runners(states=LIVE_STATES))
        pools = set(self.config.pools) | {pool for pool, _ in counts}
        for pool in pools:
            for state in RunnerState:
                if state is not RunnerState.DELETED:
                    RUNNERS.labels(pool, state.value).set(counts[(pool, state.value)])
        for name in self.config.pools:
            ready, reason = self.pool_ready(name)
            self.store.set_pool_status(name, generation=self.generation, ready=ready, reason=reason)
        for pool in pools - set(self.config.pools):
            remaining = sum(n for (p, _), n in counts.items() if p == pool)
            self.store.set_pool_status(
                pool, generation=self.generation, ready=False, reason=f"removed; {remaining} runners left", removed=True
            )
