"""`corral.store.known_runners`: a pool's pass reads in full only the runners that changed since the last one,
and answers exactly what a full read would, whoever made the change."""

from __future__ import annotations

import graphlib
from datetime import UTC, datetime, timedelta

from bench.counting import StatementCounter
from corral.model import Delivery, JobState, JobUpdate, Reason, Runner, RunnerState, Transition
from corral.store import Store, jobs, known_runners, runners
from corral.store.known_runners import KnownRunners
from corral.store.runners import NewRunner, RunnerAndJob

AT = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)


def idle_runners(store: Store, count: int) -> list[Runner]:
    """`count` of pool small's runners, idle, registered at org:octo-org."""
    intents = [NewRunner(pool="small", scope="org:octo-org", labels=("linux",), reason=Reason.WARM)] * count
    made = store.run_blocking(runners.add, "corral", intents, now=AT)
    for target, reason in (
        (RunnerState.CREATING, Reason.CREATE_REQUESTED),
        (RunnerState.BOOTING, Reason.SERVER_CREATED),
        (RunnerState.IDLE, Reason.CAME_ONLINE),
    ):
        moved = store.run_blocking(runners.apply, [Transition(runner, target, reason) for runner in made], now=AT)
        made = [runner for runner in moved if runner is not None]
    return made


def read(store: Store, known: KnownRunners, *, deleting: bool = True) -> tuple[list[RunnerAndJob], int]:
    """The pool's runners through `known`, and the statements that cost."""
    counter = StatementCounter(store.engine)
    with counter.counting():
        found = store.run_blocking(known_runners.live_of_pool, "small", known, deleting=deleting)
    return found, counter.total


def test_a_pass_rereads_only_the_runners_that_moved_took_a_job_or_got_a_note(store: Store) -> None:
    fleet = idle_runners(store, 6)
    known = KnownRunners()
    first, statements = read(store, known)
    assert first == store.run_blocking(runners.live_of_pool, "small")
    assert statements == 2, "their fingerprints, then the six in full"

    again, statements = read(store, known)
    assert statements == 1, "nothing changed: the fingerprints alone"
    assert all(now is before for now, before in zip(again, first, strict=True))

    # Three changes, by three writers: a move (this pass's judge), a job's webhook (any replica's intake),
    # a note (an action that failed).
    store.run_blocking(runners.apply, [Transition(fleet[0], RunnerState.FINISHED, Reason.DEREGISTERED)], now=AT)
    started = AT + timedelta(seconds=30)
    job = JobUpdate(
        7, "octo-org/app", ("linux",), JobState.IN_PROGRESS, "small", runner_name=fleet[1].name, started_at=started
    )
    store.run_blocking(jobs.record, [Delivery(id="d", event="workflow_job", action="in_progress", job=job)], now=AT)
    store.run_blocking(runners.note, fleet[2], Reason.UNKNOWN, "deregistration failed", now=AT)

    third, statements = read(store, known)
    assert third == store.run_blocking(runners.live_of_pool, "small")
    assert statements == 2
    changed = {row.runner.id for row, before in zip(third, first, strict=True) if row is not before}
    assert changed == {fleet[0].id, fleet[1].id, fleet[2].id}
    by_id = {row.runner.id: row for row in third}
    assert by_id[fleet[0].id].runner.state is RunnerState.FINISHED
    assert (by_id[fleet[1].id].job_status, by_id[fleet[1].id].job_started_at) == (JobState.IN_PROGRESS, started)
    assert by_id[fleet[2].id].runner.message == "deregistration failed"


def test_a_read_without_the_runners_being_deleted_keeps_them_for_the_next_full_read(store: Store) -> None:
    warmed, finishing, idle = idle_runners(store, 3)
    [deleting] = store.run_blocking(runners.apply, [Transition(warmed, RunnerState.DELETING, Reason.CLEANUP)], now=AT)
    assert deleting is not None
    known = KnownRunners()
    full, _ = read(store, known)
    full_by_id = {row.runner.id: row for row in full}
    assert full_by_id[deleting.id].runner.state is RunnerState.DELETING

    partial, statements = read(store, known, deleting=False)
    assert {row.runner.id for row in partial} == {finishing.id, idle.id}
    assert statements == 1
    assert set(known.deleting) == {deleting.id}

    # The next full read: the runner being deleted was kept and is not read again; one that moved is; one
    # gone since leaves the answer and the memory.
    store.run_blocking(runners.apply, [Transition(deleting, RunnerState.DELETED, Reason.GONE)], now=AT)
    store.run_blocking(runners.apply, [Transition(finishing, RunnerState.FINISHED, Reason.DEREGISTERED)], now=AT)
    after, statements = read(store, known)
    assert {row.runner.id for row in after} == {finishing.id, idle.id}
    assert statements == 2, "the fingerprints, then the one that finished"
    assert next(row for row in after if row.runner.id == idle.id) is full_by_id[idle.id]
    assert set(known.rows) == {finishing.id, idle.id}, "what left the pool leaves the memory too"
    assert known.deleting == {}


def test_a_runner_being_deleted_kept_through_a_partial_read_is_not_read_again(store: Store) -> None:
    [runner] = idle_runners(store, 1)
    store.run_blocking(runners.apply, [Transition(runner, RunnerState.DELETING, Reason.CLEANUP)], now=AT)
    known = KnownRunners()
    [first], _ = read(store, known)
    assert first.runner.state is RunnerState.DELETING
    assert read(store, known, deleting=False) == ([], 1)
    [again], statements = read(store, known)
    assert (again is first, statements) == (True, 1)


def test_no_runner_state_can_be_entered_twice() -> None:
    """What the fingerprint rests on: it leaves out the columns a move sets, because a runner never enters a
    state twice. A transition back to an earlier state would make this fail before it made a pass wrong."""
    after = {state: {target for target in RunnerState if state.can_become(target)} for state in RunnerState}
    order = list(graphlib.TopologicalSorter(after).static_order())  # raises CycleError on any cycle
    assert set(order) == set(RunnerState)


def test_which_listed_servers_have_live_runners_is_one_statement_however_many_are_listed(store: Store) -> None:
    """After each look the housekeeper asks which listed servers' runners are live (the others are orphans, to
    delete): a deleted runner's and an unknown runner's servers are not, and the answer costs one statement at
    1,200 servers as at three."""
    fleet = idle_runners(store, 1200)
    (deleting,) = store.run_blocking(
        runners.apply, [Transition(fleet[0], RunnerState.DELETING, Reason.CLEANUP)], now=AT
    )
    assert deleting is not None
    store.run_blocking(runners.apply, [Transition(deleting, RunnerState.DELETED, Reason.GONE)], now=AT)
    for listed in ([fleet[0].id, fleet[1].id, "no-such-runner"], [runner.id for runner in fleet] + ["no-such-runner"]):
        counter = StatementCounter(store.engine)
        with counter.counting():
            live = store.run_blocking(runners.live_ids, listed)
        assert live == set(listed) - {fleet[0].id, "no-such-runner"}
        assert counter.total == 1, counter.texts
    assert store.run_blocking(runners.live_ids, []) == set()
