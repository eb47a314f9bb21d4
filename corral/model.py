"""Domain types with no I/O: runner states and their legal transitions, jobs.

The runner state machine is the contract between the store, the engine and the API: every change of
state goes through `RunnerState.check_transition`, so an illegal jump (say `deleted` -> `idle` after a
late webhook) is refused in one place instead of corrupting counts everywhere.
"""

from __future__ import annotations

from enum import StrEnum


class InvalidTransition(ValueError):
    """A runner was asked to move to a state it cannot reach from where it is."""


class RunnerState(StrEnum):
    PENDING = "pending"
    """Row written, nothing asked of the cloud yet: intent recorded before acting."""
    CREATING = "creating"
    """Server create requested."""
    BOOTING = "booting"
    """Server exists; the runner has not registered with GitHub yet."""
    IDLE = "idle"
    """Registered and online, waiting for a job."""
    BUSY = "busy"
    """Running its one job."""
    FINISHED = "finished"
    """Its job is done or its registration is gone: the server is no longer needed."""
    FAILED = "failed"
    """Create error, ERROR server, bootstrap timeout: to be cleaned up, no longer counted as capacity."""
    DELETING = "deleting"
    """Server and registration deletion under way."""
    DELETED = "deleted"
    """Gone on both sides; the row stays as history."""

    def check_transition(self, target: RunnerState) -> None:
        if target not in _TRANSITIONS[self]:
            raise InvalidTransition(f"runner cannot go from {self.value} to {target.value}")

    @property
    def counts_as_capacity(self) -> bool:
        """Whether a runner in this state counts against a pool's `max_runners`."""
        return self in CAPACITY_STATES

    @property
    def is_terminal(self) -> bool:
        return self is RunnerState.DELETED


_TRANSITIONS: dict[RunnerState, frozenset[RunnerState]] = {
    RunnerState.PENDING: frozenset({RunnerState.CREATING, RunnerState.FAILED, RunnerState.DELETING}),
    RunnerState.CREATING: frozenset({RunnerState.BOOTING, RunnerState.FAILED, RunnerState.DELETING}),
    RunnerState.BOOTING: frozenset(
        {RunnerState.IDLE, RunnerState.BUSY, RunnerState.FINISHED, RunnerState.FAILED, RunnerState.DELETING}
    ),
    RunnerState.IDLE: frozenset({RunnerState.BUSY, RunnerState.FINISHED, RunnerState.FAILED, RunnerState.DELETING}),
    RunnerState.BUSY: frozenset({RunnerState.FINISHED, RunnerState.FAILED, RunnerState.DELETING}),
    RunnerState.FINISHED: frozenset({RunnerState.DELETING}),
    RunnerState.FAILED: frozenset({RunnerState.DELETING}),
    RunnerState.DELETING: frozenset({RunnerState.DELETED}),
    RunnerState.DELETED: frozenset(),
}

STARTING_STATES = frozenset({RunnerState.PENDING, RunnerState.CREATING, RunnerState.BOOTING})
CAPACITY_STATES = STARTING_STATES | {RunnerState.IDLE, RunnerState.BUSY}


class JobState(StrEnum):
    QUEUED = "queued"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"

    @property
    def rank(self) -> int:
        """Order of a job's life, so events arriving out of order never move a job backwards."""
        return _JOB_RANK[self]


_JOB_RANK = {JobState.QUEUED: 0, JobState.IN_PROGRESS: 1, JobState.COMPLETED: 2}
