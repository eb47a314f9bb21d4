"""The replica bus: messages between replicas on one PostgreSQL database (`NOTIFY corral_wake`).

What arrives (`engine/messages.py`): a pool's name (wake its worker, if held here), a drain changed (read the
status rows again), a look asked for, a delete passed on by another replica's operator (done here if the pool
is held here, answered with its outcome), a reload asked for (this replica re-reads its own file and answers).
What leaves: wakes for pools other replicas hold, and those requests and answers. On SQLite nothing is sent.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable
from datetime import timedelta

from corral.engine import messages
from corral.engine.leases import LeaseKeeper
from corral.engine.membership import Membership
from corral.engine.messages import Answers
from corral.engine.observe import Observer
from corral.engine.running import Running
from corral.engine.supervisor import ActionKind, Supervisor
from corral.engine.workers import KeyedWorkers
from corral.store import Store, leases, runners

logger = logging.getLogger("corral.engine")

ANSWER_WAIT_S = 5.0
"""How long a request passed on to other replicas (a delete, a reload) waits for their answers (a delete: for
its holder to take it on)."""


class ReplicaBus:
    def __init__(
        self,
        running: Running,
        store: Store,
        *,
        leases: LeaseKeeper,
        workers: KeyedWorkers,
        observer: Observer,
        supervisor: Supervisor,
        membership: Membership,
        delete_here: Callable[[str], Awaitable[str]],
        reload_config: Callable[[], Awaitable[list[str]]] | None,
    ) -> None:
        self.running = running
        self.store = store
        self.leases = leases
        self.workers = workers
        self.observer = observer
        self.supervisor = supervisor
        self.membership = membership
        self.delete_here = delete_here
        """An operator's delete of a runner of a pool held here (`RunnerDeletes.delete_runner`): its outcome."""
        self.reload_config = reload_config
        """Re-reads this replica's config file (the service's reload): what another replica's reload asks for."""
        self.answers = Answers()
        """Requests this replica sent, waiting for the other replicas' answers."""
        self._notices = 0

    def notify(self, payloads: set[str]) -> None:
        """Wake these pools' owners on other replicas (or send another message); one transaction, at once."""
        self._notices += 1
        self.supervisor.start(
            ActionKind.LEASES, f"notify:{self._notices}", self.store.run(leases.notify_wake, payloads)
        )

    def received(self, payload: str) -> None:
        """A message from another replica (PostgreSQL NOTIFY, `engine.messages`): mostly a pool's name."""
        if not payload.startswith("~"):
            if self.leases.holds(payload):
                self.workers.wake(payload)
        elif (drain := messages.parse_drain(payload)) is not None:
            pool, drained = drain
            self.running.set_drained(pool, drained)
            if self.leases.holds(pool):
                self.workers.wake(pool)
        elif payload == messages.DRAIN_CHANGED:
            self.supervisor.start(ActionKind.LEASES, "drain-changed", self.membership.read_pool_statuses())
        elif payload == messages.LOOK_NOW:
            self.observer.refresh()
        elif payload.startswith(messages.DELETE):
            runner_id = payload.removeprefix(messages.DELETE)
            self.supervisor.start(ActionKind.LEASES, payload, self._forwarded_delete(runner_id))
        elif payload.startswith(messages.DELETED):
            runner_id, _, outcome = payload.removeprefix(messages.DELETED).partition(":")
            self.answers.answer(messages.DELETE + runner_id, outcome)
        elif payload.startswith(messages.RELOAD):
            key, _, sender = payload.removeprefix(messages.RELOAD).partition(":")
            if sender != self.leases.replica:
                self.supervisor.start(ActionKind.LEASES, payload, self._reload_asked(key))
        elif payload.startswith(messages.RELOADED):
            key, _, answer = payload.removeprefix(messages.RELOADED).partition(":")
            self.answers.answer(messages.RELOAD + key, answer)

    async def _forwarded_delete(self, runner_id: str) -> None:
        """Another replica's operator deleted a runner of a pool held here: say at once that it is taken on,
        then answer with what the delete did, or that it failed (the exception goes on to the supervisor)."""
        runner = await self.store.run(runners.get, runner_id)
        if runner is None or not self.leases.holds(runner.pool):
            return
        answer = f"{messages.DELETED}{runner_id}:"
        self.notify({answer + messages.ACCEPTED})
        try:
            outcome = await self.delete_here(runner_id)
        except Exception:
            self.notify({answer + messages.FAILED})
            raise
        logger.info("runner %s: delete passed on by another replica: %s", runner.name, outcome)
        self.notify({answer + outcome})

    async def _reload_asked(self, key: str) -> None:
        """Another replica's operator asked for a reload: re-read this replica's own file and say how it went."""
        problems = await self.reload_config() if self.reload_config else ["no config file to reload"]
        outcome = "refused" if problems else "reloaded"
        self.notify({f"{messages.RELOADED}{key}:{self.leases.replica}:{outcome}"})

    async def ask_replicas_to_reload(self) -> dict[str, str]:
        """Ask every other live replica to reload its own config file: replica -> `reloaded`, `refused` (its
        log says why) or `no answer` (within ANSWER_WAIT_S). Nothing to ask on SQLite."""
        if not self.leases.enabled:
            return {}
        live = await self.store.run(leases.replicas, timedelta(seconds=self.running.config.lease_time))
        others = {row.id for row in live} - {self.leases.replica}
        if not others:
            return {}
        key = secrets.token_hex(6)
        answers = await self.answers.collect(
            messages.RELOAD + key,
            lambda: self.notify({f"{messages.RELOAD}{key}:{self.leases.replica}"}),
            timeout_s=ANSWER_WAIT_S,
            enough=lambda answers: len(answers) >= len(others),
        )
        told = dict(answer.rsplit(":", 1) for answer in answers if ":" in answer)
        return {replica: told.get(replica, "no answer") for replica in sorted(others)}
