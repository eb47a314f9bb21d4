"""One running corral: configuration, store, cloud, GitHub and engine wired together, and reloads.

`corral serve` builds a Service and runs it; tests build one against the sandbox the same way, so the
code path is the one production runs.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from pathlib import Path

from corral.cloud.clouds import CloudSet
from corral.cloud.openstack import OpenStackProvider, connect
from corral.cloud.provider import CloudError, CloudProvider
from corral.config import CloudConfig, ConfigError, CorralConfig, load_config
from corral.engine.coordinator import Engine
from corral.engine.operator import Operator
from corral.github.client import GitHubClient
from corral.store import Intake, ServeLock, Store
from corral.tracing import JobTracing
from corral.userdata import UserDataError, load_template

logger = logging.getLogger("corral.service")


class Service:
    """Owns every long-lived part of a corral process."""

    def __init__(
        self,
        config: CorralConfig,
        *,
        config_path: Path | None = None,
        cloud: CloudProvider | CloudSet | None = None,
        store: Store | None = None,
        replica: str | None = None,
    ) -> None:
        tracing = JobTracing.from_environment()  # before anything starts: a refusal stops corral at once
        self.config_path = config_path
        self.serve_lock = ServeLock(config.database_url)
        self.serve_lock.acquire()
        try:
            self.store = store or Store(config.database_url, idle_in_transaction_s=config.lease_time)
            self.store.migrate()
            self.store.report_outages()
        except BaseException:
            self.serve_lock.release()
            raise
        self.cloud = self._clouds(config, cloud)
        self.github = GitHubClient(config.github)
        self.replica = replica or f"{socket.gethostname()}:{os.getpid()}"
        self.engine = Engine(
            config,
            self.store,
            self.cloud,
            self.github,
            user_data_template=load_template(config.user_data_template),
            replica=self.replica,
            reload_config=self.reload,
            tracing=tracing,
        )
        self.operator = Operator(self.engine)
        """What the API asks of the engine and does to it (and nothing else of it)."""
        self.intake = Intake(
            self.store,
            self.engine.recorded,
            config.tuning.intake_group,
            self.engine.clock,
            runner_pool=self.engine.pool_of_runner,
            held_elsewhere=self.engine.held_elsewhere,
        )
        self.stop_event = asyncio.Event()
        self.last_reload_problems: list[str] = []
        self._reloading = asyncio.Lock()

    @property
    def config(self) -> CorralConfig:
        """The running configuration: the engine's, which a reload swaps whole (the API and the engine never
        read two different ones)."""
        return self.engine.config

    @staticmethod
    def _clouds(config: CorralConfig, given: CloudProvider | CloudSet | None) -> CloudSet:
        """The clouds given (one provider stands for the first cloud), or each of the config's connected."""
        if isinstance(given, CloudSet):
            return given
        if given is not None:
            return CloudSet({config.default_cloud: given})

        def provider(settings: CloudConfig) -> CloudProvider:
            return OpenStackProvider(
                connect(settings),
                config.installation,
                timeout_s=settings.timeout,
                connections=settings.max_concurrent_creates + settings.threads,
                retries=settings.call_retries,
                retry_time_s=settings.call_retry_time,
            )

        return CloudSet(
            {name: provider(settings) for name, settings in config.cloud_settings().items()}, connect=provider
        )

    def _cloud_changes(self, config: CorralConfig) -> list[str]:
        """What a reload may not change of the clouds: the first (runners older than their cloud's record are
        in it), or the settings of one kept; clouds may be added (when this corral can connect them) and
        removed, and converge like pools."""
        old, new = self.config.cloud_settings(), config.cloud_settings()
        problems = []
        first = self.config.default_cloud
        if config.default_cloud != first or new[first] != old[first]:
            problems.append(f"clouds: the first cloud ({first}) cannot change at run time; restart corral to apply it")
        problems += [
            f"clouds.{name}: its settings cannot change at run time; restart corral, or add it under a new name"
            for name in sorted(old.keys() & new.keys())
            if name != first and old[name] != new[name]
        ]
        if set(new) - set(old) and not self.cloud.can_add:
            problems.append("clouds: this corral was given its clouds and cannot connect another; restart it")
        return problems

    @classmethod
    def from_file(
        cls, path: Path, *, cloud: CloudProvider | CloudSet | None = None, replica: str | None = None
    ) -> Service:
        return cls(load_config(path), config_path=path, cloud=cloud, replica=replica)

    async def run(self) -> None:
        await self.engine.run(self.stop_event)
        await self.engine.drain()
        await self.github.aclose()

    def stop(self) -> None:
        self.stop_event.set()

    async def reload(self) -> list[str]:
        """Re-read the config file; an invalid file keeps the running config and returns why.

        One reload at a time (the API, SIGHUP and another replica's request may ask at once): each one reads
        the file and judges it against the config the reload before it left, never against one half applied."""
        async with self._reloading:
            return await self._reload()

    async def _reload(self) -> list[str]:
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
        if config.github != self.config.github:
            unchangeable.append("github credentials")
        problems = [f"{key}: cannot change at run time; restart corral to apply it" for key in unchangeable]
        problems += self._cloud_changes(config)
        if problems:
            self.last_reload_problems = problems
            return problems
        try:
            await self.operator.apply_config(config)
        except CloudError as exc:
            problems = [f"clouds: cannot connect a cloud this configuration adds ({exc}); keeping the running one"]
            self.last_reload_problems = problems
            return problems
        except (OSError, UserDataError) as exc:
            # Checked with the file, but the template may have changed since (or the disk failed).
            problems = [f"user_data_template: {exc}; keeping the running configuration"]
            self.last_reload_problems = problems
            return problems
        self.last_reload_problems = []
        logger.info("configuration reloaded: generation %d, pools %s", self.engine.generation, sorted(config.pools))
        return []

    def close(self) -> None:
        self.cloud.close()
        self.store.close()
        self.serve_lock.release()
