"""The simulated far ends: one cloud and one GitHub, in process, on the simulation's virtual-time loop.

corral's engine runs unchanged against them: it creates servers, asks for JIT configs, lists runners, hears
webhooks and deletes what is done. The world does what the real ends would, on the loop's timers:

- A server boots for a time drawn from `BootTimes` (seeded), then its guest starts the runner whose JIT
  config its user data carries, and the runner comes online; with `boot_failure_rate` a server goes to
  ERROR instead.
- GitHub hands a runner that comes online the oldest queued job it can serve (its scope covers the job's
  repository, and every label the job asks for is one of the runner's); a job queued while fitting runners
  are idle starts at once on the one idle longest. This is the sandbox's scheduler, which mirrors GitHub's.
- The ephemeral runner runs its one job for the trace's duration, reports completion, deregisters and exits;
  its server powers off, and waits for corral to delete it.
- Each job's news (queued, in progress, completed) reaches corral as a webhook through `deliver`.

The world keeps a `Ledger` of what happened when (each job's queued, started and completed times, each
server's life), from which the report is made; it never reads corral's store.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from corral.clock import Clock
from corral.cloud.provider import META_POOL, META_RUNNER, CloudServer
from corral.config import ScopeConfig
from corral.github.client import scope_path
from corral.policy import IMPLICIT_LABELS, in_scope
from corral.simulate.settings import BootTimes

DeliverNews = Callable[["SimJob", str], None]
"""Tells corral of a job's news (`queued`, `in_progress`, `completed`), as GitHub's webhook would."""

ERROR_FAULT = "simulated boot failure"


@dataclass
class SimJob:
    """One job of the trace, as the simulated GitHub holds it. Times are the loop's seconds."""

    id: int
    run_id: int
    repository: str
    labels: tuple[str, ...]
    duration: float
    workflow: str | None
    pool: str | None
    """The pool corral's own routing gives it (None: unmatched)."""
    queued_at: float
    status: str = "queued"
    conclusion: str | None = None
    started_at: float | None = None
    completed_at: float | None = None
    runner: SimRunner | None = None
    timer: asyncio.TimerHandle | None = None

    @property
    def wanted(self) -> frozenset[str]:
        return frozenset(label.lower() for label in self.labels)


@dataclass
class SimRunner:
    """A JIT runner registered at GitHub."""

    id: int
    name: str
    scope: ScopeConfig
    labels: tuple[str, ...]
    encoded: str
    status: str = "offline"
    job: SimJob | None = None
    server: SimServer | None = None

    @property
    def label_set(self) -> frozenset[str]:
        return frozenset(label.lower() for label in self.labels) | IMPLICIT_LABELS

    def fits(self, job: SimJob) -> bool:
        return job.wanted <= self.label_set and in_scope(self.scope, job.repository)


@dataclass
class SimServer:
    """A server in the simulated cloud, and its life in the loop's seconds."""

    id: str
    name: str
    cloud: str
    installation: str
    pool: str
    runner_id: str
    image_id: str
    user_data: str = field(repr=False)
    created_at: float
    created_wall: datetime
    status: str = "BUILD"
    fault: str | None = None
    online_at: float | None = None
    busy_at: float | None = None
    done_at: float | None = None
    deleted_at: float | None = None
    runner: SimRunner | None = None
    cache: str | None = None
    """`warm` or `cold` when it got one of its pool's cache volumes (one an earlier server used, or a new one);
    None when it got none."""

    def view(self) -> CloudServer:
        return CloudServer(
            id=self.id,
            name=self.name,
            status=self.status,
            installation=self.installation,
            pool=self.pool,
            runner_id=self.runner_id,
            created_at=self.created_wall,
            fault=self.fault,
            image_id=self.image_id,
        )


@dataclass
class Ledger:
    """What happened, for the report: every job and every server the simulation saw."""

    jobs: list[SimJob] = field(default_factory=list)
    servers: list[SimServer] = field(default_factory=list)


class World:
    """The far ends' shared state and the loop's timers that move it."""

    def __init__(
        self,
        clock: Clock,
        *,
        boot: BootTimes,
        boot_by_pool: Mapping[str, BootTimes] | None = None,
        boot_failure_rate: float = 0.0,
        seed: int = 0,
        deliver: DeliverNews | None = None,
    ) -> None:
        self.clock = clock
        self.boot = boot
        self.boot_by_pool = dict(boot_by_pool or {})
        """Pools whose boots differ from `boot` (measured in a store's history)."""
        self.boot_failure_rate = boot_failure_rate
        self.rng = random.Random(seed)
        self.deliver: DeliverNews = deliver or (lambda job, action: None)
        self.ledger = Ledger()
        self.servers: dict[str, SimServer] = {}
        self.runners: dict[int, SimRunner] = {}
        self.jobs: dict[int, SimJob] = {}
        self._by_encoded: dict[str, SimRunner] = {}
        self._queued: dict[int, SimJob] = {}
        """Jobs waiting for a runner, oldest first (insertion order)."""
        self._idle: dict[int, SimRunner] = {}
        """Runners online without a job, idle longest first."""
        self._server_ids = itertools.count(1)
        self._runner_ids = itertools.count(1)
        self._job_ids = itertools.count(1)
        self.unfinished = 0
        """Jobs routed to a pool and not completed: the simulation ends when none is left."""
        self.all_done = asyncio.Event()

    def wall(self, moment: float) -> datetime:
        """The wall time of a moment in the loop's seconds."""
        return self.clock.now() - timedelta(seconds=self.clock.monotonic() - moment)

    def _later(self, delay: float, callback: Callable[[], None]) -> asyncio.TimerHandle:
        return asyncio.get_running_loop().call_later(max(delay, 0.0), callback)

    # -- the cloud ------------------------------------------------------------------------------------------

    def create_server(
        self, cloud: str, installation: str, name: str, metadata: dict[str, str], user_data: str, image_id: str
    ) -> SimServer:
        """A server in BUILD; it boots (or fails) after its drawn boot time."""
        server = SimServer(
            id=f"sim-{next(self._server_ids):08d}",
            name=name,
            cloud=cloud,
            installation=installation,
            pool=metadata.get(META_POOL, ""),
            runner_id=metadata.get(META_RUNNER, ""),
            image_id=image_id,
            user_data=user_data,
            created_at=self.clock.monotonic(),
            created_wall=self.clock.now(),
        )
        self.servers[server.id] = server
        self.ledger.servers.append(server)
        fails = self.boot_failure_rate > 0 and self.rng.random() < self.boot_failure_rate
        delay = self.boot_by_pool.get(server.pool, self.boot).sample(self.rng)
        self._later(delay, lambda: self._booted(server, fails))
        return server

    def _booted(self, server: SimServer, fails: bool) -> None:
        user_data, server.user_data = server.user_data, ""  # read once by the guest: the ledger keeps no copy
        if server.deleted_at is not None:
            return
        if fails:
            server.status, server.fault = "ERROR", ERROR_FAULT
            return
        server.status = "ACTIVE"
        runner = next((r for code, r in self._by_encoded.items() if code in user_data), None)
        if runner is None or runner.server is not None or runner.id not in self.runners:
            return  # no JIT config it can use: the guest starts nothing, as on a real cloud
        runner.server, server.runner = server, runner
        self._connect(runner)

    def delete_server(self, server_id: str) -> None:
        """The server is gone at once; a runner on it goes offline, and a job it ran fails."""
        server = self.servers.pop(server_id, None)
        if server is None:
            return
        server.deleted_at = self.clock.monotonic()
        runner = server.runner
        if runner is not None and runner.id in self.runners:
            runner.status = "offline"
            self._idle.pop(runner.id, None)
            if runner.job is not None and runner.job.status == "in_progress":
                self._complete(runner.job, "failure", runner_exits=False)

    def list_servers(self, cloud: str) -> list[CloudServer]:
        return [server.view() for server in self.servers.values() if server.cloud == cloud]

    # -- GitHub: runners ------------------------------------------------------------------------------------

    def register(self, scope: ScopeConfig, name: str, labels: list[str]) -> SimRunner:
        """A JIT runner, offline until its server boots with its config."""
        runner_id = next(self._runner_ids)
        runner = SimRunner(
            id=runner_id,
            name=name,
            scope=scope,
            labels=tuple(labels),
            encoded=f"corral-simulated-jit-config-{runner_id:010d}",
        )
        self.runners[runner.id] = runner
        self._by_encoded[runner.encoded] = runner
        return runner

    def runners_at(self, scope: ScopeConfig) -> list[SimRunner]:
        where = scope_path(scope).lower()
        return [runner for runner in self.runners.values() if scope_path(runner.scope).lower() == where]

    def deregister(self, runner_id: int) -> bool:
        """False while the runner runs a job (GitHub's 422); an online runner then exits."""
        runner = self.runners.get(runner_id)
        if runner is None:
            return True
        if runner.job is not None and runner.job.status == "in_progress":
            return False
        self._forget(runner)
        return True

    def _forget(self, runner: SimRunner) -> None:
        """The registration is gone; a runner that was online exits and its server powers off."""
        self.runners.pop(runner.id, None)
        self._by_encoded.pop(runner.encoded, None)
        self._idle.pop(runner.id, None)
        if runner.status == "online" and runner.server is not None:
            runner.server.status = "SHUTOFF"
            runner.server.done_at = runner.server.done_at or self.clock.monotonic()
        runner.status = "offline"

    def _connect(self, runner: SimRunner) -> None:
        runner.status = "online"
        if runner.server is not None:
            runner.server.online_at = self.clock.monotonic()
        job = next((each for each in self._queued.values() if runner.fits(each)), None)
        if job is not None:
            self._start(job, runner)
        else:
            self._idle[runner.id] = runner

    # -- GitHub: jobs ---------------------------------------------------------------------------------------

    def submit(
        self, repository: str, labels: tuple[str, ...], duration: float, workflow: str | None, pool: str | None
    ) -> SimJob:
        """A job queued now: corral hears of it, and an idle runner that fits takes it at once."""
        job_id = next(self._job_ids)
        job = SimJob(
            id=job_id,
            run_id=job_id,
            repository=repository,
            labels=labels,
            duration=duration,
            workflow=workflow,
            pool=pool,
            queued_at=self.clock.monotonic(),
        )
        self.jobs[job.id] = job
        self.ledger.jobs.append(job)
        if pool is not None:
            self.unfinished += 1
            self.all_done.clear()
        self._queued[job.id] = job
        self.deliver(job, "queued")
        runner = next((each for each in self._idle.values() if each.fits(job)), None)
        if runner is not None:
            self._start(job, runner)
        return job

    def _start(self, job: SimJob, runner: SimRunner) -> None:
        self._queued.pop(job.id, None)
        self._idle.pop(runner.id, None)
        now = self.clock.monotonic()
        job.status, job.started_at, job.runner, runner.job = "in_progress", now, runner, job
        if runner.server is not None:
            runner.server.busy_at = now
        self.deliver(job, "in_progress")
        job.timer = self._later(job.duration, lambda: self._complete(job, "success", runner_exits=True))

    def _complete(self, job: SimJob, conclusion: str, *, runner_exits: bool) -> None:
        if job.status == "completed":
            return
        if job.timer is not None:
            job.timer.cancel()
        self._queued.pop(job.id, None)
        job.status, job.conclusion, job.completed_at = "completed", conclusion, self.clock.monotonic()
        if job.pool is not None:
            self.unfinished -= 1
            if self.unfinished == 0:
                self.all_done.set()
        self.deliver(job, "completed")
        runner = job.runner
        if runner is None:
            return
        runner.job = None
        if runner.server is not None:
            runner.server.done_at = job.completed_at
        if runner_exits:
            self._forget(runner)

    def queued_of(self, repository: str) -> list[SimJob]:
        return [job for job in self._queued.values() if job.repository.lower() == repository.lower()]
