"""Actions beside the passes (`engine.supervisor`): one action per key, nothing an action raises is lost, and
a pool moving to another replica mid-action is no error. Each action waits on an event the test sets, so
the order of events is the test's, not a timer's."""

from __future__ import annotations

import asyncio
import inspect
import logging

import pytest

from corral.engine.supervisor import ActionKind, Supervisor
from corral.metrics import REGISTRY
from corral.outages import DependencyUnavailable
from corral.store.leases import LeaseLost


def action_errors(kind: ActionKind) -> float:
    return REGISTRY.get_sample_value("corral_action_errors_total", {"kind": kind.value}) or 0.0


def test_a_runner_never_has_two_actions_at_once_and_the_second_is_not_left_unawaited() -> None:
    ran: list[str] = []

    async def action(name: str, release: asyncio.Event) -> None:
        await release.wait()
        ran.append(name)

    async def scenario() -> list[object]:
        supervisor = Supervisor()
        release = asyncio.Event()
        first = supervisor.start(ActionKind.CREATE, "runner-1", action("create", release), group="small")
        second_action = action("delete", release)
        second = supervisor.start(ActionKind.DELETE, "runner-1", second_action, group="small")
        seen: list[object] = [
            first,
            second,
            supervisor.busy("runner-1"),
            supervisor.group_busy("small"),
            supervisor.count,
        ]
        release.set()
        await supervisor.drain()
        seen += [supervisor.busy("runner-1"), supervisor.group_busy("small"), supervisor.count]
        seen.append(inspect.getcoroutinestate(second_action))  # closed: no "never awaited" warning
        return seen

    assert asyncio.run(scenario()) == [True, False, True, True, 1, False, False, 0, "CORO_CLOSED"]
    assert ran == ["create"]


def test_a_key_is_free_again_as_soon_as_its_action_ends() -> None:
    async def scenario() -> list[bool]:
        supervisor = Supervisor()
        supervisor.start(ActionKind.DELETE, "runner-1", asyncio.sleep(0))
        await supervisor.drain()
        return [supervisor.start(ActionKind.DELETE, "runner-1", asyncio.sleep(0)), supervisor.busy("runner-1")]

    assert asyncio.run(scenario()) == [True, True]


def test_groups_tell_which_pools_still_have_actions_under_way() -> None:
    async def scenario() -> list[tuple[bool, bool, bool]]:
        supervisor = Supervisor()
        small, big = asyncio.Event(), asyncio.Event()
        supervisor.start(ActionKind.CREATE, "r1", small.wait(), group="small")
        supervisor.start(ActionKind.CREATE, "r2", big.wait(), group="big")
        supervisor.start(ActionKind.OBSERVE, "observe", asyncio.Event().wait())
        seen = [(supervisor.group_busy("small"), supervisor.group_busy("big"), supervisor.group_busy("gone"))]
        small.set()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        seen.append((supervisor.group_busy("small"), supervisor.group_busy("big"), supervisor.group_busy("gone")))
        await supervisor.cancel()
        seen.append((supervisor.group_busy("small"), supervisor.group_busy("big"), supervisor.busy("observe")))
        return seen

    assert asyncio.run(scenario()) == [(True, True, False), (False, True, False), (False, False, False)]


def test_drain_waits_for_actions_that_actions_start() -> None:
    done: list[str] = []

    async def scenario() -> int:
        supervisor = Supervisor()

        async def delete() -> None:
            done.append("delete")

        async def create() -> None:
            done.append("create")
            supervisor.start(ActionKind.DELETE, "r1:delete", delete())

        supervisor.start(ActionKind.CREATE, "r1:create", create())
        await supervisor.drain()
        return supervisor.count

    assert asyncio.run(scenario()) == 0
    assert done == ["create", "delete"]


def test_an_unexpected_error_is_logged_counted_by_kind_and_recorded_on_the_runner(
    caplog: pytest.LogCaptureFixture,
) -> None:
    recorded: list[BaseException] = []
    before = action_errors(ActionKind.CREATE)

    async def create() -> None:
        raise ValueError("flavor has no disk")

    async def record(error: BaseException) -> None:
        recorded.append(error)

    async def scenario() -> None:
        supervisor = Supervisor()
        supervisor.start(ActionKind.CREATE, "runner-7", create(), record)
        await supervisor.drain()

    with caplog.at_level(logging.INFO, logger="corral.engine"):
        asyncio.run(scenario())
    assert [str(error) for error in recorded] == ["flavor has no disk"]
    assert action_errors(ActionKind.CREATE) == before + 1
    assert [(record.levelname, record.getMessage()) for record in caplog.records] == [
        ("ERROR", "create action runner-7 failed unexpectedly")
    ]
    assert caplog.records[0].exc_info is not None


def test_a_pool_lost_to_another_replica_mid_action_is_no_error() -> None:
    recorded: list[BaseException] = []
    before = action_errors(ActionKind.DELETE)

    async def delete() -> None:
        raise LeaseLost("small")

    async def record(error: BaseException) -> None:
        recorded.append(error)

    async def scenario() -> None:
        supervisor = Supervisor()
        supervisor.start(ActionKind.DELETE, "runner-7", delete(), record)
        await supervisor.drain()

    asyncio.run(scenario())
    assert recorded == []
    assert action_errors(ActionKind.DELETE) == before


def test_an_outage_error_is_recorded_on_the_runner_but_not_counted_as_a_bug() -> None:
    recorded: list[str] = []
    before = action_errors(ActionKind.RETIRE)

    async def retire() -> None:
        raise DependencyUnavailable("the database is down")

    async def record(error: BaseException) -> None:
        recorded.append(type(error).__name__)

    async def scenario() -> None:
        supervisor = Supervisor()
        supervisor.start(ActionKind.RETIRE, "runner-7", retire(), record)
        await supervisor.drain()

    asyncio.run(scenario())
    assert recorded == ["DependencyUnavailable"]
    assert action_errors(ActionKind.RETIRE) == before


def test_recording_a_failure_that_fails_too_is_counted_twice_and_raises_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    before = action_errors(ActionKind.ORPHAN)

    async def orphan() -> None:
        raise ValueError("no such server")

    async def record(error: BaseException) -> None:
        raise RuntimeError("the store refused")

    async def scenario() -> None:
        supervisor = Supervisor()
        supervisor.start(ActionKind.ORPHAN, "server-9", orphan(), record)
        await supervisor.drain()

    asyncio.run(scenario())
    assert action_errors(ActionKind.ORPHAN) == before + 2
    assert [record.getMessage() for record in caplog.records if record.name == "corral.engine"] == [
        "orphan action server-9 failed unexpectedly",
        "recording the failure of orphan action server-9 failed too",
    ]


def test_a_drain_given_up_leaves_the_actions_running_to_their_end() -> None:
    """A test or the demo bounds its settle with a timeout; giving up waiting must not cancel a create whose
    request has left (the server would be made and never recorded)."""
    done: list[str] = []

    async def scenario() -> tuple[int, int]:
        supervisor = Supervisor()
        release = asyncio.Event()

        async def create() -> None:
            await release.wait()
            done.append("create")

        supervisor.start(ActionKind.CREATE, "r1", create())
        await asyncio.sleep(0)  # the create waits on its event
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0):
                await supervisor.drain()
        under_way = supervisor.count
        release.set()
        await supervisor.drain()
        return under_way, supervisor.count

    assert asyncio.run(scenario()) == (1, 0)
    assert done == ["create"]


def test_cancel_stops_every_action_under_way() -> None:
    async def scenario() -> tuple[int, int, bool]:
        supervisor = Supervisor()
        for index in range(3):
            supervisor.start(ActionKind.CREATE, f"r{index}", asyncio.Event().wait())
        under_way = supervisor.count
        await asyncio.sleep(0)  # each action waits on its event
        await supervisor.cancel()
        return under_way, supervisor.count, supervisor.busy("r0")

    assert asyncio.run(scenario()) == (3, 0, False)


def test_an_action_cancelled_before_it_ran_is_closed_not_left_unawaited() -> None:
    """Cancelling at once (a drain or shutdown right after a pass started creates) used to leave the action's
    coroutine never awaited, and Python warned so at exit."""

    async def scenario() -> tuple[str, int]:
        supervisor = Supervisor()
        action = asyncio.Event().wait()
        supervisor.start(ActionKind.CREATE, "r0", action)
        await supervisor.cancel()  # before the task ever ran
        return inspect.getcoroutinestate(action), supervisor.count

    assert asyncio.run(scenario()) == ("CORO_CLOSED", 0)
