"""The engine: builds its parts, runs their loops, and stops them. One per process, all on one event loop.

    webhook ──> Intake (group commit) ──Engine.recorded───────────────────┐
    operator (Operator: API, SIGHUP reload) ──wake(pool)──────────────────┤
    Housekeeper's look (Observer, every reconcile_interval) ──wake(all)───┤
    ReplicaBus (another replica's NOTIFY) ──wake──────────────────────────┤
                                                                          v
                   KeyedWorkers: one worker per pool, wakes folded, never two passes of one pool
                                    │ PoolReconciler.reconcile_pool(pool) -> requeue_after
                                    v
         RunnerJudge (policy.judge_runner) ─> Mover (guarded transitions, one transaction per step)
         deleting runners ─────────────────────────────────────────> Supervisor: Cleaner.delete
         Scaler (policy.judge_demand, plan_scale) ─> intents written ─> Supervisor: Creator.create
                  surplus idle, removed pools, drains ─────────────> Supervisor: Cleaner.retire
         snapshot ─> StatusPublisher (gauges, status row when changed)

The parts, each in its own module: `PoolReconciler` (one pool's pass), `Housekeeper` (the look and what
follows it: orphans, removed clouds; pool checks, job upkeep, pruning), `Membership` (leases: which pools
this replica works; what the database says of the others), `ReplicaBus` (messages between replicas),
`RunnerDeletes` (an operator's delete, here or passed on), `Reconfigurer` (a reload adopted whole),
`PoolReadiness`, `Running` (the config in force, shared by all), and `loops.py` (the periodic loops). The
API (and through it the CLI) calls `engine/operator.py`'s `Operator` and nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from string import Template
from typing import Any

from corral.clock import SYSTEM_CLOCK, ClockLike, as_clock
from corral.cloud.clouds import CloudSet
from corral.config import CorralConfig
from corral.engine import messages
from corral.engine.backoff import Backoff, LogOnce
from corral.engine.caches import CacheVolumes
from corral.engine.checks import PoolChecker
from corral.engine.cleaner import Cleaner
from corral.engine.creator import Creator
from corral.engine.deletes import RunnerDeletes
from corral.engine.housekeeper import Housekeeper
from corral.engine.job_traces import EVERY_S as TRACES_EVERY_S
from corral.engine.job_traces import JobTraces
from corral.engine.jobs import JobTracker
from corral.engine.judge import RunnerJudge
from corral.engine.leases import LeaseKeeper
from corral.engine.loops import every, start_loop
from corral.engine.membership import Membership
from corral.engine.observe import Observer
from corral.engine.pauses import PoolPauses
from corral.engine.quota import QuotaBudget
from corral.engine.readiness import PoolReadiness
from corral.engine.reconciler import PoolReconciler
from corral.engine.reconfigure import Reconfigurer
from corral.engine.replicas import ReplicaBus
from corral.engine.rollouts import Rollouts
from corral.engine.running import Running
from corral.engine.scaler import Scaler
from corral.engine.scalesets import ScaleSetIntake
from corral.engine.status import PoolSnapshot, StatusPublisher
from corral.engine.supervisor import ActionKind, Supervisor
from corral.engine.transitions import Mover
from corral.engine.workers import KeyedWorkers
from corral.executors import Executors, thread_pool
from corral.github.client import GitHubClient
from corral.model import IntakeResult
from corral.store import Store, pools
from corral.store.wakes import WakeListener
from corral.tracing import JobTracing
from corral.userdata import load_template

logger = logging.getLogger("corral.engine")

RETENTION_EVERY_S = 3600.0
SHUTDOWN_WAIT_S = 60.0
"""How long a stopping corral waits for creates and deletes under way (what it abandons, the next start finds)."""


class Engine:
    """Keeps every pool at its desired state: the assembly of the parts, and their loops."""

    def __init__(
        self,
        config: CorralConfig,
        store: Store,
        cloud: CloudSet,
        github: GitHubClient,
        *,
        user_data_template: Template | None = None,
        clock: ClockLike = SYSTEM_CLOCK,
        replica: str = "corral",
        reload_config: Callable[[], Awaitable[list[str]]] | None = None,
        executors: Executors = thread_pool,
        tracing: JobTracing | None = None,
    ) -> None:
        """`executors` makes the executors of blocking cloud calls: threads, or inline under `corral simulate`;
        `tracing`, where completed jobs' traces go (None: no traces, and no loop for them)."""
        self.running = Running(config, user_data_template or load_template(config.user_data_template))
        running = self.running
        self.store = store
        self.cloud = cloud
        self.github = github
        self.clock = clock = as_clock(clock)
        """The one clock every part reads time from (a test drives the engine in virtual time with a LoopClock)."""
        self.log_once = LogOnce(logger, clock=clock)
        self.supervisor = Supervisor()
        self._stop = asyncio.Event()
        self._loops: list[asyncio.Task[None]] = []
        self._wakes: WakeListener | None = None
        self._cloud_threads = executors(config.cloud.threads, "corral-cloud")
        self.leases = LeaseKeeper(
            store,
            replica,
            lease_s=config.lease_time,
            busy=self.supervisor.group_busy,
            log_once=self.log_once,
            clock=clock,
        )
        self.mover = Mover(store, fence=self.leases.fence, clock=clock)
        self.job_traces = JobTraces(store, tracing, self.leases, clock) if tracing is not None else None
        self.checker = PoolChecker(cloud, self._cloud_threads, self.log_once, clock.monotonic, running)
        self.rollouts = Rollouts(running, clock)
        self.workers = KeyedWorkers(lambda name: self.reconciler.reconcile_pool(name), clock)
        self.scalesets = ScaleSetIntake(
            running,
            github,
            store,
            replica,
            lambda pool: self.workers.wake(pool),
            self.log_once,
            clock=clock,
        )
        pauses = PoolPauses(store, self.log_once, clock)
        self.readiness = PoolReadiness(running, self.checker, github, lambda pool: self.creator.paused_s(pool))
        self.quotas = {name: QuotaBudget(clock) for name in cloud.names}
        """Each cloud's quota budget (one dict, shared by the parts; a reload adds and removes clouds in it)."""
        self.caches = CacheVolumes(store, cloud, self._cloud_threads, self.log_once, clock, self.quotas)
        self.creator = Creator(
            self.mover,
            cloud,
            github,
            self.checker,
            pauses,
            self.log_once,
            max_concurrent_creates=config.cloud.max_concurrent_creates,
            jit_concurrency=config.tuning.jit_concurrency,
            scale_set_jit=self.scalesets.jit_config,
            running=running,
            caches=self.caches,
            image_for=self.rollouts.image_for_new_runner,
            ready_clouds=self.readiness.ready_clouds,
            clock=clock,
            executors=executors,
        )
        self.cleaner = Cleaner(
            self.mover,
            cloud,
            github,
            self._cloud_threads,
            self.log_once,
            running,
            clock=clock,
        )
        self.jobs = JobTracker(store, github, self.log_once, clock)
        self.status = StatusPublisher(store, clock)
        self.membership = Membership(
            running,
            store,
            leases=self.leases,
            workers=self.workers,
            scalesets=self.scalesets,
            supervisor=self.supervisor,
            pauses=pauses,
            rollouts=self.rollouts,
            quotas=self.quotas,
            clock=clock,
        )
        self.housekeeper = Housekeeper(
            running,
            store,
            cloud,
            github,
            leases=self.leases,
            membership=self.membership,
            workers=self.workers,
            supervisor=self.supervisor,
            cleaner=self.cleaner,
            checker=self.checker,
            jobs=self.jobs,
            caches=self.caches,
            quotas=self.quotas,
            log_once=self.log_once,
            cloud_threads=self._cloud_threads,
            clock=clock,
            stopping=self._stop,
        )
        self.judge = RunnerJudge(
            running,
            self.mover,
            self.supervisor,
            self.creator,
            self.housekeeper.ask_github_in,
            self.rollouts,
            clock=clock,
            lost_a_job=self.jobs.lost.heard,
        )
        self.scaler = Scaler(
            running=running,
            readiness=self.readiness.pool_ready,
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
            others=self.membership.sharing_quota,
            clock=clock.now,
            wall=clock.now,
            ask_github=self.housekeeper.ask_github_in,
        )
        self.observer = Observer(self.housekeeper.look, self.housekeeper.observed, running, clock)
        self.reconciler = PoolReconciler(
            running,
            store,
            observer=self.observer,
            judge=self.judge,
            scaler=self.scaler,
            cleaner=self.cleaner,
            supervisor=self.supervisor,
            status=self.status,
            workers=self.workers,
            leases=self.leases,
            scalesets=self.scalesets,
        )
        self.bus = ReplicaBus(
            running,
            store,
            leases=self.leases,
            workers=self.workers,
            observer=self.observer,
            supervisor=self.supervisor,
            membership=self.membership,
            delete_here=lambda runner_id: self.deletes.delete_runner(runner_id),
            reload_config=reload_config,
        )
        self.deletes = RunnerDeletes(
            store,
            leases=self.leases,
            workers=self.workers,
            supervisor=self.supervisor,
            mover=self.mover,
            cleaner=self.cleaner,
            bus=self.bus,
        )
        self.reconfigure = Reconfigurer(
            running,
            cloud,
            checker=self.checker,
            check_due_pools=self.housekeeper.check_due_pools,
            membership=self.membership,
            workers=self.workers,
            quotas=self.quotas,
            cloud_threads=self._cloud_threads,
            clock=clock,
        )

    # -- what the parts share, read here (the service, the operator and `engine/timeline.py`) --------

    @property
    def config(self) -> CorralConfig:
        return self.running.config

    @property
    def generation(self) -> int:
        return self.running.generation

    @property
    def drained(self) -> set[str]:
        return self.running.drained

    @property
    def passes(self) -> int:
        """Looks at both far ends completed (each followed by a pass of every pool)."""
        return self.housekeeper.passes

    def snapshot(self, name: str) -> PoolSnapshot:
        """The pool's status as its last pass here left it (empty if none has)."""
        return self.status.snapshots.get(name) or PoolSnapshot(name)

    # -- life cycle -------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until `stop` is set, then wait for actions under way."""
        await self._start_workers(stop)
        if self.leases.enabled:
            self._wakes = WakeListener(
                self.store.url,
                asyncio.get_running_loop(),
                self.bus.received,
                self.observer.refresh,
                health=self.store.health,
            )
            self._wakes.start()
        housekeeper, renew_every_s = self.housekeeper, self.leases.renew_every_s
        self._loops = [
            start_loop(self.observer.run(self._stop), "corral-observer"),
            start_loop(
                every(
                    self._stop,
                    ActionKind.POOL_CHECK,
                    housekeeper.check_due_pools,
                    housekeeper.check_wait_s,
                    self.checker.sooner,
                ),
                "corral-checks",
            ),
            start_loop(
                self._every(ActionKind.JOB_UPKEEP, housekeeper.job_upkeep, None, housekeeper.ask_github), "corral-jobs"
            ),
            start_loop(self._every(ActionKind.PRUNE, housekeeper.prune, RETENTION_EVERY_S), "corral-prune"),
        ]
        if self.job_traces is not None:
            self._loops.append(
                start_loop(
                    self._every(ActionKind.JOB_TRACES, self.job_traces.send_completed, TRACES_EVERY_S), "corral-traces"
                )
            )
        if self.leases.enabled:
            # On SQLite one corral holds every pool and a lease tick does nothing: no loop for it (its ticks
            # were a twelfth of a simulated day's CPU).
            self._loops.append(
                start_loop(self._every(ActionKind.LEASES, self._lease_tick, renew_every_s), "corral-leases")
            )
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
        try:
            await self.rollouts.save_all(self.store)
        except Exception as exc:
            logger.warning("stopping without saving the rollouts' last counts: %s", exc)
        if self._wakes is not None:
            self._wakes.stop()
        with contextlib.suppress(Exception):
            await self.leases.leave()
        self.creator.close()
        self._cloud_threads.shutdown(wait=False, cancel_futures=True)
        if self.job_traces is not None:
            self.job_traces.close()

    async def _lease_tick(self) -> None:
        """Renew, take and hand over pools; a pool taken over is checked against the cloud at once."""
        if await self.membership.lease_tick():
            self.checker.sooner.set()

    def _every(
        self,
        kind: ActionKind,
        action: Callable[[], Awaitable[object]],
        every_s: float | None,
        sooner: asyncio.Event | None = None,
    ) -> Coroutine[Any, Any, None]:
        """`action` run every `every_s` seconds (every `reconcile_interval`, as the running config says, when
        None) until corral stops, or as soon as `sooner` is set."""

        def interval() -> float:
            return every_s if every_s is not None else self.running.config.reconcile_interval

        return every(self._stop, kind, action, interval, sooner)

    async def _start_workers(self, stop: asyncio.Event) -> None:
        """Read what the store says about pools (operators' drains, pools with runners left) and start their
        workers; a database that is not there yet is waited for, with backoff, rather than ending corral."""
        backoff = Backoff(base_s=1.0, cap_s=60.0, clock=self.clock)
        while not stop.is_set():
            try:
                self.membership.restore(await self.store.run(pools.statuses), self.leases.holds)
                await self.membership.sync_workers()
                await self.membership.lease_tick()
                return
            except Exception as exc:
                wait = backoff.failed()
                self.log_once.warning("start", f"cannot read the database, trying again in {wait:.0f}s: {exc}")
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await stop.wait()

    # -- wakes ------------------------------------------------------------------------------------

    def wake(self, pools_to_wake: Iterable[str] | None = None) -> None:
        """Reconcile these pools soon (all of them, after a fresh look at the far ends, when None: on every
        replica)."""
        if pools_to_wake is None:
            self.observer.refresh()
            if self.leases.enabled:
                self.bus.notify({messages.LOOK_NOW})
            return
        for pool in pools_to_wake:
            self.workers.wake(pool)

    def pool_of_runner(self, name: str) -> str | None:
        """The pool of one of corral's runners, read from its name by the config in force (None: the intake
        asks the store): the webhooks of a job taken and finished wake its runner's pool without a query."""
        return self.running.config.pool_of_runner(name)

    def held_elsewhere(self, pool: str) -> bool:
        """Another replica reconciles `pool` (or none does yet): the intake wakes its owner by NOTIFY in the
        transaction that records the webhooks (`jobs.record`), not with a transaction of its own."""
        return self.leases.enabled and not self.leases.holds(pool)

    def recorded(self, intake: IntakeResult) -> None:
        """Webhooks were recorded: new demand is acted on at once; news of runners taking or finishing jobs
        waits a moment (`tuning.news_delay`), so that one pass takes many of them at once. Pools held by
        other replicas were told in the intake's own transaction (`held_elsewhere`)."""
        for pool in intake.demand:
            self.workers.wake(pool)
        for pool in intake.news:
            self.workers.wake(pool, after=self.running.config.tuning.news_delay)

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
