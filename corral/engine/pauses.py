"""Each pool's create backoff: in memory for the scaler's every pass, in the database for the next holder.

A pool whose creates keep failing (a broken image, a full quota, GitHub refusing JIT configs) is paused
for longer after each failure, and a runner coming online ends the pause: the whole way from intent to runner
works. Except for a wait with a floor (quota: the cloud refused a create, or put a server in ERROR, for quota):
only a runner created after it began ends that one, since a runner already booting then uses the very headroom
that ran out and says nothing of the next create. (A runner created beside one the cloud answered 500 does
prove the cloud works: with 20% of creates failing, parallel creates always have a failed sibling, and
waiting for a runner created after the last failure kept a busy pool at the 60 s cap.) The holder keeps the
backoff in memory and writes each change to the pool's status row; a replica that takes the pool over (or
corral restarting) reads it back, so a failover does not retry a broken cloud at full speed.

A pool placed in several clouds also backs off per cloud (`cloud_failed`): its runners go to its other
clouds meanwhile. Those backoffs are kept the same way, in the status row's `cloud_backoffs`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta

from corral.clock import SYSTEM_CLOCK, ClockLike, as_clock
from corral.engine.backoff import Backoff, LogOnce
from corral.model import PoolStatus
from corral.store import Store, pools

logger = logging.getLogger("corral.engine")


class PoolPauses:
    """Create backoffs by pool; `failed` and `succeeded` write through to the store."""

    def __init__(
        self,
        store: Store,
        log_once: LogOnce,
        clock: ClockLike = SYSTEM_CLOCK,
        wall_clock: Callable[[], datetime] | None = None,
    ) -> None:
        """`wall_clock`, when given, stands in for the clock's `now` (callers that pin the two apart)."""
        self._store = store
        self._log_once = log_once
        self._clock = as_clock(clock, wall_clock)
        self._ended_only_after: dict[tuple[str, str | None], datetime] = {}
        """For a backoff (a pool's: cloud None; or a pool's in a cloud) that only a runner created after a
        moment can end, that moment, by the clock runners' `created_at` is read with: its last quota failure,
        or when it was restored from the store (the runners booting then are the old holder's)."""
        self._backoffs: dict[str, Backoff] = {}
        self._cloud_backoffs: dict[str, dict[str, Backoff]] = {}
        """Per pool, per cloud it failed: for pools placed in several clouds."""

    def remaining_s(self, pool: str) -> float:
        backoff = self._backoffs.get(pool)
        return backoff.remaining_s if backoff is not None else 0.0

    def failures(self, pool: str) -> int:
        backoff = self._backoffs.get(pool)
        return backoff.failures if backoff is not None else 0

    async def failed(self, pool: str, at_least_s: float = 0.0) -> float:
        """A create of the pool failed: the seconds until the next one."""
        backoff = self._backoffs.setdefault(pool, Backoff(clock=self._clock))
        if at_least_s > 0:
            self._ended_only_after[(pool, None)] = self._clock.now()
        wait, changed = _failed(backoff, at_least_s)
        if changed:
            await self._write(pool, backoff)
        return wait

    async def succeeded(self, pool: str, created_at: datetime) -> bool:
        """A runner of the pool, created at `created_at`, came online; True if that ended a backoff."""
        backoff = self._backoffs.get(pool)
        if backoff is None or not backoff.failures or not self._may_end(pool, None, created_at):
            return False
        backoff.succeeded()
        self._ended_only_after.pop((pool, None), None)
        await self._write(pool, backoff)
        return True

    def cloud_remaining_s(self, pool: str, cloud: str) -> float:
        backoff = self._cloud_backoffs.get(pool, {}).get(cloud)
        return backoff.remaining_s if backoff is not None else 0.0

    def cloud_failures(self, pool: str, cloud: str) -> int:
        """How often in a row `cloud` failed the pool (0: it serves it)."""
        backoff = self._cloud_backoffs.get(pool, {}).get(cloud)
        return backoff.failures if backoff is not None else 0

    async def cloud_failed(self, pool: str, cloud: str, at_least_s: float = 0.0) -> float:
        """A create of the pool failed in `cloud`: the seconds until the next one there."""
        backoff = self._cloud_backoffs.setdefault(pool, {}).setdefault(cloud, Backoff(clock=self._clock))
        if at_least_s > 0:
            self._ended_only_after[(pool, cloud)] = self._clock.now()
        wait, changed = _failed(backoff, at_least_s)
        if changed:
            await self._write_clouds(pool)
        return wait

    async def cloud_succeeded(self, pool: str, cloud: str, created_at: datetime) -> None:
        """A runner of the pool, created at `created_at`, came online in `cloud`: it serves the pool again,
        if that runner was created after the cloud last failed the pool."""
        backoff = self._cloud_backoffs.get(pool, {}).get(cloud)
        if backoff is None or not backoff.failures or not self._may_end(pool, cloud, created_at):
            return
        backoff.succeeded()
        self._ended_only_after.pop((pool, cloud), None)
        await self._write_clouds(pool)

    def _may_end(self, pool: str, cloud: str | None, created_at: datetime) -> bool:
        """Whether a runner created at `created_at` coming online ends the backoff: any runner ends a backoff
        from errors; a quota wait or a restored backoff, only one created since."""
        since = self._ended_only_after.get((pool, cloud))
        return since is None or created_at >= since

    def restore(self, statuses: Mapping[str, PoolStatus], taken: Callable[[str], bool]) -> None:
        """Take the backoffs of the pools this replica has just taken from their status rows (which are the
        truth: another replica may have held the pool since this one last did)."""
        now = self._clock.now()
        for name, status in statuses.items():
            if not taken(name):
                continue
            self._restore_clouds(name, status.cloud_backoffs or {})
            if status.create_failures:
                self._ended_only_after[(name, None)] = now
            remaining = (status.create_paused_until - now).total_seconds() if status.create_paused_until else 0.0
            if not status.create_failures and remaining <= 0:
                self._backoffs.pop(name, None)
                continue
            backoff = self._backoffs.setdefault(name, Backoff(clock=self._clock))
            backoff.failures = status.create_failures
            backoff.until = self._clock.monotonic() + max(remaining, 0.0)
            if remaining > 0:
                logger.info(
                    "pool %s: creates stay paused %.0fs more (%d failures in a row before)",
                    name,
                    remaining,
                    status.create_failures,
                )

    def _restore_clouds(self, pool: str, saved: Mapping[str, object]) -> None:
        """The pool's per-cloud backoffs as its status row has them (`_write_clouds`)."""
        now = self._clock.now()
        backoffs: dict[str, Backoff] = {}
        for cloud, fields in saved.items():
            if not isinstance(fields, dict):
                continue  # not a backoff this corral wrote: the cloud is tried again
            try:
                failures = int(fields["failures"])
                until = fields.get("paused_until")
                remaining = (datetime.fromisoformat(until) - now).total_seconds() if until else 0.0
            except (KeyError, TypeError, ValueError):
                continue
            if failures:
                backoffs[cloud] = Backoff(
                    clock=self._clock, failures=failures, until=self._clock.monotonic() + max(remaining, 0)
                )
                self._ended_only_after[(pool, cloud)] = now
        if backoffs:
            self._cloud_backoffs[pool] = backoffs
            logger.info("pool %s: clouds still backing off for it: %s", pool, ", ".join(sorted(backoffs)))
        else:
            self._cloud_backoffs.pop(pool, None)

    async def _write_clouds(self, pool: str) -> None:
        saved = {
            cloud: {
                "failures": backoff.failures,
                "paused_until": until.isoformat() if (until := self._paused_until(backoff)) else None,
            }
            for cloud, backoff in self._cloud_backoffs.get(pool, {}).items()
            if backoff.failures
        }
        try:
            await self._store.run(pools.set_cloud_backoffs, pool, saved, now=self._clock.now())
        except Exception as exc:  # the backoffs in memory hold; their next change writes again
            self._log_once.warning(f"pause:{pool}", f"pool {pool}: cannot record its clouds' backoffs: {exc}")

    def _paused_until(self, backoff: Backoff) -> datetime | None:
        """When the backoff's wait ends, by the wall clock the status row keeps (None: not waiting)."""
        return self._clock.now() + timedelta(seconds=backoff.remaining_s) if backoff.waiting else None

    async def _write(self, pool: str, backoff: Backoff) -> None:
        paused_until = self._paused_until(backoff)
        try:
            await self._store.run(pools.set_create_backoff, pool, backoff.failures, paused_until, now=self._clock.now())
        except Exception as exc:  # the pause in memory holds; its next change writes again
            self._log_once.warning(f"pause:{pool}", f"pool {pool}: cannot record its create backoff: {exc}")


def _failed(backoff: Backoff, at_least_s: float) -> tuple[float, bool]:
    """Record a failure; the wait, and whether the backoff changed (only then is it written again)."""
    before = (backoff.failures, backoff.until)
    wait = backoff.failed(at_least_s)
    return wait, (backoff.failures, backoff.until) != before
