"""STUB (to be replaced): GitHub's state. See the interface in the docstrings."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from corral.sandbox.world import World


class GitHubState:
    """Organisations, repositories, installations, tokens, runners, jobs and webhook deliveries.

    Interface the world and the control API rely on:
    - `runner_for_user_data(user_data) -> runner id | None`: the runner whose unused JIT config the
      user data carries (verbatim, or inside a base64 blob).
    - `connect_runner(runner_id)`: the runner comes online and takes a queued job it fits.
    - `disconnect_runner(runner_id)`: its machine is gone: offline; a job it was running fails.
    - calls `world.runner_exited(runner_id)` when an ephemeral runner finished its job and deregistered.
    - `submit_job(repo, labels, duration, workflow_name=None) -> dict`, `job_view(job_id) -> dict | None`,
      `cancel_job(job_id) -> dict | None`: the control API's job shape.
    - `webhook_url` (settable), `snapshot()` for `/_sandbox/stats`.
    """

    def __init__(self, world: World, webhook_url: str | None = None) -> None:
        self.world = world
        self.webhook_url = webhook_url

    def runner_for_user_data(self, user_data: bytes) -> int | None:
        raise NotImplementedError

    def connect_runner(self, runner_id: int) -> None:
        raise NotImplementedError

    def disconnect_runner(self, runner_id: int) -> None:
        raise NotImplementedError

    def snapshot(self) -> dict[str, Any]:
        return {}
