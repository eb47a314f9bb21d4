"""What replicas say to each other over PostgreSQL NOTIFY, besides a pool's name (which wakes its owner).

A message is one payload on the wake channel, delivered to every replica (the sender too) when the sending
transaction commits. Requests that want an answer (a delete passed on to a pool's owner, a reload asked of
every replica) carry a key, the answer comes back as its own message with that key, and `Answers` hands it
to the request still waiting; an answer nobody waits for any more is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

DRAIN_CHANGED = "~drained"
"""An operator drained or undrained a pool another replica may hold: every replica reads the status rows again."""
DRAIN_SET = "~drain:"
"""`~drain:<1|0>:<pool>`: an operator drained (1) or undrained (0) the pool. Its holder applies it the moment
the message arrives, so a wake sent after it (a job queued once the operator was answered) finds the pool
drained; `~drained` goes beside it, for replicas of a release that does not know this message."""
LOOK_NOW = "~look"
"""Every replica takes a fresh look at the far ends (an operator's reconcile)."""
DELETE = "~delete:"
"""`~delete:<runner id>`: an operator's delete, passed on to the replica holding the runner's pool."""
DELETED = "~deleted:"
"""`~deleted:<runner id>:<outcome>`: what the holder did with a delete passed on to it. It answers `accepted`
at once, then the outcome when its delete is done (a slow cloud may take longer than the wait for an answer)."""
ACCEPTED = "accepted"
"""The holder took a delete on; its outcome follows."""
FAILED = "failed"
"""The holder's delete raised (its log says why)."""
RELOAD = "~reload:"
"""`~reload:<key>:<sender>`: every other replica reloads its own config file."""
RELOADED = "~reloaded:"
"""`~reloaded:<key>:<replica>:<outcome>`: how a replica's reload went (`reloaded` or `refused`)."""


def drain_message(pool: str, drained: bool) -> str:
    return f"{DRAIN_SET}{int(drained)}:{pool}"


def parse_drain(payload: str) -> tuple[str, bool] | None:
    """The pool and whether it is drained, of a `~drain:` message (None: not one, or malformed)."""
    flag, _, pool = payload.removeprefix(DRAIN_SET).partition(":")
    if not payload.startswith(DRAIN_SET) or flag not in ("0", "1") or not pool:
        return None
    return pool, flag == "1"


class Answers:
    """Answers awaited from other replicas, by key; several requests may wait on one key."""

    def __init__(self) -> None:
        self._waiting: dict[str, list[asyncio.Queue[str]]] = {}

    async def collect(
        self,
        key: str,
        send: Callable[[], None],
        *,
        timeout_s: float,
        enough: Callable[[list[str]], bool],
        first_within_s: float | None = None,
    ) -> list[str]:
        """Send a request, then gather the answers for `key` until `enough(answers)` or `timeout_s` passes;
        with `first_within_s`, stop sooner if no answer at all comes within it (nobody took the request on).

        The waiter is registered before `send`, so an answer cannot arrive before anybody listens for it."""
        queue: asyncio.Queue[str] = asyncio.Queue()
        self._waiting.setdefault(key, []).append(queue)
        answers: list[str] = []
        try:
            send()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    if first_within_s is not None:
                        async with asyncio.timeout(first_within_s):
                            answers.append(await queue.get())
                    while not enough(answers):
                        answers.append(await queue.get())
        finally:
            waiting = self._waiting.get(key, [])
            waiting.remove(queue)
            if not waiting:
                self._waiting.pop(key, None)
        return answers

    def answer(self, key: str, value: str) -> None:
        for queue in self._waiting.get(key, []):
            queue.put_nowait(value)
