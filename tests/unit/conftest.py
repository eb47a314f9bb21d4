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
import contextlib
import multiprocessing.util
import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_socket

from corral.executors import inline
from corral.store import IN_MEMORY, Store
from tests.unit.virtual_time import is_virtual

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
    """Block sockets, child processes and real waits for one test; fail it afterwards if it tried any.

    Only the test's own threads are held to it (its own, and those it starts): threads already running when it
    began are left alone. In a whole-suite run a worker process may hold the session's sandbox, whose server
    threads sleep and accept connections in the background while a unit test runs."""
    attempts: list[str] = []
    others = {thread.ident for thread in threading.enumerate()} - {threading.get_ident()}

    def refuse(what: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def refused(*args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() in others:
                return real(*args, **kwargs)
            attempts.append(what)
            raise OutsideTheUnitLayer(f"a unit test may not {what}: inject a clock or a fake instead")

        return refused

    monkeypatch.setattr(time, "sleep", refuse("call time.sleep", time.sleep))
    child = "start a child process"
    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse(child, subprocess.Popen._execute_child))  # type: ignore[attr-defined]
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
        monkeypatch.setattr(os, name, refuse(child, getattr(os, name)))
    monkeypatch.setattr(multiprocessing.util, "spawnv_passfds", refuse(child, multiprocessing.util.spawnv_passfds))

    real_sleep = asyncio.sleep

    def sleep(delay: float, result: Any = None) -> Coroutine[Any, Any, Any]:
        if delay > 0 and not is_virtual(asyncio.get_running_loop()) and threading.get_ident() not in others:
            attempts.append(f"wait {delay} s with asyncio.sleep")
            raise OutsideTheUnitLayer(f"a unit test may not wait {delay} s: inject a clock instead")
        return real_sleep(delay, result)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    with _sockets_refused(others, attempts):
        yield attempts
    if attempts:
        pytest.fail(f"reached outside the unit layer: {', '.join(sorted(set(attempts)))}")


@contextlib.contextmanager
def _sockets_refused(others: set[int | None], attempts: list[str]) -> Iterator[None]:
    """pytest-socket's guard (AF_UNIX allowed), for the test's own threads only; each refusal is recorded."""
    real = socket.socket, socket.getaddrinfo, socket.gethostbyname
    pytest_socket.disable_socket(allow_unix_socket=True)
    guarded_socket, guarded_getaddrinfo, guarded_gethostbyname = socket.socket, socket.getaddrinfo, socket.gethostbyname

    class OwnThreadsSocket(guarded_socket):  # type: ignore[valid-type,misc]
        def __new__(cls, family: int = -1, type: int = -1, proto: int = -1, fileno: int | None = None) -> Any:
            if threading.get_ident() in others:
                return real[0].__new__(cls, family, type, proto, fileno)  # type: ignore[call-arg]
            try:
                return super().__new__(cls, family, type, proto, fileno)
            except pytest_socket.SocketBlockedError:
                attempts.append("open a socket")
                raise

    def choose(real_call: Callable[..., Any], guarded: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() in others:
                return real_call(*args, **kwargs)
            attempts.append("resolve a host name")
            return guarded(*args, **kwargs)

        return call

    socket.socket = OwnThreadsSocket  # type: ignore[misc]
    socket.getaddrinfo = choose(real[1], guarded_getaddrinfo)
    socket.gethostbyname = choose(real[2], guarded_gethostbyname)
    try:
        yield
    finally:
        socket.socket, socket.getaddrinfo, socket.gethostbyname = real  # type: ignore[misc]


@pytest.fixture
def store() -> Iterator[Store]:
    """A migrated SQLite store in memory, its statements run inline (no thread): the store of a unit test (a
    module that needs a file of its own defines its own `store`)."""
    store = Store(IN_MEMORY, executors=inline)
    store.migrate()
    yield store
    store.close()
