"""Whether the cloud can serve each pool: its image, flavor, networks... exist, and Nova accepts its request.

A check the cloud could not answer (a 5xx, a refused token, a dropped connection) is retried with backoff
and says nothing about the pool; only a definite answer (no such image) or a create Nova refused as made
twice keeps a pool not ready, and even those are looked at again now and then, so fixing the cloud needs no
reload. Nova answers 400 for passing causes too (a volume not yet available to a block device mapping, a port
still binding): one refusal only has the pool checked again at once, and creates go on while it passes.
A pool that is fine is looked at again as often, which resolves its image afresh: a new upload of its image
(or one matching its filter) becomes the image in force, and the scaler rolls idle runners over to it.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass

from corral.cloud.clouds import CloudSet
from corral.cloud.provider import CloudError, ServerSpec
from corral.cloud.quota import ServerCost
from corral.engine.backoff import Backoff, LogOnce
from corral.engine.running import Running
from corral.executors import call_blocking

logger = logging.getLogger("corral.engine")

CHECK_BACKOFF_BASE_S = 1.0
CHECK_BACKOFF_CAP_S = 300.0
UUID = re.compile(r"[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}", re.IGNORECASE)


def refusal_key(message: str) -> str:
    """What makes two refusals the same: the cloud's words (after `HTTP 400: `), its ids left out, as the
    operation before them names the runner and a passing cause names the volume or port it waited for."""
    _, found, detail = message.partition(": HTTP ")
    return UUID.sub("<id>", detail if found else message)


@dataclass
class PoolCheck:
    """What the last look at the cloud said of a pool: `problems` is None until a check got an answer."""

    backoff: Backoff
    problems: list[str] | None = None
    error: str | None = None
    due: float = 0.0
    cost: ServerCost | None = None
    """What one of the pool's servers takes from the quota, found with a check that found no problem."""
    image_id: str | None = None
    """The image the pool's `image` meant at the last check that found no problem: new runners' image."""
    refusal: str | None = None
    """The last create the cloud refused as made (`refusal_key`), until one is accepted: the same again parks
    the pool."""
    refused_at: float = 0.0
    """When that refusal came (the checker's clock): creates sent before it were one burst with it."""
    parked_at: float | None = None
    """When the same refusal twice parked the pool: a check begun before then cannot have seen what the
    refusals said, so its answer does not make the pool ready again."""


class PoolChecker:
    """Checks pools against the cloud, keeps what it found, and says whether each pool is fit to serve.

    A pool with several placements is checked once per placement, each known by `Placement.key` (the pool's
    name for the first); each placement's readiness, image and server cost are its own."""

    def __init__(
        self,
        cloud: CloudSet,
        executor: Executor,
        log_once: LogOnce,
        clock: Callable[[], float],
        running: Running,
    ) -> None:
        """`running`'s `tuning.pool_recheck`: how long until a pool with a definite problem is looked at again."""
        self._running = running
        self._cloud = cloud
        self._executor = executor
        self._log_once = log_once
        self._clock = clock
        self._checks: dict[str, PoolCheck] = {}
        self.sooner = asyncio.Event()
        """Set when a check falls due before the time `wait_s` last gave (a refusal, a new configuration): the
        check loop looks at once instead of sleeping on."""

    def forget(self) -> None:
        """A new configuration: every pool is checked afresh."""
        self._checks.clear()
        self.sooner.set()

    def _check_of(self, pool: str) -> PoolCheck:
        check = self._checks.get(pool)
        if check is None:
            backoff = Backoff(base_s=CHECK_BACKOFF_BASE_S, cap_s=CHECK_BACKOFF_CAP_S, clock=self._clock)
            check = self._checks[pool] = PoolCheck(backoff=backoff)
        return check

    def due(self, pools: list[str]) -> list[str]:
        now = self._clock()
        return [pool for pool in pools if self._check_of(pool).due <= now]

    def wait_s(self, pools: list[str], longest: float) -> float:
        """Seconds until the first of `pools` falls due (0: one is; one never checked is), `longest` at most: the
        check loop sleeps that long rather than looking every second (most of an idle simulated day's work)."""
        now = self._clock()
        dues = [self._checks[pool].due if pool in self._checks else now for pool in pools]
        return max(min([due - now for due in dues] + [longest]), 0.0)

    async def check(self, pool: str, spec: ServerSpec) -> None:
        check = self._check_of(pool)
        image_id: str | None = None
        began = self._clock()
        try:
            problems = await call_blocking(self._executor, self._cloud.check_pool, spec)
            if not problems:
                check.cost = await call_blocking(self._executor, self._cloud.server_cost, spec)
                image_id = await call_blocking(self._executor, self._cloud.image_id, spec)
        except CloudError as exc:
            wait = check.backoff.failed()
            check.error, check.due = str(exc), self._clock() + wait
            self._log_once.warning(
                f"check:{pool}", f"pool {pool}: cannot check it against the cloud, retrying in {wait:.0f}s: {exc}"
            )
            return
        check.backoff.succeeded()
        check.error = None
        if check.parked_at is not None and check.parked_at >= began:
            return  # the pool was parked while this check was under way: the check after the park decides
        check.parked_at = None
        recheck_s = self._running.config.tuning.pool_recheck
        check.due = self._clock() + recheck_s
        if not problems:
            check.image_id = image_id  # a change starts a rollout, which says so (`engine.rollouts`)
        if problems and problems != check.problems:
            logger.warning(
                "pool %s is not ready, checking it again in %.0fs: %s",
                pool,
                recheck_s,
                "; ".join(problems),
            )
        elif not problems and check.problems:
            logger.info("pool %s: the cloud can serve it again", pool)
        check.problems = problems

    def now(self) -> float:
        """The checker's clock: what `refused` compares a create's `sent_at` with."""
        return self._clock()

    def refused(self, pool: str, message: str, sent_at: float | None = None) -> float:
        """Nova refused a create as made (a 400), sent at `sent_at` (`now()`); how long the pool is now parked
        (0: it is not).

        Nova says 400 for passing causes too, so a first refusal only has the pool checked again at once: a
        check that finds a problem parks it, one that finds none leaves it ready, its creates going on with
        backoff as after a 503. The same refusal again for a create sent after the first came back (creates
        sent together are refused together), with no create accepted between, is the pool's request being
        wrong, not the moment: the pool is parked, not ready until a check after `pool_recheck` (or a reload)
        finds it fixed."""
        check = self._check_of(pool)
        key = refusal_key(message)
        if check.refusal != key:
            check.refusal, check.refused_at = key, self._clock()
            check.due = self._clock()
            self.sooner.set()
            return 0.0
        if sent_at is not None and sent_at < check.refused_at:
            return 0.0  # one burst with the first: the check decides
        problem = f"the cloud refuses this pool's servers: {message}"
        recheck_s = self._running.config.tuning.pool_recheck
        if check.problems != [problem]:
            logger.warning(
                "pool %s is not ready (the same refusal twice), checking it again in %.0fs: %s",
                pool,
                recheck_s,
                problem,
            )
        check.problems = [problem]
        check.parked_at = self._clock()
        check.due = check.parked_at + recheck_s
        return recheck_s

    def accepted(self, pool: str) -> None:
        """The cloud accepted a create of the pool: a refusal before it was a passing one."""
        check = self._checks.get(pool)
        if check is not None:
            check.refusal = None

    def image_id(self, pool: str) -> str | None:
        """The image new runners of the pool get, as last checked (None before a check found it)."""
        check = self._checks.get(pool)
        return check.image_id if check else None

    def cost(self, pool: str) -> ServerCost | None:
        check = self._checks.get(pool)
        return check.cost if check else None

    def readiness(self, pool: str) -> tuple[bool, str | None]:
        check = self._checks.get(pool)
        if check is None or check.problems is None:
            if check is not None and check.error is not None:
                wait = max(check.due - self._clock(), 0.0)
                return False, f"cannot check the pool against the cloud (retrying in {wait:.0f}s): {check.error}"
            return False, "not checked against the cloud yet"
        if check.problems:
            return False, "; ".join(check.problems)
        return True, None
