"""Where corral's blocking calls run: in threads when corral serves, in the calling thread when it simulates.

The store's queries and the cloud's calls block (SQLAlchemy, openstacksdk), so the engine hands them to an
executor and awaits the result. In production each part gets a thread pool. `corral simulate` drives the same
engine on a virtual-time loop, where a call that ran in another thread would finish at a moment that depends
on the machine, not on the simulation: there every call runs inline, at once, and the same inputs give the
same outcome on any machine.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

Executors = Callable[[int, str], Executor]
"""Makes the executor of one part: `(workers, name) -> Executor`."""


def thread_pool(workers: int, name: str) -> Executor:
    """A pool of `workers` threads named `name-N`: what a serving corral gives each part."""
    return ThreadPoolExecutor(workers, thread_name_prefix=name)


class InlineExecutor(Executor):
    """Runs each call at once in the caller's thread and hands back its finished future."""

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        future: Future[T] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # handed to whoever awaits the call, as a thread pool would
            future.set_exception(exc)
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Nothing runs beside the caller, so nothing is left to wait for."""


async def call_blocking(executor: Executor | None, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """Await `fn(*args, **kwargs)` run by `executor` (None: the loop's default): in its threads, or, inline,
    at once in this one.

    Inline, the call is made directly and the task then yields once, as it would awaiting a thread: no
    future, no wake-up through the loop's self-pipe. (Measured under `corral simulate`: handing the store's
    calls to the loop's `run_in_executor` cost a fifth of the CPU, for nothing in virtual time.)"""
    if isinstance(executor, InlineExecutor):
        result = fn(*args, **kwargs)
        await asyncio.sleep(0)
        return result
    return await asyncio.get_running_loop().run_in_executor(executor, functools.partial(fn, *args, **kwargs))


def inline(workers: int, name: str) -> Executor:
    """An `Executors` for virtual time: every part runs its calls inline (`workers` and `name` unused)."""
    del workers, name
    return InlineExecutor()


__all__ = ["Executors", "InlineExecutor", "call_blocking", "inline", "thread_pool"]
