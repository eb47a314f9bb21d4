"""Image rollouts per pool: which image new runners get, and the way back from an image that does not boot.

Each of a pool's placements rolls out on its own (a placement may name its own image, in its own cloud); "the
pool" below is one placement of it. When a pool's check resolves its `image` to another image than before (a
new upload, a new `image`), a rollout begins: new runners use the new image and the scaler replaces idle
runners on the old one. If runners on the new image fail to come online (their server went to ERROR, vanished,
or never registered within `bootstrap_timeout`) at a rate above `rollout.max_failure_rate` once
`rollout.min_boots` of them have been judged, the pool rolls back: new runners get the image that was in
service before, pinned by id, and the scaler replaces the new image's idle runners as it replaced the old
ones. The rollout stays rolled back until the pool's image changes again (the next upload, or an edit), which
starts a new rollout from the image in service. At or below that rate, the new image is in service and the
rollout is over (later failures are the pool's ordinary backoff's business).

With `rollout.canary` (a share such as 10%), a rollout begins as a canary: only that share of the pool's new
runners get the new image, the rest get the image in service, and no idle runner is replaced. Once
`rollout.canary_jobs` jobs succeeded on runners of the new image (and its boots have not rolled it back), the
image is promoted: the rollout goes on as one without a canary. Until then the canary can only be rolled back,
by its boots, like any rollout.

The pool's holder keeps it in memory and saves it in the pool's status row, with the image the last check
resolved to, after each pass that changed it (`save`); a restart, or a replica taking the pool over, carries
on from there (`restore`): a canary stays a canary, a rollback stays rolled back, and an image that changed
while no one held the pool starts a rollout from the image in service before.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from corral.clock import SYSTEM_CLOCK, Clock
from corral.config import pool_of_placement
from corral.engine.running import Running
from corral.metrics import IMAGE_PROMOTIONS, IMAGE_ROLLBACKS
from corral.model import PoolStatus, Runner
from corral.store import Store, pools

logger = logging.getLogger("corral.engine")


@dataclass
class Rollout:
    """A pool's move from one image to another, and how the new image's boots went."""

    from_image: str
    to_image: str
    started_at: datetime
    """When it began: jobs that succeeded on the new image since then promote a canary."""
    online: int = 0
    """Runners on the new image that came online."""
    failed: int = 0
    """Runners on the new image whose server never became a runner."""
    rolled_back: bool = False
    canary: bool = False
    """Only a share of new runners get the new image, until enough jobs succeed on it."""
    canaries: int = 0
    """New runners given the new image while it was a canary..."""
    kept: int = 0
    """...and given the image in service."""
    succeeded: int = 0
    """Jobs that succeeded on the new image since the rollout began (counted for canaries)."""

    @property
    def failure_rate(self) -> float:
        judged = self.online + self.failed
        return self.failed / judged if judged else 0.0

    def saved(self) -> dict[str, Any]:
        """As kept in the pool's status row."""
        fields = asdict(self)
        fields["started_at"] = self.started_at.isoformat()
        return fields

    @classmethod
    def of(cls, saved: dict[str, Any] | None) -> Rollout | None:
        """From its status row (None: none saved, or not a rollout this corral can read)."""
        if not saved:
            return None
        try:
            return cls(**{**saved, "started_at": datetime.fromisoformat(saved["started_at"])})
        except (TypeError, KeyError, ValueError):
            return None

    @property
    def phase(self) -> str:
        """`canary`, `rolling` (every new runner on the new image, idle ones replaced) or `rolled_back`."""
        if self.rolled_back:
            return "rolled_back"
        return "canary" if self.canary else "rolling"


class Rollouts:
    """Per placement (`Placement.key`: the pool's name for its first, `pool@index` after), since each
    placement may name its own image: its image as last checked, and its rollout. What a rollout may do
    (`rollout.*`) is the pool's."""

    def __init__(self, running: Running, clock: Clock = SYSTEM_CLOCK) -> None:
        """Each method is synchronous and reads `running.config` once: one generation's settings."""
        self._running = running
        self._clock = clock
        self._checked: dict[str, str] = {}
        """The image each placement's checks last resolved to."""
        self._rollouts: dict[str, Rollout] = {}
        self._unsaved: set[str] = set()
        """Pools one of whose placements' checked image or rollout changed since they were last saved."""

    def image(self, key: str, checked: str | None) -> str | None:
        """The image in service for the placement's runners (idle runners on another are replaced, a
        canary's aside), given the image its last check resolved to (None: not checked yet); notes the start
        of a rollout when that changed."""
        if checked is None:
            return self.pinned(key)
        previous = self._checked.get(key)
        if previous != checked:
            self._checked[key] = checked
            self._unsaved.add(pool_of_placement(key))
        if previous is not None and previous != checked:
            self._changed(key, previous, checked)
        return self.pinned(key) or checked

    def restore(self, statuses: Mapping[str, PoolStatus], taken: Callable[[str], bool]) -> None:
        """Carry on the rollouts of the pools this replica has just taken, from their status rows (the truth:
        another replica may have held the pool since this one last did)."""
        for name, status in statuses.items():
            if not taken(name):
                continue
            self._unsaved.discard(name)
            for key in [key for key in {*self._checked, *self._rollouts} if pool_of_placement(key) == name]:
                self._checked.pop(key, None)
                self._rollouts.pop(key, None)
            for key, saved in (status.rollouts or {}).items():
                if pool_of_placement(key) != name or not isinstance(saved, dict):
                    continue
                if isinstance(checked := saved.get("checked"), str):
                    self._checked[key] = checked
                rollout = Rollout.of(saved.get("rollout"))
                if rollout is not None:
                    self._rollouts[key] = rollout
                    logger.info("pool %s: carrying on its rollout to %s (%s)", key, rollout.to_image, rollout.phase)

    async def save(self, store: Store, pool: str) -> None:
        """Write the checked images and rollouts of the pool's placements to its status row, if one changed."""
        if pool not in self._unsaved:
            return
        self._unsaved.discard(pool)
        saved = {}
        for key in sorted(key for key in {*self._checked, *self._rollouts} if pool_of_placement(key) == pool):
            rollout = self._rollouts.get(key)
            saved[key] = {"checked": self._checked.get(key), "rollout": rollout.saved() if rollout else None}
        try:
            await store.run(pools.set_rollouts, pool, saved, now=self._clock.now())
        except BaseException:
            self._unsaved.add(pool)  # the next pass writes it again
            raise

    async def save_all(self, store: Store) -> None:
        """Write every pool's unsaved rollout (shutdown: a create between the last pass and the stop counted a
        canary that no pass wrote, and a restart would have given the new image one runner too many)."""
        for pool in sorted(self._unsaved):
            await self.save(store, pool)

    def pinned(self, key: str) -> str | None:
        """The image id in service instead of what `image` names: the old one, while the new one is rolled
        back or still a canary."""
        rollout = self._rollouts.get(key)
        return rollout.from_image if rollout is not None and (rollout.rolled_back or rollout.canary) else None

    def canary(self, key: str) -> Rollout | None:
        """The placement's rollout while its new image is a canary."""
        rollout = self._rollouts.get(key)
        return rollout if rollout is not None and rollout.canary and not rollout.rolled_back else None

    def image_for_new_runner(self, key: str) -> str | None:
        """The image id a runner about to be created in the placement gets instead of what `image` names
        (None: that one). A canary's share of new runners get its new image, the first at once; the rest the
        old."""
        rollout = self.canary(key)
        share = self._share(key)
        if rollout is None or share is None:
            return self.pinned(key)
        self._unsaved.add(pool_of_placement(key))
        if rollout.canaries < share * (rollout.canaries + rollout.kept + 1):
            rollout.canaries += 1
            return rollout.to_image
        rollout.kept += 1
        return rollout.from_image

    def jobs_succeeded(self, key: str, succeeded: int) -> None:
        """So many jobs succeeded on a canary's new image since its rollout began: enough promote it."""
        rollout = self.canary(key)
        pool = self._running.config.pools.get(pool_of_placement(key))
        if rollout is None or pool is None:
            return
        if rollout.succeeded != succeeded:
            rollout.succeeded = succeeded
            self._unsaved.add(pool_of_placement(key))
        if succeeded < pool.rollout.canary_jobs:
            return
        rollout.canary = False
        IMAGE_PROMOTIONS.labels(pool_of_placement(key)).inc()
        logger.info(
            "pool %s: promoting image %s: %d jobs succeeded on its canaries (rollout.canary_jobs: %d); idle "
            "runners on %s are now replaced",
            key,
            rollout.to_image,
            succeeded,
            pool.rollout.canary_jobs,
            rollout.from_image,
        )
        self._judge(key, rollout)

    def _share(self, key: str) -> float | None:
        pool = self._running.config.pools.get(pool_of_placement(key))
        return pool.rollout.canary if pool is not None else None

    def rollout(self, key: str) -> Rollout | None:
        return self._rollouts.get(key)

    def rollouts_of(self, pool: str) -> dict[str, Rollout]:
        """The pool's rollouts, by placement key."""
        return {key: rollout for key, rollout in self._rollouts.items() if pool_of_placement(key) == pool}

    def came_online(self, runner: Runner) -> None:
        key, rollout = self._of(runner)
        if rollout is not None and not rollout.rolled_back and runner.image_id == rollout.to_image:
            rollout.online += 1
            self._judge(key, rollout)

    def boot_failed(self, runner: Runner) -> None:
        """A runner's server never became a runner: on a rollout's new image, it counts against the image."""
        key, rollout = self._of(runner)
        if rollout is None or rollout.rolled_back or runner.image_id != rollout.to_image:
            return
        rollout.failed += 1
        self._judge(key, rollout)

    def _of(self, runner: Runner) -> tuple[str, Rollout | None]:
        """The placement the runner was made by, and its rollout (none under way for its pool: no lookup)."""
        if not any(pool_of_placement(key) == runner.pool for key in self._rollouts):
            return runner.pool, None
        placement = self._running.config.placement_of(runner.pool, runner.cloud)
        key = placement.key(runner.pool) if placement is not None else runner.pool
        return key, self._rollouts.get(key)

    def _judge(self, key: str, rollout: Rollout) -> None:
        """Once `min_boots` runners on the new image were judged: roll back, or put the image in service."""
        pool_name = pool_of_placement(key)
        self._unsaved.add(pool_name)
        pool = self._running.config.pools.get(pool_name)
        judged = rollout.online + rollout.failed
        if pool is None or judged < pool.rollout.min_boots:
            return
        if rollout.failure_rate <= pool.rollout.max_failure_rate:
            if rollout.canary:
                return  # its boots are fine; its jobs promote it
            del self._rollouts[key]
            logger.info(
                "pool %s: image %s is in service: %d of %d runners on it came online",
                key,
                rollout.to_image,
                rollout.online,
                judged,
            )
            return
        rollout.rolled_back = True
        IMAGE_ROLLBACKS.labels(pool_name).inc()
        logger.warning(
            "pool %s: rolling back from image %s to %s: %d of %d runners on it failed to come online (above "
            "rollout.max_failure_rate, %.0f%%); the pool keeps %s until its image changes again",
            key,
            rollout.to_image,
            rollout.from_image,
            rollout.failed,
            judged,
            pool.rollout.max_failure_rate * 100,
            rollout.from_image,
        )

    def _changed(self, key: str, previous: str, checked: str) -> None:
        rollout = self._rollouts.get(key)
        if rollout is not None and checked == rollout.from_image:
            # Back to the image in service (an edit undid the change): nothing is rolling any more.
            del self._rollouts[key]
            logger.info("pool %s: image %s again; the rollout to %s is over", key, checked, rollout.to_image)
            return
        # A rolled-back rollout's new image was never in service: the next one starts from the old image.
        start = rollout.from_image if rollout is not None and (rollout.rolled_back or rollout.canary) else previous
        share = self._share(key)
        self._rollouts[key] = Rollout(
            from_image=start, to_image=checked, canary=share is not None, started_at=self._clock.now()
        )
        if share is None:
            logger.info("pool %s: rolling out image %s (was %s)", key, checked, start)
        else:
            logger.info(
                "pool %s: image %s is a canary: %.0f%% of new runners get it until %d jobs succeed on it (was %s)",
                key,
                checked,
                share * 100,
                self._running.config.pools[pool_of_placement(key)].rollout.canary_jobs,
                start,
            )
