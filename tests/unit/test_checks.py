"""The pool checker: a pool parked by the same refusal twice stays parked until a check begun after the park
says it can be served, even when a check begun before the park (it could not have seen the refusals) ends
after it."""

from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import ThreadPoolExecutor

from corral.cloud.clouds import CloudSet
from corral.cloud.provider import CacheVolumeSpec, CloudServer, CloudVolume, ServerSpec
from corral.cloud.quota import Headroom, ServerCost
from corral.engine.backoff import LogOnce
from corral.engine.checks import PoolChecker
from tests.minimal_config import running

SPEC = ServerSpec(name="corral-small-1", image="ubuntu", flavor="m1.small")
REFUSAL = "create server corral-small-{}: HTTP 400: injected fault"


class SlowCheckCloud:
    """A cloud that finds nothing wrong with the pool, answering each check only when the test lets it."""

    def __init__(self) -> None:
        self.answer = threading.Event()
        self.asked = threading.Event()

    def check_pool(self, spec: ServerSpec) -> list[str]:
        self.asked.set()
        self.answer.wait(timeout=10)
        return []

    def server_cost(self, spec: ServerSpec) -> ServerCost:
        return ServerCost(cores=1, ram_mb=1024)

    def image_id(self, spec: ServerSpec) -> str:
        return "img-1"

    def list_servers(self) -> list[CloudServer]:
        return []

    def create_server(self, spec: ServerSpec) -> CloudServer:
        raise AssertionError("not asked")

    def delete_server(self, server_id: str) -> None:
        raise AssertionError("not asked")

    def headroom(self, volumes: bool) -> Headroom:
        return Headroom()

    def list_cache_volumes(self) -> list[CloudVolume]:
        return []

    def create_cache_volume(self, spec: CacheVolumeSpec) -> CloudVolume:
        raise AssertionError("not asked")

    def volume(self, volume_id: str) -> CloudVolume | None:
        return None

    def delete_volume(self, volume_id: str) -> None:
        raise AssertionError("not asked")

    def detach_volume(self, volume_id: str, attachment_id: str) -> None:
        raise AssertionError("not asked")

    def close(self) -> None:
        """Nothing to close."""


def test_a_check_begun_before_the_pool_was_parked_does_not_make_it_ready_again() -> None:
    now = [100.0]
    cloud = SlowCheckCloud()
    checker = PoolChecker(
        CloudSet({"default": cloud}), ThreadPoolExecutor(1), LogOnce(logging.getLogger("test")), lambda: now[0],
        running(),  # pool_recheck: 300 s
    )  # fmt: skip

    async def main() -> tuple[bool, bool, bool]:
        cloud.answer.set()
        await checker.check("small", SPEC)  # checked: the pool can be served
        ready_before = checker.readiness("small")[0]
        cloud.answer.clear()
        now[0] = 110.0
        assert checker.refused("small", REFUSAL.format(1), sent_at=109.0) == 0.0  # first refusal: check again
        now[0] = 111.0
        checking = asyncio.create_task(checker.check("small", SPEC))  # the check the first refusal asked for
        await asyncio.get_running_loop().run_in_executor(None, cloud.asked.wait, 10)
        now[0] = 112.0
        assert checker.refused("small", REFUSAL.format(2), sent_at=111.5) == 300.0  # the same again: parked
        cloud.answer.set()
        await checking  # ...and the check begun at 111 s ends after the park
        parked = checker.readiness("small")[0]
        now[0] = 413.0
        cloud.asked.clear()
        await checker.check("small", SPEC)  # the check after the park finds the pool fit again
        return ready_before, parked, checker.readiness("small")[0]

    assert asyncio.run(main()) == (True, False, True)


def test_the_check_loop_sleeps_until_the_next_check_falls_due_and_a_refusal_wakes_it() -> None:
    """Looking every second whether a check is due was most of an idle simulated day's work: the loop sleeps
    until the first check falls due (a minute at most), and a refusal, which asks for a check at once, wakes it."""
    now = [100.0]
    cloud = SlowCheckCloud()
    cloud.answer.set()
    checker = PoolChecker(
        CloudSet({"default": cloud}), ThreadPoolExecutor(1), LogOnce(logging.getLogger("test")), lambda: now[0],
        running(),  # pool_recheck: 300 s
    )  # fmt: skip

    async def main() -> tuple[list[float], bool]:
        waits = [checker.wait_s(["small"], 60.0), checker.wait_s([], 60.0)]  # never checked; nothing held
        await checker.check("small", SPEC)  # at 100 s: the next check at 400 s
        now[0] = 150.0
        waits.append(checker.wait_s(["small"], 60.0))
        now[0] = 380.0
        waits.append(checker.wait_s(["small"], 60.0))
        checker.sooner.clear()
        checker.refused("small", REFUSAL.format(1), sent_at=379.0)
        waits.append(checker.wait_s(["small"], 60.0))
        return waits, checker.sooner.is_set()

    assert asyncio.run(main()) == ([0.0, 60.0, 60.0, 20.0, 0.0], True)
