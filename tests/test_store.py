"""The store on SQLite and on the real PostgreSQL: runner transitions, job merging, delivery de-duplication."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.model import InvalidTransition, JobState, RunnerState
from corral.store import StaleRunner, Store
from tests.store_urls import postgres_url, sqlite_url


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    urls = sqlite_url(tmp_path) if request.param == "sqlite" else postgres_url()
    with urls as url:
        store = Store(url)
        store.migrate()
        yield store
        store.close()


def job_update(job_id: int, status: str, **extra: object) -> dict[str, object]:
    return {"id": job_id, "repository": "octo/app", "labels": ["small"], "status": status, "pool": "small", **extra}


def test_migrate_is_idempotent(store: Store) -> None:
    store.migrate()
    assert store.runners() == []


def test_a_runner_is_written_pending_and_its_transitions_are_logged(store: Store) -> None:
    runner = store.add_runner("small", "corral", ["small"], scope="org:octo", reason="scale up: 1 queued job")
    assert runner.state == "pending" and runner.name == f"corral-small-{runner.id}"
    store.transition(runner.id, RunnerState.CREATING, "create requested")
    moved = store.transition(runner.id, RunnerState.BOOTING, "server exists", server_id="srv-1")
    assert moved.server_id == "srv-1" and moved.state == "booting"
    assert moved.state_changed_at >= moved.created_at and moved.created_at.tzinfo is not None
    history = [(e.from_state, e.to_state, e.reason) for e in store.events(runner.id)]
    assert history == [
        (None, "pending", "scale up: 1 queued job"),
        ("pending", "creating", "create requested"),
        ("creating", "booting", "server exists"),
    ]


def test_illegal_and_stale_transitions_change_nothing(store: Store) -> None:
    runner = store.add_runner("small", "corral", ["small"], scope="org:octo", reason="warm")
    with pytest.raises(InvalidTransition):
        store.transition(runner.id, RunnerState.IDLE, "skipping ahead")
    with pytest.raises(StaleRunner):
        store.transition(runner.id, RunnerState.CREATING, "x", expect=RunnerState.BOOTING)
    with pytest.raises(StaleRunner):
        store.transition("nope", RunnerState.CREATING, "x")
    assert store.runner(runner.id).state == "pending"  # type: ignore[union-attr]
    assert len(store.events(runner.id)) == 1


def test_only_one_of_two_racing_transitions_wins(store: Store) -> None:
    runner = store.add_runner("small", "corral", ["small"], scope="org:octo", reason="warm")
    outcomes: list[str] = []
    barrier = threading.Barrier(2)

    def attempt() -> None:
        barrier.wait()
        try:
            store.transition(runner.id, RunnerState.CREATING, "race", expect=RunnerState.PENDING)
            outcomes.append("won")
        except StaleRunner:
            outcomes.append("stale")

    threads = [threading.Thread(target=attempt) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["stale", "won"]
    assert [e.to_state for e in store.events(runner.id)] == ["pending", "creating"]


def test_runners_filter_by_pool_and_state(store: Store) -> None:
    a = store.add_runner("small", "corral", ["small"], scope="org:octo", reason="warm")
    store.add_runner("big", "corral", ["big"], scope="org:octo", reason="warm")
    store.transition(a.id, RunnerState.FAILED, "create error")
    assert [r.pool for r in store.runners(states=[RunnerState.PENDING])] == ["big"]
    assert [r.id for r in store.runners(pool="small")] == [a.id]


def test_a_redelivered_webhook_is_recognised_and_changes_nothing(store: Store) -> None:
    assert store.record_job_event(delivery_id="d1", event="workflow_job", action="queued", job=job_update(1, "queued"))
    again = store.record_job_event(
        delivery_id="d1", event="workflow_job", action="queued", job=job_update(1, "completed")
    )
    assert again is False
    assert store.job(1).status == "queued"  # type: ignore[union-attr]


def test_jobs_never_move_backwards(store: Store) -> None:
    store.record_job_event(
        delivery_id="c", event="workflow_job", action="completed", job=job_update(7, "completed", conclusion="success")
    )
    store.record_job_event(delivery_id="q", event="workflow_job", action="queued", job=job_update(7, "queued"))
    job = store.job(7)
    assert job is not None and (job.status, job.conclusion) == ("completed", "success")
    store.record_job_event(delivery_id="q2", event="workflow_job", action="queued", job=job_update(8, "queued"))
    store.record_job_event(
        delivery_id="p", event="workflow_job", action="in_progress", job=job_update(8, "in_progress", runner_name="r1")
    )
    assert [j.id for j in store.jobs(status=JobState.IN_PROGRESS)] == [8]
    assert store.job(8).runner_name == "r1"  # type: ignore[union-attr]


def test_pool_status_round_trip(store: Store) -> None:
    store.set_pool_status("small", generation=3, ready=False, reason="image 'x' not found")
    store.set_pool_status("small", generation=4, ready=True, reason=None)
    status = store.pool_statuses()["small"]
    assert (status.applied_generation, status.ready, status.reason) == (4, True, None)
