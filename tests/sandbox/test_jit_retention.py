"""What the sandbox keeps of the JIT configs it issues: a live runner's secret, nothing of a deleted one.

A long benchmark or demo issues tens of thousands of configs (about 4 KB each); keeping them all made the
sandbox grow without bound. Counted by walking the GitHub side's objects, not by timing or memory figures.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from dataclasses import fields, is_dataclass
from typing import Any

import pytest

from corral_sandbox.server import Sandbox
from tests.sandbox.github_support import jit_config, pat_client
from tests.sandbox.scaleset_support import ScaleSetClient

ISSUED = 6
DELETED = 4


def strings_in(root: object) -> Iterator[str]:
    """Every string reachable from `root` through the sandbox's own objects and the containers they hold."""
    seen: set[int] = set()
    stack: list[Any] = [root]
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple | set | frozenset):
            stack.extend(item)
        elif type(item).__module__.startswith("corral_sandbox.github"):
            if is_dataclass(item):
                stack.extend(getattr(item, f.name) for f in fields(item))
            stack.extend(getattr(item, "__dict__", {}).values())


def secret_of(encoded: str) -> str:
    """The runner's private key exponent inside an `encoded_jit_config`: the part a live runner still needs."""
    files = json.loads(base64.b64decode(encoded))
    secret: str = json.loads(base64.b64decode(files[".credentials_rsaparams"]))["d"]
    return secret


def issue_classic(sandbox: Sandbox) -> list[tuple[int, str]]:
    """(runner id, encoded config) of runners registered with the REST API's `generate-jitconfig`."""
    gh = pat_client(sandbox)
    return [jit_config(gh, "octo-org", f"keep-{n}", ["small"]) for n in range(ISSUED)]


def issue_scale_set(sandbox: Sandbox) -> list[tuple[int, str]]:
    """The same through a runner scale set's `generatejitconfig`."""
    client = ScaleSetClient(sandbox).connect()
    try:
        scale_set = client.create_scale_set("keep")
        configs = [client.jit_config(scale_set["id"], f"keep-{n}") for n in range(ISSUED)]
    finally:
        client.close()
    return [(config["runner"]["id"], config["encodedJITConfig"]) for config in configs]


@pytest.mark.parametrize("issue", [issue_classic, issue_scale_set], ids=["rest", "scale-set"])
def test_the_sandbox_keeps_the_secret_of_live_runners_only_and_no_issued_config(
    sandbox: Sandbox, issue: Callable[[Sandbox], list[tuple[int, str]]]
) -> None:
    issued = issue(sandbox)
    gh = pat_client(sandbox)
    for runner_id, _ in issued[:DELETED]:
        assert gh.rest.actions.delete_self_hosted_runner_from_org("octo-org", runner_id).status_code == 204

    kept = set(sandbox.call(lambda: list(strings_in(sandbox.world.github))))

    configs_kept = sum(encoded in kept for _, encoded in issued)
    secrets_kept = [secret_of(encoded) in kept for _, encoded in issued]
    assert configs_kept == 0, "no issued config is kept whole"
    assert secrets_kept == [False] * DELETED + [True] * (ISSUED - DELETED), (
        "only the live runners' secrets are kept, which their guests must present"
    )
