"""The unit layer's boundary: a test under tests/unit runs in one process, on virtual time, with no network.

Every test here is marked `unit` (`pytest -m unit` selects them, `bash scripts/test.sh --unit` runs them alone),
and fails if it opens a socket (pytest-socket; AF_UNIX stays allowed because `asyncio.run` makes its wake-up
pipe with `socket.socketpair`), starts a child process, or really waits: `time.sleep` at all, `asyncio.sleep`
for more than 0 s (`asyncio.sleep(0)` only yields to the other tasks, and tests use it to let them run) unless
the loop runs on virtual time (`virtual_time.run`), where a wait costs nothing. A unit that needs time takes a
clock: the test moves it, or gives it the virtual loop's. The guards record every attempt as well as raising, so code
that swallows the exception (a loop that logs and retries) still fails its test.
"""

from __future__ import annotations

import asyncio
import multiprocessing.util
import os
import subprocess
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest
import pytest_socket

from tests.unit.virtual_time import VirtualTimeLoop

UNIT_DIR = Path(__file__).parent


class OutsideTheUnitLayer(RuntimeError):
    """A unit test reached for a process or a real wait."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark `unit` every test collected from this folder, so that `-m unit` selects exactly the unit layer."""
    for item in items:
        if UNIT_DIR in item.path.parents:
            item.add_marker(pytest.mark.unit)


@pytest.fixture(autouse=True)
def _unit_boundary(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Block sockets, child processes and real waits for one test; fail it afterwards if it tried any."""
    attempts: list[str] = []

    def refuse(what: str) -> Callable[..., NoReturn]:
        def refused(*args: Any, **kwargs: Any) -> NoReturn:
            attempts.append(what)
            raise OutsideTheUnitLayer(f"a unit test may not {what}: inject a clock or a fake instead")

        return refused

    monkeypatch.setattr(time, "sleep", refuse("call time.sleep"))
    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse("start a child process"))
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
        monkeypatch.setattr(os, name, refuse("start a child process"))
    monkeypatch.setattr(multiprocessing.util, "spawnv_passfds", refuse("start a child process"))

    real_sleep = asyncio.sleep

    def sleep(delay: float, result: Any = None) -> Coroutine[Any, Any, Any]:
        if delay > 0 and not isinstance(asyncio.get_running_loop(), VirtualTimeLoop):
            attempts.append(f"wait {delay} s with asyncio.sleep")
            raise OutsideTheUnitLayer(f"a unit test may not wait {delay} s: inject a clock instead")
        return real_sleep(delay, result)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    pytest_socket.disable_socket(allow_unix_socket=True)
    try:
        yield attempts
    finally:
        pytest_socket.enable_socket()
    if attempts:
        pytest.fail(f"reached outside the unit layer: {', '.join(sorted(set(attempts)))}")
