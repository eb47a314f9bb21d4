"""Image rollouts per pool: which image new runners get, and the way back from an image that does not boot.

When a pool's check resolves its `image` to another image than before (a new upload, a new `image`), a
rollout begins: new runners use the new image and the scaler replaces idle runners on the old one. If runners
on the new image fail to come online (their server went to ERROR, vanished, or never registered within
`bootstrap_timeout`) at a rate above `rollout.max_failure_rate` once `rollout.min_boots` of them have been
judged, the pool rolls back: new runners get the image that was in service before, pinned by id, and the
scaler replaces the new image's idle runners as it replaced the old ones. The rollout stays rolled back until
the pool's image changes again (the next upload, or an edit), which starts a new rollout from the image in
service. At or below that rate, the new image is in service and the rollout is over (later failures are the
pool's ordinary backoff's business).

Kept in memory by the pool's holder: after a restart or a lease move, the next check begins afresh, from the
image the check finds (the runners' recorded images still say which are outdated).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from corral.config import CorralConfig
from corral.metrics import IMAGE_ROLLBACKS
from corral.model import Runner

logger = logging.getLogger("corral.engine")


@dataclass
class Rollout:
    """A pool's move from one image to another, and how the new image's boots went."""

    from_image: str
    to_image: str
    online: int = 0
    """Runners on the new image that came online."""
    failed: int = 0
    """Runners on the new image whose server never became a runner."""
    rolled_back: bool = False

    @property
    def failure_rate(self) -> float:
        judged = self.online + self.failed
        return self.failed / judged if judged else 0.0


class Rollouts:
    def __init__(self, config: Callable[[], CorralConfig]) -> None:
        self._config = config
        self._checked: dict[str, str] = {}
        """The image each pool's checks last resolved to."""
        self._rollouts: dict[str, Rollout] = {}

    def image(self, pool: str, checked: str | None) -> str | None:
        """The image the pool's new runners get, given the image its last check resolved to (None: not
        checked yet); notes the start of a rollout when that changed."""
        if checked is None:
            return self.pinned(pool)
        previous = self._checked.get(pool)
        self._checked[pool] = checked
        if previous is not None and previous != checked:
            self._changed(pool, previous, checked)
        return self.pinned(pool) or checked

    def pinned(self, pool: str) -> str | None:
        """The image id new runners must be created from instead of what `image` names (rolled back)."""
        rollout = self._rollouts.get(pool)
        return rollout.from_image if rollout is not None and rollout.rolled_back else None

    def rollout(self, pool: str) -> Rollout | None:
        return self._rollouts.get(pool)

    def came_online(self, runner: Runner) -> None:
        rollout = self._rollouts.get(runner.pool)
        if rollout is not None and not rollout.rolled_back and runner.image_id == rollout.to_image:
            rollout.online += 1
            self._judge(runner.pool, rollout)

    def boot_failed(self, runner: Runner) -> None:
        """A runner's server never became a runner: on a rollout's new image, it counts against the image."""
        rollout = self._rollouts.get(runner.pool)
        if rollout is None or rollout.rolled_back or runner.image_id != rollout.to_image:
            return
        rollout.failed += 1
        self._judge(runner.pool, rollout)

    def _judge(self, pool_name: str, rollout: Rollout) -> None:
        """Once `min_boots` runners on the new image were judged: roll back, or put the image in service."""
        pool = self._config().pools.get(pool_name)
        judged = rollout.online + rollout.failed
        if pool is None or judged < pool.rollout.min_boots:
            return
        if rollout.failure_rate <= pool.rollout.max_failure_rate:
            del self._rollouts[pool_name]
            logger.info(
                "pool %s: image %s is in service: %d of %d runners on it came online",
                pool_name,
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
            pool_name,
            rollout.to_image,
            rollout.from_image,
            rollout.failed,
            judged,
            pool.rollout.max_failure_rate * 100,
            rollout.from_image,
        )

    def _changed(self, pool: str, previous: str, checked: str) -> None:
        rollout = self._rollouts.get(pool)
        if rollout is not None and checked == rollout.from_image:
            # Back to the image in service (an edit undid the change): nothing is rolling any more.
            del self._rollouts[pool]
            logger.info("pool %s: image %s again; the rollout to %s is over", pool, checked, rollout.to_image)
            return
        # A rolled-back rollout's new image was never in service: the next one starts from the old image.
        start = rollout.from_image if rollout is not None and rollout.rolled_back else previous
        self._rollouts[pool] = Rollout(from_image=start, to_image=checked)
        logger.info("pool %s: rolling out image %s (was %s)", pool, checked, start)
