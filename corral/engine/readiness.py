"""Whether a pool can serve jobs now, and if not why: drained, no placement fit (the pool checks), creation
paused after failures, or GitHub's rate gate closed. The scaler, the creator and the operator ask it."""

from __future__ import annotations

from collections.abc import Callable

from corral.engine.checks import PoolChecker
from corral.engine.running import Running
from corral.github.client import GitHubClient


class PoolReadiness:
    def __init__(
        self, running: Running, checker: PoolChecker, github: GitHubClient, paused_s: Callable[[str], float]
    ) -> None:
        self.running = running
        self.checker = checker
        self.github = github
        self.paused_s = paused_s
        """How long the pool's creates are paused after failures (the creator's pauses; the creator is built
        after this, as it asks `ready_clouds`)."""

    def pool_ready(self, name: str) -> tuple[bool, str | None]:
        """The pool's ready condition: the worst of its parts, with the reason."""
        if name in self.running.drained:
            return False, "drained by an operator"
        ready, reason = self._placements_ready(name)
        if not ready:
            return ready, reason
        paused = self.paused_s(name)
        if paused > 0:
            return False, f"creation paused for {paused:.0f}s after failures"
        pool = self.running.config.pools.get(name)
        github_paused = self.github.paused_for(pool.scope) if pool else 0.0
        if github_paused > 0:
            return False, f"GitHub calls paused for {github_paused:.0f}s (rate limited; resuming at the reset)"
        return True, None

    def _placements_ready(self, name: str) -> tuple[bool, str | None]:
        """A pool is fit to serve when one of its placements is; if none is, each one's reason says why."""
        config = self.running.config
        if name not in config.pools:
            return self.checker.readiness(name)
        placements = config.placements(name)
        answers = [(placement, self.checker.readiness(placement.key(name))) for placement in placements]
        if any(ready for _, (ready, _) in answers):
            return True, None
        if len(answers) == 1:
            return answers[0][1]
        return False, "; ".join(f"in {placement.cloud}: {reason}" for placement, (_, reason) in answers)

    def ready_clouds(self, pool: str) -> set[str]:
        """The clouds of the pool's placements whose check found nothing wrong."""
        config = self.running.config
        if pool not in config.pools:
            return set()
        return {p.cloud for p in config.placements(pool) if self.checker.readiness(p.key(pool))[0]}
