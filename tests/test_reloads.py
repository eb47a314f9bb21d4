"""Reloads that arrive together (the API, SIGHUP, another replica's request) run one after the other, and each
swaps the whole config at once (issue 25, item 6).

The interleaving is driven step by step on corral's own loop: a task's first step runs up to its first real
suspension, so `asyncio.sleep(0)` (one turn of the loop, no wall-clock wait) lets exactly that much happen.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import yaml

from corral_sandbox.local import corral_config, pool_spec
from corral_sandbox.server import Sandbox
from tests.conftest import StartCorral


def document(sandbox: Sandbox, tmp_path: Path, *pools: str) -> dict[str, Any]:
    return corral_config(
        sandbox.info,
        f"sqlite:///{tmp_path / 'corral.db'}",
        {name: pool_spec([name]) for name in pools},
        default_pool=pools[0],
    )


def test_reloads_asked_at_once_run_one_after_the_other_and_swap_the_config_whole(
    sandbox: Sandbox, start_corral: StartCorral, tmp_path: Path
) -> None:
    corral = start_corral(document=document(sandbox, tmp_path, "small"))
    service, engine = corral.service, corral.service.engine
    first, second = document(sandbox, tmp_path, "small", "first"), document(sandbox, tmp_path, "small", "second")

    async def scenario() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        generation = engine.generation
        corral.write_config(first)
        by_api = asyncio.ensure_future(service.reload())
        await asyncio.sleep(0)  # the first reload runs until it waits (on the cloud or the database)
        seen["first under way"] = (not by_api.done(), engine.generation - generation, sorted(engine.config.pools))
        seen["the API reads the engine's config"] = service.config is engine.config
        corral.write_config(second)
        by_sighup = asyncio.ensure_future(service.reload())
        await asyncio.sleep(0)  # the second reload's first step: it must not begin before the first ends
        seen["second began before the first ended"] = engine.generation - generation == 2 and not by_api.done()
        seen["answers"] = await asyncio.gather(by_api, by_sighup)
        seen["after both"] = (
            engine.generation - generation,
            sorted(engine.config.pools),
            service.config is engine.config,
        )
        return seen

    assert corral.call(scenario) == {
        "first under way": (True, 1, ["first", "small"]),
        "the API reads the engine's config": True,
        "second began before the first ended": False,
        "answers": [[], []],
        "after both": (2, ["second", "small"], True),
    }
    assert yaml.safe_load(corral.config_path.read_text()) == second
