"""No exception is lost with a task nobody awaits: the look at the far ends and the engine's loops log what
they raise once, and count it in `corral_action_errors_total` (issue 25, item 9)."""

from __future__ import annotations

import asyncio

import pytest

from corral.clock import utcnow
from corral.engine.loops import start_loop
from corral.engine.observe import Observation, Observer, observe
from corral.metrics import REGISTRY
from corral_sandbox.local import pool_spec
from tests.conftest import StartCorral
from tests.minimal_config import running


def action_errors(kind: str) -> float:
    return REGISTRY.get_sample_value("corral_action_errors_total", {"kind": kind}) or 0.0


def test_a_look_that_raises_and_acting_on_one_that_raises_are_each_logged_once_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    looks: list[int] = []

    async def look(generation: int) -> Observation:
        looks.append(generation)
        if len(looks) == 1:
            raise ValueError("a bug in the look")
        return Observation(generation, started_at=utcnow(), servers=None)

    async def acted_on(observation: Observation) -> None:
        raise KeyError("a bug after the look")

    async def scenario() -> tuple[Observation | None, Observation | None]:
        observer = Observer(look, acted_on, running(reconcile_interval=3600))
        stop = asyncio.Event()
        observing = asyncio.ensure_future(observer.run(stop))
        failed = await observer.look_now()
        looked = await observer.look_now()
        stop.set()
        observer.refresh()
        await observing
        return failed, looked

    before = action_errors("observe")
    failed, looked = asyncio.run(scenario())
    assert (failed, looked is not None and looked.generation) == (None, 1)
    assert action_errors("observe") - before == 2
    logged = [(r.getMessage(), type(r.exc_info[1]).__name__) for r in caplog.records if r.exc_info is not None]
    assert logged == [
        ("looking at the cloud and GitHub failed unexpectedly; trying again shortly", "ValueError"),
        ("acting on an observation failed unexpectedly", "KeyError"),
    ]


def test_a_look_that_raises_leaves_none_of_its_parts_running_unheard(start_corral: StartCorral) -> None:
    """A scope corral cannot read (an old or hand-edited runner row) fails the look: the listings of the cloud
    and its limits, begun beside it, end with it instead of running on with nobody to hear how they end."""
    corral = start_corral({"small": pool_spec(["small"])}, reconcile_interval="1h")
    engine = corral.service.engine

    async def scenario() -> tuple[str, list[str]]:
        await engine.observer.look_now()  # the engine's own look is over; the next is an hour away
        with pytest.raises(Exception) as raised:
            await observe(1, engine.cloud, engine.github, ["org:octo-org", "nonsense:x"], log_once=engine.log_once)
        left = sorted(
            task.get_coro().__qualname__  # type: ignore[union-attr]
            for task in asyncio.all_tasks()
            if "observe.<locals>" in getattr(task.get_coro(), "__qualname__", "") and not task.done()
        )
        return type(raised.value).__name__, left

    assert corral.call(scenario) == ("ValidationError", [])


def test_an_engine_loop_that_ends_on_an_exception_is_logged_once_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    async def broken() -> None:
        raise RuntimeError("a bug in a loop")

    async def scenario() -> None:
        await asyncio.gather(start_loop(broken(), "corral-broken"), return_exceptions=True)

    before = action_errors("loop")
    asyncio.run(scenario())
    assert action_errors("loop") - before == 1
    logged = [(r.getMessage(), str(r.exc_info[1])) for r in caplog.records if r.exc_info is not None]
    assert logged == [("corral-broken ended unexpectedly; restart corral", "a bug in a loop")]
