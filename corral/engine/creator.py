"""Turning a `pending` runner into a server: a JIT config from GitHub, user data, a create request to the cloud.

Every way this can go wrong ends the same way: the runner moves to `failed` with a reason code and the far
end's own words, the failure is counted by pool and reason, and the pool backs off before creating again.
A refusal Nova repeats (the same 400 twice) also marks the pool (its placement) not ready, with Nova's
message; a first one has the pool checked again at once (`PoolChecker.refused`). A pool placed in several
clouds backs off per cloud: while one cloud fails, its runners spill over to the next, and only when every
cloud of the pool fails does the pool itself pause.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from string import Template

from corral.clock import SYSTEM_CLOCK, Clock
from corral.cloud.clouds import CloudSet
from corral.cloud.provider import (
    META_INSTALLATION,
    META_POOL,
    META_RUNNER,
    CloudError,
    CloudQuotaExceeded,
    CloudRequestRejected,
    CloudServer,
    ServerSpec,
)
from corral.config import CorralConfig, Placement, PoolConfig, ScopeConfig
from corral.engine.backoff import LogOnce
from corral.engine.caches import CacheVolumes
from corral.engine.checks import PoolChecker
from corral.engine.pauses import PoolPauses
from corral.engine.running import Running
from corral.engine.transitions import Mover
from corral.executors import Executors, call_blocking, thread_pool
from corral.github.client import GitHubClient, GitHubError, GitHubRateLimited, JitConfig
from corral.metrics import CLOUD_CALL_SECONDS, CLOUD_CALLS, GITHUB_ERRORS, QUEUED_TO_CREATE_SECONDS
from corral.model import Reason, Runner, RunnerState
from corral.userdata import UserDataError, render_user_data

logger = logging.getLogger("corral.engine")


@dataclass(frozen=True)
class Failure:
    reason: Reason
    message: str
    wait_at_least_s: float = 0.0
    rechecked: bool = False
    """The cloud refused the create as made: the pool (its placement) is checked again at once."""
    parked_s: float = 0.0
    """The same refusal again: the placement is not ready, and gets no create, until checked again then."""


def server_spec(
    config: CorralConfig,
    pool_name: str,
    runner: Runner | None,
    user_data: str = "",
    *,
    image: str | None = None,
    placement: Placement | None = None,
    cache_volume: str | None = None,
) -> ServerSpec:
    """The server a pool's runner gets (`runner` None: a stand-in, for checking the pool) in one of its
    placements (None: the first); `image` pins an image id in place of what the placement's `image` names (a
    rolled-back rollout's); `cache_volume` the id of the pool's cache volume its server gets, if any."""
    pool = config.pools[pool_name]
    where = placement or config.placements(pool_name)[0]
    metadata = {
        **pool.metadata,
        META_INSTALLATION: config.installation,
        META_POOL: pool_name,
        META_RUNNER: runner.id if runner else "check",
    }
    return ServerSpec(
        name=runner.name if runner else "check",
        image=image or where.image,
        flavor=where.flavor,
        networks=where.networks,
        security_groups=where.security_groups,
        key_name=where.key_name,
        availability_zone=where.availability_zone,
        config_drive=pool.config_drive,
        boot_volume_gb=pool.boot_volume_gb,
        boot_volume_type=pool.boot_volume_type,
        volumes=tuple(config.volumes_for(pool_name)),
        metadata=metadata,
        user_data=user_data,
        cloud=where.cloud,
        cache_volume=cache_volume,
    )


class Creator:
    """Creates runners' servers, at most `max_concurrent_creates` at a time, with a backoff per pool."""

    def __init__(
        self,
        mover: Mover,
        cloud: CloudSet,
        github: GitHubClient,
        checker: PoolChecker,
        pauses: PoolPauses,
        log_once: LogOnce,
        *,
        max_concurrent_creates: int,
        jit_concurrency: int,
        scale_set_jit: Callable[[str, str], Awaitable[JitConfig]] | None = None,
        running: Running,
        caches: CacheVolumes | None = None,
        image_for: Callable[[str], str | None] = lambda _: None,
        ready_clouds: Callable[[str], set[str]] | None = None,
        clock: Clock = SYSTEM_CLOCK,
        executors: Executors = thread_pool,
    ) -> None:
        """`scale_set_jit(pool, runner name)` gives a scale-set pool's runners their JIT configs from the
        scale set itself (they then belong to it); other pools' come from the REST API."""
        self._mover = mover
        self._cloud = cloud
        self._github = github
        self._checker = checker
        self.pauses = pauses
        self._log_once = log_once
        self._threads = executors(max_concurrent_creates, "corral-create")
        self._cloud_slots = asyncio.Semaphore(max_concurrent_creates)
        self._jit_slots = asyncio.Semaphore(jit_concurrency)
        self._scale_set_jit = scale_set_jit
        self._image_for = image_for
        """The image id a pool's next runner must be created from instead of what its `image` names, if any
        (rolled back, or a canary's share: `engine.rollouts`)."""
        self._running = running
        """Where the clouds of a pool's placements, and the cloud a runner's row recorded, are read."""
        self._caches = caches
        """Where a runner of a pool with `cache_volumes` gets its volume (None: no pool gets one)."""
        self._ready_clouds = ready_clouds or (lambda pool: set(running.config.clouds_of(pool)))
        """The clouds of a pool's placements whose check found nothing wrong: where its runners may go."""
        self._clock = clock
        """What a job's wait for its runner is measured by."""

    async def came_online(self, runner: Runner) -> None:
        """A runner came online: the whole way from intent to runner works, so the backoffs end (its pool's,
        and its cloud's for the pool); a quota wait only if the runner was created after it began (`PoolPauses`).
        (A create the cloud accepted is not enough: a server that then goes to ERROR is a failure too.)"""
        await self.pauses.cloud_succeeded(runner.pool, self._cloud_of(runner), runner.created_at)
        if await self.pauses.succeeded(runner.pool, runner.created_at):
            logger.info("pool %s: a runner came online; creating at full speed again", runner.pool)

    async def booting_failed(self, runner: Runner, reason: Reason, message: str | None) -> None:
        """A server the cloud accepted never became a runner (ERROR, vanished, timed out): back off."""
        wait, where = await self._back_off(runner)
        self._log_once.warning(
            f"create:{runner.pool}:{reason.value}",
            f"pool {runner.pool}: runner {runner.name} failed ({reason.value}), {where} in {wait:.0f}s: "
            f"{message or ''}",
        )

    async def over_quota(self, runner: Runner, message: str | None, quota_retry_s: float) -> None:
        """A server the cloud accepted went to ERROR for quota (creates raced past it): back off as after a
        create refused for quota, at least `quota_retry_s`, the pool's runners going to its other clouds
        meanwhile; the look after it reads the headroom the pool then plans within."""
        wait, where = await self._back_off(runner, quota_retry_s)
        self._log_once.warning(
            f"create:{runner.pool}:{Reason.CLOUD_QUOTA.value}",
            f"pool {runner.pool}: runner {runner.name} failed ({Reason.CLOUD_QUOTA.value}), {where} in {wait:.0f}s: "
            f"{message or ''}",
        )

    def paused_s(self, pool: str) -> float:
        return self.pauses.remaining_s(pool)

    def cloud_paused_s(self, pool: str, cloud: str) -> float:
        """How long the pool sends no runner to `cloud`, which failed it lately (0 for a pool in one cloud,
        which pauses as a whole instead)."""
        return self.pauses.cloud_remaining_s(pool, cloud)

    def cloud_on_trial(self, pool: str, cloud: str) -> bool:
        """Whether `cloud` failed the pool and has not served it since: once its backoff has run out it gets
        one runner at a time, until one comes online there (a burst would only fail again if it still fails)."""
        return self.pauses.cloud_failures(pool, cloud) > 0

    def _cloud_of(self, runner: Runner) -> str:
        return self._running.config.cloud_of(runner.cloud)

    async def _back_off(
        self, runner: Runner, at_least_s: float = 0.0, *, cloud_fault: bool = True
    ) -> tuple[float, str]:
        """After a failed runner: when the cloud failed it, its cloud backs off for the pool, and while
        another of the pool's clouds has not, the runners go there (the pool itself pauses only when all
        have; a GitHub failure pauses it at once). Returns the wait and what comes after it, for the log."""
        clouds = set(self._running.config.clouds_of(runner.pool))
        if cloud_fault and len(clouds) > 1:
            cloud = self._cloud_of(runner)
            wait = await self.pauses.cloud_failed(runner.pool, cloud, at_least_s)
            ready = self._ready_clouds(runner.pool) - {cloud}
            others = sorted(other for other in ready if not self.cloud_paused_s(runner.pool, other))
            if others:
                return wait, f"its runners go to {', '.join(others)} instead of {cloud}, trying {cloud} again"
        return await self.pauses.failed(runner.pool, at_least_s=at_least_s), "creating again"

    async def create(
        self,
        runner: Runner,
        config: CorralConfig,
        template: Template,
        job_received_at: datetime | None,
        placement: Placement | None = None,
    ) -> None:
        """Carry one pending runner to `booting`, or to `failed` with the reason.

        `job_received_at` is when corral heard of the job the runner is for: the create request's delay
        from it is the latency a user waits on. `placement`: where the scaler placed it (None: the first).
        """
        placement = placement or config.placements(runner.pool)[0]
        pool = config.pools[runner.pool]
        try:
            async with self._jit_slots:
                jit = await self._jit_config(runner, pool)
        except GitHubError as exc:
            GITHUB_ERRORS.labels(type(exc).__name__).inc()
            reason = Reason.GITHUB_RATE_LIMITED if isinstance(exc, GitHubRateLimited) else Reason.GITHUB_REFUSED
            wait = exc.retry_after if isinstance(exc, GitHubRateLimited) else 0.0
            await self.fail(runner, Failure(reason, f"GitHub refused a JIT config: {exc}", wait))
            return
        creating = await self._mover.move(
            runner, RunnerState.CREATING, Reason.CREATE_REQUESTED, github_runner_id=jit.runner_id
        )
        if creating is None:
            return
        if job_received_at is not None:
            waited = (self._clock.now() - job_received_at).total_seconds()
            QUEUED_TO_CREATE_SECONDS.labels(runner.pool).observe(max(waited, 0.0))
        cache = await self._caches.take(config, creating, placement) if self._caches is not None else None
        cache_volume = cache.volume_id if cache is not None else None
        try:
            user_data = render_user_data(
                template,
                jit_config=jit.encoded,
                runner_name=runner.name,
                pool=runner.pool,
                labels=list(pool.labels),
                runner_download_url=config.runner_download_url,
                cache_volume=cache_volume or "",
                cache_mount=pool.cache_volumes.mount if cache_volume and pool.cache_volumes else "",
            )
        except UserDataError as exc:
            await self.fail(creating, Failure(Reason.USER_DATA_INVALID, str(exc)))
            return
        pinned = self._image_for(placement.key(runner.pool))
        spec = server_spec(
            config, runner.pool, creating, user_data, image=pinned, placement=placement, cache_volume=cache_volume
        )
        sent_at = self._checker.now()
        try:
            server = await self._create_server(spec)
        except CloudError as exc:
            failure = self._cloud_failure(placement.key(runner.pool), placement.cloud, exc, config, sent_at)
            await self.fail(creating, failure)
            return
        self._checker.accepted(placement.key(runner.pool))
        await self._mover.move(
            creating,
            RunnerState.BOOTING,
            Reason.SERVER_CREATED,
            server_id=server.id,
            image_id=server.image_id,
            cache=cache.start if cache is not None else None,
        )

    async def _jit_config(self, runner: Runner, pool: PoolConfig) -> JitConfig:
        if pool.intake == "scale_set" and self._scale_set_jit is not None:
            return await self._scale_set_jit(runner.pool, runner.name)
        # The runner's own scope: a pool's, or with `max_runners_per_repo` the repository of its job.
        scope = ScopeConfig.from_key(runner.scope)
        return await self._github.generate_jit_config(scope, runner.name, list(pool.labels), pool.runner_group)

    def _cloud_failure(
        self, placement_key: str, cloud: str, exc: CloudError, config: CorralConfig, sent_at: float
    ) -> Failure:
        if isinstance(exc, CloudQuotaExceeded):
            retry = config.cloud_settings().get(cloud, config.cloud).quota_retry
            return Failure(Reason.CLOUD_QUOTA, f"quota exceeded: {exc}", retry)
        if isinstance(exc, CloudRequestRejected):
            parked_s = self._checker.refused(placement_key, str(exc), sent_at)
            return Failure(
                Reason.CLOUD_REJECTED, f"the cloud refused the server: {exc}", rechecked=True, parked_s=parked_s
            )
        return Failure(Reason.CLOUD_UNAVAILABLE, f"create failed: {exc}")

    async def _create_server(self, spec: ServerSpec) -> CloudServer:
        started = time.perf_counter()
        async with self._cloud_slots:
            try:
                server = await call_blocking(self._threads, self._cloud.create_server, spec)
            except CloudError as exc:
                CLOUD_CALLS.labels("create_server", type(exc).__name__).inc()
                raise
            finally:
                CLOUD_CALL_SECONDS.labels("create_server").observe(time.perf_counter() - started)
        CLOUD_CALLS.labels("create_server", "ok").inc()
        return server

    async def fail(self, runner: Runner, failure: Failure) -> None:
        """Record the failure on the runner (from wherever it got to) and back its pool (or cloud) off."""
        cloud_fault = failure.reason in (Reason.CLOUD_QUOTA, Reason.CLOUD_REJECTED, Reason.CLOUD_UNAVAILABLE)
        wait, where = await self._back_off(runner, failure.wait_at_least_s, cloud_fault=cloud_fault)
        if failure.parked_s:  # what comes next is the check that may find it fixed, not the backoff's end
            wait, where = max(wait, failure.parked_s), f"the same refusal twice: not ready until checked again; {where}"
        elif failure.rechecked:
            where = f"checking the pool again now; {where}"
        self._log_once.warning(
            f"create:{runner.pool}:{failure.reason.value}",
            f"pool {runner.pool}: runner {runner.name} failed ({failure.reason.value}), "
            f"{where} in {wait:.0f}s: {failure.message}",
        )
        await self._mover.fail(runner, failure.reason, failure.message)

    def on_error(self, runner: Runner) -> Callable[[BaseException], Awaitable[None]]:
        """What the supervisor does with an exception a create did not expect: the runner fails with it,
        named, and the pool backs off."""

        async def record(exc: BaseException) -> None:
            await self.fail(runner, Failure(Reason.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}"[:500]))

        return record

    def close(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)
