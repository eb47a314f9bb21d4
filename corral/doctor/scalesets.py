"""The scale-set part of `corral doctor`'s GitHub section: for each `intake: scale_set` pool, the Actions
service reached through the registration exchange (the same path corral takes at start), the pool's runner
group, and its scale set, found or to be created at start.

A scale-set pool needs nothing of GitHub beyond what a webhook pool needs (the credential creates
registration tokens at the pool's scope), but it reaches a second service, whose URL GitHub hands out, and
a runner group that must exist: the two things a first start would otherwise fail on, in a loop.
"""

from __future__ import annotations

import asyncio

from corral.config import CorralConfig, PoolConfig, scale_set_name
from corral.doctor.report import Section
from corral.github.client import GitHubClient, GitHubError
from corral.github.scaleset import ActionsService


def check_scale_sets(config: CorralConfig, section: Section, timeout_s: float) -> None:
    pools = {name: pool for name, pool in sorted(config.pools.items()) if pool.intake == "scale_set"}
    if pools:
        asyncio.run(_check(config, pools, section, timeout_s))


async def _check(config: CorralConfig, pools: dict[str, PoolConfig], section: Section, timeout_s: float) -> None:
    github = GitHubClient(config.github)
    services: dict[str, ActionsService] = {}
    try:
        for name, pool in pools.items():
            service = services.get(pool.scope.key)
            if service is None:
                service = services[pool.scope.key] = ActionsService(github, pool.scope, timeout_s=timeout_s)
            await _check_pool(name, pool, service, section, timeout_s)
    finally:
        for service in services.values():
            await service.aclose()
        await github.aclose()


async def _check_pool(name: str, pool: PoolConfig, service: ActionsService, section: Section, timeout_s: float) -> None:
    item = f"pool {name}: scale set"
    wanted = scale_set_name(name, pool)
    try:
        group_id = await asyncio.wait_for(service.runner_group_id(pool.runner_group), timeout_s)
    except TimeoutError:
        section.failed(item, f"the Actions service did not answer within {timeout_s:.0f}s", "run the doctor again")
        return
    except GitHubError as exc:
        if "runner group" in str(exc):
            fix = (
                f"create the runner group {pool.runner_group!r} at {pool.scope.target} (Settings, Actions, Runner "
                f"groups), or set pools.{name}.runner_group to one that exists"
            )
        else:
            fix = (
                f"corral's credential must create runner registration tokens at {pool.scope.target} (as for any "
                "pool), and this machine must reach the Actions service URL GitHub hands out (proxy, firewall)"
            )
        section.failed(item, str(exc), fix)
        return
    try:
        found = await asyncio.wait_for(service.find_scale_set(group_id, wanted), timeout_s)
    except (GitHubError, TimeoutError) as exc:
        section.failed(item, str(exc) or "no answer in time", "run the doctor again")
        return
    if found is None:
        section.passed(
            item, f"runner group {pool.runner_group!r} found; corral creates the scale set {wanted!r} when it starts"
        )
    else:
        section.passed(item, f"scale set {wanted!r} (id {found.id}) in runner group {pool.runner_group!r}")
