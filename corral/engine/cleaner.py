"""Removing what runners leave behind: servers (with their volumes) and GitHub registrations.

A runner in `deleting` has its server and registration deleted, then stays `deleting` until a look at both
sides shows them gone (Nova deletes asynchronously; a delete that was accepted is not yet a server that is
gone). Deletes are tried again once per new look while the runner is still `deleting`, so a cloud that
refuses for an hour is asked once a period, not in a storm. A runner retired while it could still take a
job (idle, or of a removed pool) loses its registration first, so GitHub cannot hand it a job meanwhile.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import replace

from corral.clock import SYSTEM_CLOCK, Clock
from corral.cloud.clouds import CloudSet
from corral.cloud.provider import CloudError, CloudServer
from corral.config import ScopeConfig
from corral.engine.backoff import LogOnce
from corral.engine.observe import Observation
from corral.engine.running import Running
from corral.engine.transitions import Mover
from corral.executors import call_blocking
from corral.github.client import GitHubClient, GitHubError
from corral.metrics import CLOUD_CALL_SECONDS, CLOUD_CALLS, GITHUB_ERRORS, ORPHANS_DELETED
from corral.model import Reason, Runner, RunnerState

logger = logging.getLogger("corral.engine")

FORGET_ATTEMPTS_OVER = 10_000
"""Runners whose last delete attempt is remembered, at most (older ones are simply tried again)."""


class Cleaner:
    def __init__(
        self,
        mover: Mover,
        clouds: CloudSet,
        github: GitHubClient,
        executor: Executor,
        log_once: LogOnce,
        running: Running,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """`running`'s config says which cloud a runner is in from what its row recorded
        (`CorralConfig.cloud_of`). `clock` times the cloud's delete calls."""
        self._clock = clock
        self._mover = mover
        self._clouds = clouds
        self._running = running
        self._github = github
        self._executor = executor
        self._log_once = log_once
        self._attempted: dict[str, int] = {}

    def due(self, runner: Runner, observation: Observation | None) -> bool:
        """Whether a `deleting` runner should be tried (again): once per look at the far ends."""
        generation = observation.generation if observation is not None else 0
        return self._attempted.get(runner.id, -1) < generation

    async def delete(self, runner: Runner, observation: Observation | None) -> None:
        """Delete the runner's server and registration, whichever may still exist."""
        self._attempted[runner.id] = observation.generation if observation is not None else 0
        while len(self._attempted) > FORGET_ATTEMPTS_OVER:
            del self._attempted[next(iter(self._attempted))]
        listed = observation.server_for(runner.id) if observation is not None else None
        servers = {(runner.server_id, self._cloud_of(runner))} if runner.server_id else set()
        if listed is not None:
            servers.add((listed.id, listed.cloud))
        for server_id, cloud in servers:
            await self.delete_server(server_id, cloud)
        # A registration the last look listed (found by name too: a crash between the JIT config and
        # recording its id leaves one corral knows only by the name it gave it), or, when the scope could
        # not be listed, the one corral recorded. An ephemeral runner deregisters itself after its job, so
        # most runners need no call here at all: a listing from a look that began before the runner was
        # done is stale for most of them (nearly one wasted call per job), so it waits for the next look,
        # which begins after. Its server is gone by then, so no job can reach it meanwhile.
        listed_scope = observation is not None and runner.scope in observation.registrations
        registration = observation.registration_for(runner.scope, runner.name) if observation is not None else None
        if registration is not None:
            assert observation is not None
            if observation.started_at >= runner.state_changed_at:
                await self.delete_registration(runner, registration.id)
        elif not listed_scope and runner.github_runner_id is not None:
            await self.delete_registration(runner, runner.github_runner_id)

    async def retire(self, runner: Runner, reason: Reason, message: str | None = None) -> bool:
        """Remove a runner nobody needs: registration first, then the server. False if it took a job after
        all (GitHub refuses to delete a busy runner's registration), or GitHub could not be asked."""
        if runner.github_runner_id is not None and not await self.delete_registration(runner, runner.github_runner_id):
            return False
        deleting = await self._mover.move(runner, RunnerState.DELETING, reason, message)
        if deleting is None:
            return False
        if deleting.server_id is not None:
            await self.delete_server(deleting.server_id, self._cloud_of(deleting))
        return True

    def _cloud_of(self, runner: Runner) -> str:
        return self._running.config.cloud_of(runner.cloud)

    async def delete_server(self, server_id: str, cloud: str) -> bool:
        started = self._clock.monotonic()
        try:
            await call_blocking(self._executor, self._clouds.delete_server, server_id, cloud)
        except CloudError as exc:
            CLOUD_CALLS.labels("delete_server", type(exc).__name__).inc()
            self._log_once.warning(
                "cloud:delete_server", f"delete server {server_id} failed, trying again later: {exc}"
            )
            return False
        finally:
            CLOUD_CALL_SECONDS.labels("delete_server").observe(self._clock.monotonic() - started)
        CLOUD_CALLS.labels("delete_server", "ok").inc()
        return True

    async def delete_registration(self, runner: Runner, registration_id: int) -> bool:
        """True when the registration is gone (or already was); False while it runs a job or GitHub fails."""
        try:
            return await self._github.delete_runner(ScopeConfig.from_key(runner.scope), registration_id)
        except GitHubError as exc:
            GITHUB_ERRORS.labels(type(exc).__name__).inc()
            self._log_once.warning("github:delete", f"GitHub: delete runner {runner.name} failed: {exc}")
            return False

    def on_error(self, runner: Runner) -> Callable[[BaseException], Awaitable[None]]:
        """What the supervisor does with an exception a delete did not expect: it is noted on the runner,
        which stays `deleting` and is tried again after the next look."""

        async def record(exc: BaseException) -> None:
            await self._mover.note(runner, Reason.INTERNAL_ERROR, f"delete failed: {type(exc).__name__}: {exc}"[:500])

        return record

    async def delete_orphan_registration(self, runner: Runner, scope: str, registration_id: int) -> None:
        """A registration GitHub still lists for a runner corral has already deleted (its deletion failed, or
        GitHub listed it late): the join of both views catches it on the next look. It is deleted where it
        was listed, which is where it lives, whatever scope corral recorded for the runner."""
        logger.warning("deleting registration %s of runner %s, which was already deleted", registration_id, runner.name)
        ORPHANS_DELETED.labels("registration").inc()
        await self.delete_registration(replace(runner, scope=scope), registration_id)

    async def delete_orphan(self, server: CloudServer) -> None:
        logger.info("deleting orphaned server %s (%s): no live runner owns it", server.name, server.id)
        ORPHANS_DELETED.labels("server").inc()
        await self.delete_server(server.id, server.cloud)
