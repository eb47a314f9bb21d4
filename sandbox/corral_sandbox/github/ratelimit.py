"""GitHub's primary and secondary REST rate limits.

Each credential draws on a budget that GitHub resets an hour after the window's first request: a personal
access token and an installation have 5,000 requests an hour (an installation's budget is shared by all
of its tokens), an app's JWTs have their own. Every response carries the `X-RateLimit-*` headers; once
the budget is spent GitHub answers 403 with `x-ratelimit-remaining: 0` until the reset. Secondary limits
(abuse detection) answer 403 with `Retry-After`. githubkit tells the two apart by exactly these headers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from corral_sandbox.github.errors import GitHubError

WINDOW_S = 3600
RATE_LIMIT_DOCS = "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-primary-rate-limits"
SECONDARY_DOCS = "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits"


@dataclass
class Budget:
    limit: int
    used: int
    reset_at: int

    @property
    def remaining(self) -> int:
        return max(self.limit - self.used, 0)

    def set_remaining(self, remaining: int, reset_at: int) -> None:
        """A remaining budget above the usual limit raises the limit, as an Enterprise Server admin can."""
        self.limit = max(self.limit, remaining)
        self.used = self.limit - remaining
        self.reset_at = reset_at

    def headers(self) -> dict[str, str]:
        return {
            "X-RateLimit-Limit": str(self.limit),
            "X-RateLimit-Remaining": str(self.remaining),
            "X-RateLimit-Reset": str(self.reset_at),
            "X-RateLimit-Used": str(self.used),
            "X-RateLimit-Resource": "core",
        }


class RateLimits:
    """One budget per credential key (`"pat"`, `"installation:42"`, `"app"`), windows from first use."""

    def __init__(self) -> None:
        self._budgets: dict[str, Budget] = {}
        self._forced: tuple[int, int] | None = None

    def reset(self) -> None:
        self._budgets.clear()
        self._forced = None

    def budget(self, key: str, limit: int) -> Budget:
        now = int(time.time())
        budget = self._budgets.get(key)
        if budget is None or budget.reset_at <= now:
            budget = Budget(limit=limit, used=0, reset_at=now + WINDOW_S)
            if self._forced is not None and self._forced[1] > now:
                remaining, reset_at = self._forced
                budget.set_remaining(remaining, reset_at)
            self._budgets[key] = budget
        return budget

    def consume(self, key: str, limit: int, who: str) -> Budget:
        """Count one request, or raise GitHub's primary rate-limit error if the budget is spent."""
        budget = self.budget(key, limit)
        if budget.remaining <= 0:
            raise GitHubError(
                403,
                f"API rate limit exceeded for {who}.",
                RATE_LIMIT_DOCS,
                headers=budget.headers(),
            )
        budget.used += 1
        return budget

    def refund(self, key: str, limit: int) -> Budget:
        """Give back the request just counted: GitHub does not count a conditional request answered 304."""
        budget = self.budget(key, limit)
        budget.used = max(budget.used - 1, 0)
        return budget

    def force(self, remaining: int, reset_in: int) -> None:
        """Set every credential's remaining budget (now and until the reset) for the control API."""
        reset_at = int(time.time()) + reset_in
        self._forced = (remaining, reset_at)
        for budget in self._budgets.values():
            budget.set_remaining(remaining, reset_at)


def secondary_limit_error(retry_after: int, budget: Budget, request_id: str) -> GitHubError:
    return GitHubError(
        403,
        "You have exceeded a secondary rate limit. Please wait a few minutes before you try again. "
        f"If you reach out to GitHub Support for help, please include the request ID {request_id}.",
        SECONDARY_DOCS,
        headers={**budget.headers(), "Retry-After": str(retry_after)},
    )
