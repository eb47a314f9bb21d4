"""The store on SQLite and on the real PostgreSQL: runner transitions, job merging, group intake, pruning."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import Connection

from corral.clock import utcnow
from corral.cloud.provider import DEFAULT_CLOUD
from corral.cloud.quota import Headroom, ServerCost
from corral.engine.backoff import LogOnce
from corral.engine.pauses import PoolPauses
from corral.engine.quota import SharedRoom
from corral.model import (
    Delivery,
    DeliveryOutcome,
    IntakeResult,
    InvalidTransition,
    JobState,
    JobUpdate,
    Reason,
    Runner,
    RunnerState,
    Transition,
)
from corral.store import (
    BlockingCallOnEventLoop,
    Intake,
    Store,
    cache_volumes,
    jobs,
    leases,
    pools,
    quota,
    redeliveries,
    reruns,
    retention,
    runners,
)
from corral.store.runners import NewRunner
from tests.store_urls import POSTGRES_ADMIN_URL, postgres_store_heard, postgres_url


def add(store: Store, pool: str = "small", job_id: int | None = None) -> Runner:
    intent = NewRunner(pool=pool, scope="org:octo", labels=(pool,), reason=Reason.WARM, job_id=job_id)
    return store.run_blocking(runners.add, "corral", [intent], now=utcnow())[0]


def move(store: Store, runner: Runner, target: RunnerState, reason: Reason, **fields: object) -> Runner | None:
    return store.run_blocking(runners.apply, [Transition(runner, target, reason, **fields)], now=utcnow())[0]  # type: ignore[arg-type]


def queued(job_id: int, status: JobState = JobState.QUEUED, **extra: object) -> JobUpdate:
    return JobUpdate(job_id, "octo/app", ("small",), status, "small", **extra)  # type: ignore[arg-type]


def delivery(delivery_id: str | None, job: JobUpdate) -> Delivery:
    return Delivery(id=delivery_id, event="workflow_job", action=job.status.value, job=job)


def test_migrate_is_idempotent(store: Store) -> None:
    store.migrate()
    assert store.run_blocking(runners.listing) == []


def test_a_runner_is_written_pending_and_its_transitions_are_logged(store: Store) -> None:
    runner = add(store)
    assert runner.state is RunnerState.PENDING and runner.name == f"corral-small-{runner.id}"
    creating = move(store, runner, RunnerState.CREATING, Reason.CREATE_REQUESTED, github_runner_id=42)
    assert creating is not None and creating.github_runner_id == 42
    booting = move(store, creating, RunnerState.BOOTING, Reason.SERVER_CREATED, server_id="srv-1")
    assert booting is not None and (booting.server_id, booting.state) == ("srv-1", RunnerState.BOOTING)
    assert booting.state_changed_at >= booting.created_at and booting.created_at.tzinfo is not None
    history = [(e.from_state, e.to_state, e.reason) for e in store.run_blocking(runners.events, runner.id)]
    assert history == [
        (None, RunnerState.PENDING, Reason.WARM),
        (RunnerState.PENDING, RunnerState.CREATING, Reason.CREATE_REQUESTED),
        (RunnerState.CREATING, RunnerState.BOOTING, Reason.SERVER_CREATED),
    ]


def test_a_failure_keeps_its_reason_and_message_on_the_runner(store: Store) -> None:
    runner = add(store)
    failed = move(store, runner, RunnerState.FAILED, Reason.CLOUD_QUOTA, message="quota exceeded for instances")
    assert failed is not None and (failed.reason, failed.message) == (
        Reason.CLOUD_QUOTA,
        "quota exceeded for instances",
    )
    failures = store.run_blocking(runners.recent_failures)
    assert [(event.reason, event.message, found.id) for event, found in failures] == [
        (Reason.CLOUD_QUOTA, "quota exceeded for instances", runner.id)
    ]


def test_illegal_and_stale_transitions_change_nothing(store: Store) -> None:
    runner = add(store)
    with pytest.raises(InvalidTransition):
        Transition(runner, RunnerState.IDLE, Reason.CAME_ONLINE)
    assert move(store, runner, RunnerState.CREATING, Reason.CREATE_REQUESTED) is not None
    assert move(store, runner, RunnerState.CREATING, Reason.CREATE_REQUESTED) is None, "read as pending: stale now"
    current = store.run_blocking(runners.get, runner.id)
    assert current is not None and current.state is RunnerState.CREATING
    assert len(store.run_blocking(runners.events, runner.id)) == 2


def test_only_one_of_two_racing_transitions_wins(store: Store) -> None:
    runner = add(store)
    outcomes: list[bool] = []
    barrier = threading.Barrier(2)

    def attempt() -> None:
        barrier.wait()
        outcomes.append(move(store, runner, RunnerState.CREATING, Reason.CREATE_REQUESTED) is not None)

    threads = [threading.Thread(target=attempt) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == [False, True]
    assert [e.to_state for e in store.run_blocking(runners.events, runner.id)] == [
        RunnerState.PENDING,
        RunnerState.CREATING,
    ]


def test_runners_filter_by_pool_and_state(store: Store) -> None:
    small = add(store, "small")
    add(store, "big")
    move(store, small, RunnerState.FAILED, Reason.CLOUD_UNAVAILABLE, message="503")
    assert [r.pool for r in store.run_blocking(runners.listing, states=[RunnerState.PENDING])] == ["big"]
    assert [r.id for r in store.run_blocking(runners.listing, pool="small")] == [small.id]
    assert store.run_blocking(runners.live_pools) == {"small", "big"}


def test_a_pools_runners_come_with_the_job_a_webhook_said_they_took(store: Store) -> None:
    runner = add(store, job_id=5)
    taken = queued(6, JobState.IN_PROGRESS, runner_name=runner.name)
    store.run_blocking(jobs.record, [delivery("d5", queued(5)), delivery("d6", taken)], now=utcnow())
    [row] = store.run_blocking(runners.live_of_pool, "small")
    assert (row.runner.id, row.job_id, row.job_status, row.job_had_runner) == (
        runner.id,
        6,
        JobState.IN_PROGRESS,
        False,
    )


def test_a_runner_that_took_another_job_is_counted_on_its_own(store: Store) -> None:
    store.run_blocking(jobs.record, [delivery("d1", queued(1))], now=utcnow())
    runner = add(store, job_id=1)
    booting = move(store, runner, RunnerState.CREATING, Reason.CREATE_REQUESTED)
    assert booting is not None
    busy = move(store, booting, RunnerState.BOOTING, Reason.SERVER_CREATED)
    assert busy is not None
    move(store, busy, RunnerState.BUSY, Reason.TOOK_JOB, diverted_job=1, presumed_taken=True)
    [job] = store.run_blocking(jobs.queued_of_pool, "small")
    assert job.runners_diverted == 1 and job.diverted_at is not None and job.maybe_taken_at is not None
    found = store.run_blocking(jobs.get, 1)
    assert found is not None and found.runners_started == 1


def lost_with_its_server(store: Store, job_id: int, attempt: int) -> None:
    """A job a busy runner was running when its server went to ERROR, as the judge records it."""
    taken = queued(job_id, JobState.IN_PROGRESS, run_id=77, name="build", run_attempt=attempt)
    runner = add(store, job_id=job_id)
    store.run_blocking(jobs.record, [delivery(f"lost-{job_id}", taken)], now=utcnow())
    for target, reason in [
        (RunnerState.CREATING, Reason.CREATE_REQUESTED),
        (RunnerState.BOOTING, Reason.SERVER_CREATED),
        (RunnerState.BUSY, Reason.TOOK_JOB),
    ]:
        moved = move(store, runner, target, reason)
        assert moved is not None
        runner = moved
    failed = move(
        store, runner, RunnerState.FAILED, Reason.SERVER_ERROR, message="server in ERROR: host failed", lost_job=job_id
    )
    assert failed is not None


def test_a_cache_volume_is_handed_to_one_runner_at_a_time_and_a_pool_never_makes_more_than_its_max(
    store: Store,
) -> None:
    now = utcnow()
    first = store.run_blocking(cache_volumes.reserve_new, "small", "one", "runner-a", size_gb=5, most=2, now=now)
    second = store.run_blocking(cache_volumes.reserve_new, "small", "one", "runner-b", size_gb=5, most=2, now=now)
    assert first is not None and second is not None and first.name.startswith("corral-cache-small-")
    assert store.run_blocking(cache_volumes.reserve_new, "small", "one", "runner-c", size_gb=5, most=2, now=now) is None
    assert store.run_blocking(cache_volumes.take, "small", "one", "runner-c", now=now) is None  # both held
    store.run_blocking(cache_volumes.created, first.id, "vol-1", now=now)
    store.run_blocking(cache_volumes.created, second.id, "vol-2", now=now)
    # Freed only by the holder read with it: a volume handed on meanwhile stays with its new runner.
    assert store.run_blocking(cache_volumes.free, first.id, "runner-b", now=now) is False
    assert store.run_blocking(cache_volumes.free, first.id, "runner-a", now=now) is True
    taken = store.run_blocking(cache_volumes.take, "small", "one", "runner-c", now=now)
    assert taken is not None and (taken.volume_id, taken.runner, taken.uses) == ("vol-1", "runner-c", 2)
    assert store.run_blocking(cache_volumes.take, "small", "one", "runner-d", now=now) is None
    assert store.run_blocking(cache_volumes.take, "small", "two", "runner-d", now=now) is None  # another cloud's
    assert store.run_blocking(cache_volumes.counts) == {"small": {"held": 2}}


def test_a_lost_jobs_rerun_is_claimed_once_whoever_asks_and_counted_across_its_attempts(store: Store) -> None:
    lost_with_its_server(store, 1, attempt=1)
    [job] = store.run_blocking(reruns.undecided, limit=10)
    assert (job.id, job.name, job.run_attempt, job.rerun) == (1, "build", 1, None)
    assert job.lost_reason is not None and "host failed" in job.lost_reason
    # Two replicas (or a corral and its restart) decide at once: one claim wins.
    assert store.run_blocking(reruns.claim, 1, now=utcnow()) is True
    assert store.run_blocking(reruns.claim, 1, now=utcnow()) is False
    assert store.run_blocking(reruns.undecided, limit=10) == []
    store.run_blocking(reruns.release, 1)  # GitHub said "not yet": asked again later
    assert store.run_blocking(reruns.claim, 1, now=utcnow()) is True
    store.run_blocking(reruns.decide, 1, reruns.REQUESTED)
    # Its second attempt, lost too: the first attempt's re-run counts against the limit.
    lost_with_its_server(store, 2, attempt=2)
    [again] = store.run_blocking(reruns.undecided, limit=10)
    assert again.id == 2 and store.run_blocking(reruns.reruns_of, again) == 1


def test_a_job_its_ended_runner_left_in_progress_is_due_at_once_and_after_each_move_of_that_runner(
    store: Store,
) -> None:
    """Issue 25, item 16: the job tracker asks GitHub about such a job in the pass after the runner ended,
    whatever `stale_job_check` says, and again after the runner's next moves (GitHub may lag a moment)."""
    runner = add(store)
    creating = move(store, runner, RunnerState.CREATING, Reason.CREATE_REQUESTED)
    assert creating is not None
    booting = move(store, creating, RunnerState.BOOTING, Reason.SERVER_CREATED)
    assert booting is not None
    busy = move(store, booting, RunnerState.BUSY, Reason.TOOK_JOB)
    assert busy is not None
    store.run_blocking(
        jobs.record, [delivery("p", queued(5, JobState.IN_PROGRESS, runner_name=runner.name))], now=utcnow()
    )
    long_ago = utcnow() - timedelta(hours=1)  # nothing is stale

    def due() -> list[int]:
        found = store.run_blocking(
            jobs.unfinished_without_runner, started_before=long_ago, checked_before=long_ago, limit=10
        )
        return [job.id for job in found]

    assert due() == [], "its runner is still busy"
    finished = move(store, busy, RunnerState.FINISHED, Reason.DEREGISTERED)
    assert finished is not None
    assert due() == [5], "its runner ended"
    store.run_blocking(jobs.checked, 5, status=JobState.IN_PROGRESS, conclusion=None, now=utcnow())
    assert due() == [], "GitHub was asked since"
    move(store, finished, RunnerState.DELETING, Reason.CLEANUP)
    assert due() == [5], "due again once the runner moved on"
    store.run_blocking(jobs.checked, 5, status=JobState.COMPLETED, conclusion="success", now=utcnow())
    assert due() == []


def test_a_redelivered_webhook_is_recognised_and_changes_nothing(store: Store) -> None:
    first = store.run_blocking(jobs.record, [delivery("d1", queued(1))], now=utcnow())
    again = store.run_blocking(jobs.record, [delivery("d1", queued(1, JobState.COMPLETED))], now=utcnow())
    assert (first.outcomes, again.outcomes) == ((DeliveryOutcome.RECORDED,), (DeliveryOutcome.DUPLICATE,))
    job = store.run_blocking(jobs.get, 1)
    assert job is not None and job.status is JobState.QUEUED


def test_one_group_with_repeats_and_out_of_order_events(store: Store) -> None:
    group = [
        delivery("c", queued(7, JobState.COMPLETED, conclusion="success")),
        delivery("q", queued(7)),
        delivery("q", queued(7)),
        delivery("p", queued(8, JobState.IN_PROGRESS, runner_name="r1")),
        delivery("q8", queued(8)),
    ]
    result = store.run_blocking(jobs.record, group, now=utcnow())
    assert result.outcomes == (
        DeliveryOutcome.RECORDED,
        DeliveryOutcome.RECORDED,
        DeliveryOutcome.DUPLICATE,
        DeliveryOutcome.RECORDED,
        DeliveryOutcome.RECORDED,
    )
    assert (result.demand, result.news) == (frozenset(), frozenset({"small"})), "news of jobs taken, none queued"
    seven, eight = store.run_blocking(jobs.get, 7), store.run_blocking(jobs.get, 8)
    assert seven is not None and (seven.status, seven.conclusion) == (JobState.COMPLETED, "success")
    assert eight is not None and (eight.status, eight.runner_name) == (JobState.IN_PROGRESS, "r1")


def test_jobs_never_move_backwards_across_groups(store: Store) -> None:
    store.run_blocking(jobs.record, [delivery("c", queued(7, JobState.COMPLETED, conclusion="success"))], now=utcnow())
    store.run_blocking(jobs.record, [delivery("q", queued(7))], now=utcnow())
    job = store.run_blocking(jobs.get, 7)
    assert job is not None and (job.status, job.conclusion) == (JobState.COMPLETED, "success")
    store.run_blocking(jobs.checked, 7, status=JobState.QUEUED, conclusion=None, now=utcnow())
    job = store.run_blocking(jobs.get, 7)
    assert job is not None and job.status is JobState.COMPLETED and job.checked_at is not None


def test_concurrent_webhooks_are_committed_in_groups_each_answered_after_its_commit(store: Store) -> None:
    woken: list[IntakeResult] = []

    async def deliver_many() -> list[DeliveryOutcome]:
        intake = Intake(store, woken.append)
        updates = [delivery(f"d{n}", queued(n)) for n in range(200)] + [delivery("d0", queued(0))]
        return await asyncio.gather(*(intake.record(update) for update in updates))

    outcomes = asyncio.run(deliver_many())
    assert outcomes.count(DeliveryOutcome.RECORDED) == 200 and outcomes[-1] is DeliveryOutcome.DUPLICATE
    assert len(store.run_blocking(jobs.queued_of_pool, "small")) == 200
    assert 1 <= len(woken) < 200, "deliveries arriving together share a transaction"


def test_a_blocking_call_on_the_event_loop_is_refused(store: Store) -> None:
    async def on_the_loop() -> None:
        store.run_blocking(runners.listing)

    with pytest.raises(BlockingCallOnEventLoop):
        asyncio.run(on_the_loop())


def test_history_older_than_retention_is_pruned_in_batches(store: Store) -> None:
    runner = add(store)
    failed = move(store, runner, RunnerState.FAILED, Reason.CLOUD_UNAVAILABLE, message="503")
    assert failed is not None
    deleting = move(store, failed, RunnerState.DELETING, Reason.CLEANUP)
    assert deleting is not None
    move(store, deleting, RunnerState.DELETED, Reason.GONE)
    live = add(store)
    store.run_blocking(jobs.record, [delivery(f"d{n}", queued(n)) for n in range(5)], now=utcnow())
    nothing = store.run_blocking(retention.prune_batch, older_than=utcnow() - timedelta(days=1), batch=2)
    assert nothing == 0, "nothing is older than a day"
    later = utcnow() + timedelta(seconds=1)
    assert store.run_blocking(retention.prune_batch, older_than=later, batch=2) == 1 + 2 + 2
    assert store.run_blocking(retention.prune_batch, older_than=later, batch=2) == 2 + 2
    assert store.run_blocking(retention.prune_batch, older_than=later, batch=2) == 1 + 1
    assert store.run_blocking(retention.prune_batch, older_than=later, batch=2) == 0
    assert [r.id for r in store.run_blocking(runners.listing)] == [live.id], "live runners are never pruned"
    assert store.run_blocking(runners.events, runner.id) == []


def test_an_old_holder_closing_its_session_late_leaves_the_new_holders_session_shown(store: Store) -> None:
    """A scale-set pool moved: its new holder opened a session before the old one had recorded closing its
    own. The late close must not make every replica show the pool's session as closed."""
    store.run_blocking(pools.set_scale_set, "scaled", 7, "old-session", now=utcnow())
    store.run_blocking(pools.set_scale_set, "scaled", 7, "new-session", now=utcnow())
    store.run_blocking(pools.release_session, "scaled", "old-session", now=utcnow())
    assert store.run_blocking(pools.statuses)["scaled"].scale_set_session == "new-session"
    store.run_blocking(pools.release_session, "scaled", "new-session", now=utcnow())
    assert store.run_blocking(pools.statuses)["scaled"].scale_set_session is None


def test_a_reading_counts_other_replicas_servers_made_before_it_and_no_others(store: Store) -> None:
    """What a replica's quota reading may not count of another replica's pool: creates under way, and servers
    made after the reading began; a server made before it, or already deleted, it counts right."""
    before = add(store, "other")
    creating = move(store, before, RunnerState.CREATING, Reason.CREATE_REQUESTED)
    assert creating is not None
    assert move(store, creating, RunnerState.BOOTING, Reason.SERVER_CREATED, server_id="s0") is not None
    reading_began = utcnow()
    in_flight = add(store, "other")
    made_since = move(store, add(store, "other"), RunnerState.CREATING, Reason.CREATE_REQUESTED)
    assert made_since is not None
    assert move(store, made_since, RunnerState.BOOTING, Reason.SERVER_CREATED, server_id="s1") is not None
    deleted: Runner | None = add(store, "other")
    for target, reason in [
        (RunnerState.CREATING, Reason.CREATE_REQUESTED),
        (RunnerState.BOOTING, Reason.SERVER_CREATED),
        (RunnerState.FAILED, Reason.SERVER_ERROR),
        (RunnerState.DELETING, Reason.CLEANUP),
        (RunnerState.DELETED, Reason.CLEANUP),
    ]:
        assert deleted is not None
        deleted = move(store, deleted, target, reason)
    assert deleted is not None and deleted.state is RunnerState.DELETED
    add(store, "mine")
    assert in_flight.state is RunnerState.PENDING
    assert store.run_blocking(quota.made_since, ["other"], reading_began, DEFAULT_CLOUD, True) == {"other": 2}
    assert store.run_blocking(quota.made_since, [], reading_began, DEFAULT_CLOUD, True) == {}
    # A replica's own creates are in its headroom already: left out, whichever pool they are for (a pool it took
    # over may have the former holder's creates under way, which it must count).
    mine = store.run_blocking(quota.made_since, ["other"], reading_began, DEFAULT_CLOUD, True, excluding=[in_flight.id])
    assert mine == {"other": 1}
    store.run_blocking(
        pools.set_quota, "other", server_cost={"cores": 2, "ram_mb": 2048}, waiting=0, waiting_at=utcnow(), now=utcnow()
    )
    store.run_blocking(
        pools.publish, "never-checked", generation=1, ready=False, reason=None, removed=False, now=utcnow()
    )
    assert store.run_blocking(quota.server_costs, ["other", "never-checked"]) == {"other": {"cores": 2, "ram_mb": 2048}}
    store.run_blocking(
        pools.set_quota, "other", server_cost=None, waiting=3, waiting_at=utcnow(), waiting_cloud="west", now=utcnow()
    )
    other = store.run_blocking(pools.statuses)["other"]
    assert (other.quota_waiting, other.quota_waiting_cloud) == (3, "west"), "a wait says whose quota it waits for"


def test_another_replicas_runners_count_against_the_quota_before_their_cost_is_known(store: Store) -> None:
    """Another replica wrote two runners of its pool, whose server cost no status row shows yet: each still
    takes an instance of the room this replica's add sees, and once the cost is written, its cores too."""
    reading_began = utcnow() - timedelta(seconds=1)
    add(store, "other")
    add(store, "other")
    server = ServerCost(cores=2, ram_mb=2048)

    def room_for(count: int) -> int:
        room = SharedRoom(
            Headroom(instances=3, cores=10), server, ["other"], reading_began, cloud=DEFAULT_CLOUD, or_unrecorded=True
        )
        return store.run_blocking(room, count)

    assert room_for(3) == 1, "of three instances left, the other replica's two runners take two"
    store.run_blocking(pools.set_server_cost, "other", {"cores": 4, "ram_mb": 1024}, now=utcnow())
    assert room_for(3) == 1, "with their cost known: 8 of the 10 cores taken leave room for one 2-core server"
    store.run_blocking(pools.set_server_cost, "other", {"cores": 5, "ram_mb": 1024}, now=utcnow())
    assert room_for(3) == 0, "and their 10 cores leave none"


def test_pool_status_round_trip(store: Store) -> None:
    store.run_blocking(
        pools.publish, "small", generation=3, ready=False, reason="image 'x' not found", removed=False, now=utcnow()
    )
    store.run_blocking(pools.publish, "small", generation=4, ready=True, reason=None, removed=False, now=utcnow())
    store.run_blocking(pools.set_drained, "small", True, now=utcnow())
    status = store.run_blocking(pools.statuses)["small"]
    assert (status.applied_generation, status.ready, status.reason, status.drained) == (4, True, None, True)


def test_a_connection_the_server_ended_is_replaced_without_losing_the_call(tmp_path: Path) -> None:
    with postgres_url() as url:
        store = Store(url)
        try:
            store.migrate()
            add(store)
            database = url.rsplit("/", 1)[1]
            with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
                ended = admin.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = %s", (database,)
                ).fetchone()
            assert ended is not None and ended[0] >= 1, "corral's connection was there to end"
            assert len(store.run_blocking(runners.listing)) == 1
            add(store)
            assert len(store.run_blocking(runners.listing)) == 2
        finally:
            store.close()


def test_runners_are_added_only_up_to_max_runners_counting_those_that_hold_capacity(store: Store) -> None:
    first, _ = add(store), add(store)
    move(store, first, RunnerState.FAILED, Reason.CLOUD_REJECTED)
    add(store, pool="other")
    intents = [NewRunner(pool="small", scope="org:octo", labels=("small",), reason=Reason.WARM) for _ in range(3)]
    added = store.run_blocking(runners.add, "corral", intents, max_runners=3, now=utcnow())
    assert len(added) == 2, "one runner holds capacity (the failed one and the other pool's do not): room for two"
    assert store.run_blocking(runners.add, "corral", intents, max_runners=3, now=utcnow()) == []


def test_writers_racing_on_postgresql_never_fill_a_pool_past_max_runners() -> None:
    """Two replicas in a split-brain moment each read the pool before the other wrote: the database, not
    the readers, has the last word on capacity."""
    max_runners, writers = 5, 4
    with postgres_url() as url:
        stores = [Store(url) for _ in range(writers)]
        stores[0].migrate()
        start = threading.Barrier(writers)
        added: list[int] = []

        def write(store: Store) -> None:
            intents = [NewRunner(pool="small", scope="org:octo", labels=("small",), reason=Reason.WARM)] * 3
            start.wait()
            added.append(len(store.run_blocking(runners.add, "corral", intents, max_runners=max_runners, now=utcnow())))

        threads = [threading.Thread(target=write, args=(store,)) for store in stores]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        live = stores[0].run_blocking(runners.live_of_pool, "small")
        for store in stores:
            store.close()
    assert sum(added) == max_runners == len(live), added


def test_a_replica_frozen_in_a_transaction_holds_its_row_locks_only_until_the_server_ends_its_session() -> None:
    """A replica frozen (SIGSTOP, a VM migrated) between two statements of a transaction holds the row locks
    it took. The replica that takes its pool over must be able to write the pool's rows: PostgreSQL ends the
    frozen session after `idle_in_transaction_s` (here 1 s), and the write goes through then, not when the
    frozen one wakes. Woken, the frozen replica's transaction runs again on a new connection."""
    with postgres_url() as url:
        frozen, successor = Store(url, idle_in_transaction_s=1.0), Store(url)
        # Set up through the store with no idle timeout: on two busy cores (CI) the migration's own transaction
        # once sat idle between two statements for over a second, and the server ended it.
        successor.migrate()
        successor.run_blocking(pools.set_drained, "small", False, now=utcnow())
        locked, wake = threading.Event(), threading.Event()
        attempts: list[int] = []

        def drain_then_freeze(connection: Connection) -> None:
            attempts.append(1)
            pools.set_drained(connection, "small", True, now=utcnow())  # the row is locked from here
            locked.set()
            wake.wait(timeout=60)

        sleeper = threading.Thread(target=frozen.run_blocking, args=(drain_then_freeze,))
        sleeper.start()
        assert locked.wait(timeout=30)
        writer = threading.Thread(
            target=lambda: successor.run_blocking(pools.set_drained, "small", False, now=utcnow())
        )
        writer.start()
        writer.join(timeout=30)
        written = not writer.is_alive()
        drained_then = pools.drained(successor.run_blocking(pools.statuses)) if written else None
        wake.set()
        sleeper.join(timeout=30)
        writer.join(timeout=30)
        frozen.close()
        successor.close()
    assert written, "the successor's write waited for the frozen replica"
    assert drained_then == set()
    assert len(attempts) == 2  # the frozen one's transaction ran again on a new connection when it woke


def test_a_write_under_a_stale_fence_is_refused_and_writes_nothing() -> None:
    """A replica paused past its lease wakes up with the fence it acquired under; another replica has
    taken the pool since, so the database refuses everything the woken one writes for it."""
    intent = NewRunner(pool="small", scope="org:octo", labels=("small",), reason=Reason.WARM)
    with postgres_url() as url:
        store = Store(url)
        store.migrate()
        first = store.run_blocking(leases.acquire, "small", "replica-1", timedelta(seconds=30))
        assert first is not None and first[1] is None
        stale, _ = first
        assert store.run_blocking(leases.acquire, "small", "replica-2", timedelta(seconds=30)) is None, "still held"
        store.run_blocking(leases.release, [stale])  # as if it expired while replica-1 was paused
        second = store.run_blocking(leases.acquire, "small", "replica-2", timedelta(seconds=30))
        assert second is not None and second[0].number == stale.number + 1
        with pytest.raises(leases.LeaseLost, match="pool small"):
            store.run_blocking(runners.add, "corral", [intent], fence=stale, now=utcnow())
        runner = store.run_blocking(runners.add, "corral", [intent], fence=second[0], now=utcnow())[0]
        with pytest.raises(leases.LeaseLost):
            store.run_blocking(
                runners.apply, [Transition(runner, RunnerState.FAILED, Reason.OPERATOR)], [stale], now=utcnow()
            )
        assert store.run_blocking(leases.renew, [stale], timedelta(seconds=30)) == set()
        assert store.run_blocking(leases.renew, [second[0]], timedelta(seconds=30)) == {"small"}
        assert [r.state for r in store.run_blocking(runners.listing)] == [RunnerState.PENDING]
        store.close()


def test_a_pools_create_backoff_outlives_its_holder(store: Store) -> None:
    """The replica that takes a pool over (or corral restarting) backs off as the former holder did."""
    log_once = LogOnce(logging.getLogger("test"))

    now = [0.0]

    async def fail_three_times() -> float:
        """Three failures in a row, each after the last pause ended: each pause twice the last."""
        holder = PoolPauses(store, log_once, lambda: now[0])
        assert await holder.failed("small") == 1.0
        now[0] += 1.5
        assert await holder.failed("small") == 2.0
        now[0] += 2.5
        return await holder.failed("small")

    paused = asyncio.run(fail_three_times())
    assert paused == 4.0
    statuses = store.run_blocking(pools.statuses)
    successor = PoolPauses(store, log_once, time.monotonic)
    successor.restore(statuses, {"small"}.__contains__)
    assert successor.failures("small") == 3
    assert 0 < successor.remaining_s("small") <= paused
    assert asyncio.run(successor.succeeded("small", created_at=utcnow()))  # a runner created since the restore
    fresh = PoolPauses(store, log_once, time.monotonic)
    fresh.restore(store.run_blocking(pools.statuses), {"small"}.__contains__)
    assert (fresh.failures("small"), fresh.remaining_s("small")) == (0, 0.0)


def test_a_clouds_backoff_for_a_pool_outlives_its_holder(store: Store) -> None:
    """A pool in two clouds, the first of which failed it twice: the next holder keeps sending its runners
    elsewhere for what is left of the backoff, and a runner online there ends it for every later holder."""
    log_once = LogOnce(logging.getLogger("test"))
    now = [0.0]

    async def fail_twice() -> float:
        holder = PoolPauses(store, log_once, lambda: now[0])
        await holder.cloud_failed("small", "east")
        now[0] += 1.5
        return await holder.cloud_failed("small", "east", at_least_s=30.0)

    paused = asyncio.run(fail_twice())
    assert paused == 30.0
    successor = PoolPauses(store, log_once, time.monotonic)
    successor.restore(store.run_blocking(pools.statuses), {"small"}.__contains__)
    assert successor.cloud_failures("small", "east") == 2
    assert 25 < successor.cloud_remaining_s("small", "east") <= paused
    assert (successor.cloud_failures("small", "west"), successor.remaining_s("small")) == (0, 0.0)
    asyncio.run(successor.cloud_succeeded("small", "east", created_at=utcnow()))
    fresh = PoolPauses(store, log_once, time.monotonic)
    fresh.restore(store.run_blocking(pools.statuses), {"small"}.__contains__)
    assert (fresh.cloud_failures("small", "east"), fresh.cloud_remaining_s("small", "east")) == (0, 0.0)


def test_redelivery_requests_are_counted_for_every_replica_and_pruned(store: Store) -> None:
    store.run_blocking(redeliveries.asked, "guid-1", now=utcnow())
    store.run_blocking(redeliveries.asked, "guid-1", now=utcnow())
    store.run_blocking(redeliveries.asked, "guid-2", now=utcnow())
    other = Store(store.url)
    try:
        assert other.run_blocking(redeliveries.attempts, ["guid-1", "guid-2", "guid-3"]) == {"guid-1": 2, "guid-2": 1}
    finally:
        other.close()
    later = utcnow() + timedelta(days=1)
    assert store.run_blocking(retention.prune_batch, older_than=later, batch=10) == 2
    assert store.run_blocking(redeliveries.attempts, ["guid-1", "guid-2"]) == {}


def test_a_drain_and_its_notice_to_the_pools_holder_commit_together_or_not_at_all() -> None:
    """An operator's drain on a replica that does not hold the pool tells the holder (NOTIFY) in the transaction
    that writes it: a drain that fails to commit sends nothing, one that commits is heard at once. Until
    2026-12-06 the notice was a transaction of its own: a failure between the two answered the operator with
    an error for a drain already written."""
    notices = ("~drained", "~drain:1:small")
    with postgres_store_heard() as (store, listener):

        def drain_then_fail(connection: Connection) -> None:
            pools.set_drained(connection, "small", True, now=utcnow(), notices=notices)
            raise RuntimeError("the transaction ends here")

        with pytest.raises(RuntimeError):
            store.run_blocking(drain_then_fail)
        assert pools.drained(store.run_blocking(pools.statuses)) == set()

        store.run_blocking(pools.set_drained, "small", True, now=utcnow(), notices=notices)
        store.run_blocking(leases.notify_wake, ["~end"])  # notices arrive in commit order: the last
        heard = [notice.payload for notice in listener.notifies(timeout=5, stop_after=3)]
        assert pools.drained(store.run_blocking(pools.statuses)) == {"small"}
    assert sorted(heard) == sorted([*notices, "~end"]) and heard[-1] == "~end"
