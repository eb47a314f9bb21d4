"""An operator's delete of one runner: done in its pool's worker when the pool is held here, passed on to the
replica holding it otherwise (and that replica's outcome is the answer)."""

from __future__ import annotations

from enum import StrEnum

from corral.engine import messages
from corral.engine.cleaner import Cleaner
from corral.engine.leases import LeaseKeeper
from corral.engine.replicas import ANSWER_WAIT_S, ReplicaBus
from corral.engine.supervisor import Supervisor
from corral.engine.transitions import Mover
from corral.engine.workers import KeyedWorkers, KeyStopped
from corral.model import STARTING_STATES, Reason, Runner, RunnerState
from corral.store import Store, runners
from corral.store.leases import LeaseLost

DELETE_OUTCOME_WAIT_S = 300.0
"""How long a delete passed on waits for its outcome once the holder took it on: the holder's delete waits
for GitHub and the cloud, each call bounded by its own timeout, as a delete on a single corral does."""


class DeleteOutcome(StrEnum):
    """What an operator's delete of one runner did."""

    DELETING = "deleting"
    BUSY = "busy"
    """Refused: it runs a job (drain its pool instead), or an action on it is under way."""
    GONE = "gone"
    MISSING = "missing"
    FORWARDED = "forwarded"
    """Its pool is held by another replica: the request was passed on to it (PostgreSQL NOTIFY), and no
    replica took it on within ANSWER_WAIT_S (when one does, its own outcome is the answer)."""


class DeleteFailed(Exception):
    """The replica holding a runner's pool took an operator's delete on, and its delete raised."""


class RunnerDeletes:
    def __init__(
        self,
        store: Store,
        *,
        leases: LeaseKeeper,
        workers: KeyedWorkers,
        supervisor: Supervisor,
        mover: Mover,
        cleaner: Cleaner,
        bus: ReplicaBus,
    ) -> None:
        self.store = store
        self.leases = leases
        self.workers = workers
        self.supervisor = supervisor
        self.mover = mover
        self.cleaner = cleaner
        self.bus = bus

    async def delete_runner(self, runner_id: str) -> DeleteOutcome:
        """An operator's delete of one runner; refused while it runs a job.

        It acts in the pool's worker, between two passes (`KeyedWorkers.call`), as the engine's own actions
        on a pool do: a pass never judges the runner while the delete moves it, nor the reverse. Raises
        `KeyStopped` when this corral no longer reconciles the pool (it is stopping)."""
        runner = await self.store.run(runners.get, runner_id)
        if runner is None:
            return DeleteOutcome.MISSING
        if runner.state in (RunnerState.DELETING, RunnerState.DELETED):
            return DeleteOutcome.GONE
        if not self.leases.holds(runner.pool):
            return await self._pass_delete_on(runner)
        try:
            outcome, needs_pass = await self.workers.call(runner.pool, lambda: self._delete_held(runner_id))
        except (KeyStopped, LeaseLost):
            if not self.leases.enabled:
                raise
            # The pool moved to another replica while the delete waited for its worker: its new owner acts.
            return await self._pass_delete_on(runner)
        if needs_pass:
            await self.workers.run_now(runner.pool)
        return outcome

    async def _pass_delete_on(self, runner: Runner) -> DeleteOutcome:
        """Ask the replica holding the runner's pool to delete it, and answer with its outcome, however long
        its delete takes (within DELETE_OUTCOME_WAIT_S). FORWARDED only when no replica took it on within
        ANSWER_WAIT_S; raises `DeleteFailed` when the holder's delete raised."""
        key = messages.DELETE + runner.id
        answers = await self.bus.answers.collect(
            key,
            lambda: self.bus.notify({key}),
            timeout_s=ANSWER_WAIT_S + DELETE_OUTCOME_WAIT_S,
            first_within_s=ANSWER_WAIT_S,
            enough=lambda answers: any(answer != messages.ACCEPTED for answer in answers),
        )
        if messages.FAILED in answers:
            raise DeleteFailed(f"the replica holding pool {runner.pool} could not delete the runner; its log says why")
        outcomes = [outcome for outcome in DeleteOutcome if outcome.value in answers]
        return outcomes[0] if outcomes else DeleteOutcome.FORWARDED

    async def _delete_held(self, runner_id: str) -> tuple[DeleteOutcome, bool]:
        """The delete itself, in the pool's worker: the runner is read again, as the pass before may have moved
        it. Also says whether a pass must follow before the delete is under way (a finished runner's)."""
        runner = await self.store.run(runners.get, runner_id)
        if runner is None:
            return DeleteOutcome.MISSING, False
        if runner.state in (RunnerState.DELETING, RunnerState.DELETED):
            return DeleteOutcome.GONE, False
        if runner.state is RunnerState.BUSY or (
            self.supervisor.busy(runner.id) and runner.state not in STARTING_STATES
        ):
            return DeleteOutcome.BUSY, False
        if runner.state in (RunnerState.PENDING, RunnerState.CREATING):
            await self.mover.fail(runner, Reason.OPERATOR, "deleted by an operator while starting")
            self.workers.wake(runner.pool)
            return DeleteOutcome.DELETING, False
        if runner.state in (RunnerState.FINISHED, RunnerState.FAILED):
            return DeleteOutcome.DELETING, True  # the pass (after this action) moves it to deleting
        if await self.cleaner.retire(runner, Reason.OPERATOR, "deleted by an operator"):
            self.workers.wake(runner.pool)  # its place is refilled now, not at the next periodic pass
            return DeleteOutcome.DELETING, False
        return DeleteOutcome.BUSY, False
