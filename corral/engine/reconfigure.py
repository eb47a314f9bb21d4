"""Adopting a reloaded configuration, whole or not at all.

Everything the new config needs is prepared first (the template read, added clouds connected); then config,
generation and template are swapped in one step, with no await between them, so nothing on the loop ever reads
half of a reload. Pools added, removed or changed converge from their next pass; so do clouds (a removed one
is listed until nothing of corral's is left in it: `Housekeeper`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor

from corral.clock import Clock
from corral.cloud.clouds import CloudSet
from corral.config import CorralConfig
from corral.engine.checks import PoolChecker
from corral.engine.membership import Membership
from corral.engine.quota import QuotaBudget
from corral.engine.running import Running
from corral.engine.workers import KeyedWorkers
from corral.executors import call_blocking
from corral.userdata import load_template

logger = logging.getLogger("corral.engine")


class Reconfigurer:
    def __init__(
        self,
        running: Running,
        cloud: CloudSet,
        *,
        checker: PoolChecker,
        check_due_pools: Callable[[], Awaitable[None]],
        membership: Membership,
        workers: KeyedWorkers,
        quotas: dict[str, QuotaBudget],
        cloud_threads: Executor,
        clock: Clock,
    ) -> None:
        self.running = running
        self.cloud = cloud
        self.checker = checker
        self.check_due_pools = check_due_pools
        self.membership = membership
        self.workers = workers
        self.quotas = quotas
        self.cloud_threads = cloud_threads
        self.clock = clock

    async def apply(self, config: CorralConfig) -> None:
        """Adopt a new configuration. Raises `CloudError` when an added cloud cannot be connected, and
        `UserDataError` or `OSError` when the template cannot be read: the reload then fails, and nothing of
        the new config is adopted."""
        template = load_template(config.user_data_template)
        await self._connect_added_clouds(config)
        running = self.running
        running.config, running.generation, running.template = config, running.generation + 1, template
        self.checker.forget()
        await self.check_due_pools()
        await self.membership.sync_workers()
        self.workers.wake_all()

    async def _connect_added_clouds(self, config: CorralConfig) -> None:
        for name, settings in config.cloud_settings().items():
            if name not in self.cloud.names:
                await call_blocking(self.cloud_threads, self.cloud.add, name, settings)
                self.quotas[name] = QuotaBudget(self.clock)
                logger.info("cloud %s added: pools may place runners in it", name)
        for name in set(self.quotas) - set(config.cloud_settings()):
            del self.quotas[name]  # no runner goes there any more; it is listed until empty
            logger.info("cloud %s removed from the config: its runners are retired, then it is left", name)
