"""The unit layer's guards (conftest.py) refuse what a unit test may not do, and let through what it may."""

from __future__ import annotations

import asyncio
import os
import queue
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import pytest_socket

from tests.unit import virtual_time
from tests.unit.conftest import OutsideTheUnitLayer


def start_a_child() -> Any:
    """Through a helper: tests/conftest.py marks e2e a test whose own code names `subprocess`."""
    return subprocess.run(["true"], check=True)


@pytest.mark.filterwarnings("ignore:A test tried to use socket")
def test_opening_an_internet_socket_is_refused_and_recorded(_unit_boundary: list[str]) -> None:
    with pytest.raises(pytest_socket.SocketBlockedError):
        socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    with pytest.raises(pytest_socket.SocketBlockedError):
        socket.getaddrinfo("github.com", 443)
    assert _unit_boundary == ["open a socket", "resolve a host name"]
    _unit_boundary.clear()


@pytest.fixture(scope="module")
def thread_from_before() -> Iterator[Callable[[Callable[[], object]], object]]:
    """A thread started before the tests that use it (as a session's sandbox is): it runs what it is handed."""
    work: queue.Queue[Callable[[], object] | None] = queue.Queue()
    done: queue.Queue[object] = queue.Queue()

    def serve() -> None:
        while (job := work.get()) is not None:
            try:
                done.put(job())
            except Exception as exc:
                done.put(exc)

    thread = threading.Thread(target=serve, name="from-before", daemon=True)
    thread.start()

    def run(job: Callable[[], object]) -> object:
        work.put(job)
        return done.get()

    yield run
    work.put(None)
    thread.join()


def open_and_close_an_internet_socket() -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as opened:
        return type(opened).__name__


@pytest.mark.filterwarnings("ignore:A test tried to use socket.socket")
def test_only_the_tests_own_threads_are_held_to_the_boundary(
    thread_from_before: Callable[[Callable[[], object]], object], _unit_boundary: list[str]
) -> None:
    assert thread_from_before(open_and_close_an_internet_socket) == "OwnThreadsSocket"
    assert _unit_boundary == []
    outcome: list[object] = []
    started = threading.Thread(target=lambda: outcome.append(_try_socket()))
    started.start()
    started.join()
    assert outcome == ["SocketBlockedError"]
    assert _unit_boundary == ["open a socket"]
    _unit_boundary.clear()


def _try_socket() -> str:
    try:
        return open_and_close_an_internet_socket()
    except pytest_socket.SocketBlockedError as exc:
        return type(exc).__name__


def test_a_unix_socket_pair_is_allowed_because_every_event_loop_makes_one() -> None:
    left, right = socket.socketpair()
    with left, right:
        left.sendall(b"x")
        assert right.recv(1) == b"x"


@pytest.mark.parametrize(
    ("what", "attempt"),
    [
        ("call time.sleep", lambda: time.sleep(0.01)),
        ("start a child process", start_a_child),
        ("start a child process", lambda: os.system("true")),
    ],
    ids=["time.sleep", "subprocess", "os.system"],
)
def test_a_real_wait_or_a_child_process_is_refused_and_recorded(
    what: str, attempt: Callable[[], object], _unit_boundary: list[str]
) -> None:
    with pytest.raises(OutsideTheUnitLayer, match=f"may not {what}"):
        attempt()
    assert _unit_boundary == [what]
    _unit_boundary.clear()  # recorded: the fixture would fail this test at teardown


def test_asyncio_sleep_of_zero_yields_but_any_longer_wait_is_refused(_unit_boundary: list[str]) -> None:
    order: list[str] = []

    async def other() -> None:
        order.append("other")

    async def scenario() -> None:
        task = asyncio.create_task(other())
        await asyncio.sleep(0)
        order.append("after the yield")
        await task
        with pytest.raises(OutsideTheUnitLayer, match=r"may not wait 0\.5 s"):
            await asyncio.sleep(0.5)

    asyncio.run(scenario())
    assert order == ["other", "after the yield"]
    assert _unit_boundary == ["wait 0.5 s with asyncio.sleep"]
    _unit_boundary.clear()


def test_every_test_here_is_marked_unit(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("unit") is not None


def test_on_the_virtual_loop_an_hour_of_timers_passes_at_once_and_to_the_second() -> None:
    async def scenario() -> list[tuple[str, float]]:
        loop = asyncio.get_running_loop()
        seen: list[tuple[str, float]] = []
        loop.call_later(90, lambda: seen.append(("call_later", loop.time())))
        await asyncio.sleep(3600)
        seen.append(("slept", loop.time()))
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(45):
                await asyncio.Event().wait()
        seen.append(("timed out", loop.time()))
        return seen

    assert virtual_time.run(scenario()) == [("call_later", 90.0), ("slept", 3600.0), ("timed out", 3645.0)]


def test_on_the_virtual_loop_a_worker_threads_answer_still_arrives() -> None:
    async def scenario() -> tuple[int, float]:
        return await asyncio.to_thread(sum, [1, 2, 3]), virtual_time.now()

    assert virtual_time.run(scenario()) == (6, 0.0)
