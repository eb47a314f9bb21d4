"""The GitHub client's connection pool lets through as many calls at once as corral's settings ask for."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from corral.config import parse_config
from corral.github.client import GitHubClient
from corral_sandbox.local import corral_config, pool_spec
from corral_sandbox.server import Sandbox
from tests.waiting import wait_until_async

JIT_ENDPOINT = "POST /orgs/{org}/actions/runners/generate-jitconfig"


def test_as_many_jit_configs_as_jit_concurrency_allows_are_at_github_at_once(
    sandbox: Sandbox, control: httpx.Client, tmp_path: Path
) -> None:
    """`tuning.jit_concurrency` takes up to 256, but the client's pool held 32 connections: a burst's 33rd JIT
    config waited in the pool's queue whatever the setting said. GitHub holds each JIT config here (and then
    refuses it, so that nothing is registered after the test), and 48 asked at once are 48 at GitHub at once."""
    document = corral_config(sandbox.info, f"sqlite:///{tmp_path / 'corral.db'}", {"small": pool_spec(["small"])})
    document["tuning"] = {"jit_concurrency": 48}
    config = parse_config(document)
    scope = config.pools["small"].scope
    held = {"match": f"github {JIT_ENDPOINT}", "latency_ms": 8_000, "error_rate": 1.0, "status": 503}
    control.put("/faults", json={"endpoints": [held]}).raise_for_status()

    async def main() -> int:
        github = GitHubClient(config.github)
        await github.runner_group_id(scope, "Default")  # looked up once, before the burst
        calls = [
            asyncio.create_task(github.generate_jit_config(scope, f"wide-{n:02d}", ["small"], "Default"))
            for n in range(config.tuning.jit_concurrency)
        ]
        async with httpx.AsyncClient(base_url=sandbox.info.control_url) as sandbox_control:

            async def at_github() -> int | None:
                stats = (await sandbox_control.get("/stats")).raise_for_status().json()
                peak = stats["peak_in_flight"]["github"].get(JIT_ENDPOINT, 0)
                return peak if peak >= len(calls) else None

            try:
                return await wait_until_async(at_github, what="every JIT config at GitHub at once")
            finally:
                for call in calls:
                    call.cancel()
                await asyncio.gather(*calls, return_exceptions=True)
                await github.aclose()

    assert asyncio.run(main()) == 48
