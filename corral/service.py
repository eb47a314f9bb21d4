"""One running corral: configuration, store, cloud, GitHub and engine wired together, and reloads.

`corral serve` builds a Service and runs it; tests build one against the sandbox the same way, so the
code path is the one production runs.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from corral.api.views import PoolView
from corral.cloud.openstack import OpenStackProvider, connect
from corral.cloud.provider import CloudProvider
from corral.cloud.userdata import load_template
from corral.config import ConfigError, CorralConfig, load_config
from corral.engine.reconciler import Engine
from corral.github.client import GitHubClient
from corral.model import RunnerState
from corral.policy import plan_scale
from corral.store import Store

logger = logging.getLogger("corral.service")


class Service:
    """Owns every long-lived part of a corral process."""

    def __init__(
        self,
        config: CorralConfig,
        *,
        config_path: Path | None = None,
        cloud: CloudProvider | None = None,
        store: Store | None = None,
    ) -> None:
        self.config_path = config_path
        self.config = config
        self.store = store or Store(config.database_url)
        self.store.migrate()
        self.cloud = cloud or OpenStackProvider(connect(config.cloud), config.installation)
        self.github = GitHubClient(config.github)
        self.engine = Engine(
            config, self.store, self.cloud, self.github, user_data_template=load_template(config.user_data_template)
        )
        self.stop_event = asyncio.Event()
        self.last_reload_problems: list[str] = []

    @classmethod
    def from_file(cls, path: Path, *, cloud: CloudProvider | None = None) -> Service:
        return cls(load_config(path), config_path=path, cloud=cloud)

    async def run(self) -> None:
        await self.engine.run(self.stop_event)
        await self.engine.drain()
        await self.github.aclose()

    def stop(self) -> None:
        self.stop_event.set()

    async def reload(self) -> list[str]:
        """Re-read the config file; an invalid file keeps the running config and returns why."""
        if self.config_path is None:
            return ["this corral was started without a config file; nothing to reload"]
        try:
            config = load_config(self.config_path)
        except ConfigError as exc:
            logger.warning("reload refused, keeping generation %d: %s", self.engine.generation, exc)
            self.last_reload_problems = exc.problems
            return exc.problems
        unchangeable = [
            key
            for key in ("database_url", "installation", "name_prefix")
            if getattr(config, key) != getattr(self.config, key)
        ]
        if config.github != self.config.github or config.cloud != self.config.cloud:
            unchangeable.append("github/cloud credentials")
        if unchangeable:
            problems = [f"{key}: cannot change at run time; restart corral to apply it" for key in unchangeable]
            self.last_reload_problems = problems
            return problems
        self.config = config
        await self.engine.apply_config(config)
        self.last_reload_problems = []
        logger.info("configuration reloaded: generation %d, pools %s", self.engine.generation, sorted(config.pools))
        return []

    def pool_views(self) -> list[PoolView]:
        """Per pool (including removed pools still draining): desired, runners by state, readiness."""
        statuses = self.store.pool_statuses()
        names = sorted(set(self.config.pools) | self.store.live_pools())
        views = []
        for name in names:
            pool = self.config.pools.get(name)
            states = self.store.runner_states(name)
            demand = self.engine.judge_demand(name)
            pool_counts = self.engine.pool_counts(name, demand.wanted, states=states)
            min_idle, max_runners = (pool.min_idle, pool.max_runners) if pool else (0, 0)
            plan = plan_scale(pool_counts, min_idle=min_idle, max_runners=max_runners)
            ready, reason = self.engine.pool_ready(name) if pool else (False, "removed from the configuration")
            status = statuses.get(name)

            views.append(
                PoolView(
                    name=name,
                    default=name == self.config.default_pool,
                    removed=pool is None,
                    ready=ready,
                    reason=reason,
                    applied_generation=status.applied_generation if status else 0,
                    desired=plan.desired,
                    min_idle=min_idle,
                    max_runners=max_runners,
                    queued_jobs=pool_counts.queued_jobs,
                    held_jobs=len(demand.held),
                    pending=states[RunnerState.PENDING],
                    creating=states[RunnerState.CREATING],
                    booting=states[RunnerState.BOOTING],
                    starting=pool_counts.starting,
                    idle=states[RunnerState.IDLE],
                    busy=states[RunnerState.BUSY],
                    failed=states[RunnerState.FAILED],
                    deleting=states[RunnerState.DELETING],
                )
            )
        return views

    def close(self) -> None:
        self.cloud.close()
        self.store.close()
