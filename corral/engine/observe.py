"""One look at both far ends per pass: every owned server in one listing, every registration per scope."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from concurrent.futures import Executor
from dataclasses import dataclass, field

from corral.cloud.provider import CloudError, CloudProvider, CloudServer
from corral.config import ScopeConfig
from corral.engine.backoff import LogOnce
from corral.github.client import GitHubClient, GitHubError, RegisteredRunner
from corral.metrics import CLOUD_CALLS, GITHUB_ERRORS

logger = logging.getLogger("corral.engine")


@dataclass
class Observation:
    """What the cloud and GitHub said this pass. `servers` is None when the cloud could not be listed;
    a scope missing from `registrations` could not be listed either. Absence proves nothing then."""

    servers: dict[str, CloudServer] | None
    registrations: dict[str, dict[str, RegisteredRunner]] = field(default_factory=dict)

    def server_for(self, runner_id: str) -> CloudServer | None:
        return None if self.servers is None else self.servers.get(runner_id)

    def registration_for(self, scope_key: str, name: str) -> RegisteredRunner | None:
        return self.registrations.get(scope_key, {}).get(name)


async def observe(
    cloud: CloudProvider,
    github: GitHubClient,
    scope_keys: Iterable[str],
    *,
    log_once: LogOnce,
    executor: Executor | None = None,
) -> Observation:
    try:
        servers = await asyncio.get_running_loop().run_in_executor(executor, cloud.list_servers)
        CLOUD_CALLS.labels("list_servers", "ok").inc()
        log_once.clear("cloud:list")
        by_runner: dict[str, CloudServer] | None = {server.runner_id: server for server in servers}
    except CloudError as exc:
        CLOUD_CALLS.labels("list_servers", type(exc).__name__).inc()
        log_once.warning("cloud:list", f"cannot list servers, judging no runner by the cloud this pass: {exc}")
        by_runner = None
    observation = Observation(servers=by_runner)
    for key in sorted(set(scope_keys)):
        scope = ScopeConfig.from_key(key)
        if github.paused_for(scope) > 0:
            continue  # at the rate limit: absent from `registrations`, so nothing is judged by its absence
        try:
            runners = await github.list_runners(scope)
        except GitHubError as exc:
            GITHUB_ERRORS.labels(type(exc).__name__).inc()
            log_once.warning(f"github:list:{key}", f"cannot list runners of {key}: {exc}")
            continue
        log_once.clear(f"github:list:{key}")
        observation.registrations[key] = {runner.name: runner for runner in runners}
    return observation
