"""An operator's delete passed on to the replica holding the runner's pool answers with that replica's outcome,
as a single corral does, however long the delete takes (issue 25, item 10).

Two corrals in this process share the test's sandbox and a fresh database on the real PostgreSQL. GitHub is
made slow to delete a registration (longer than a replica waits for another to take a request on): the
owner's delete takes that long, and its outcome is still the answer.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from corral.engine.replicas import ANSWER_WAIT_S
from corral.model import RunnerState
from corral_sandbox.local import LocalCorral, corral_config, pool_spec
from corral_sandbox.server import Sandbox
from tests.store_urls import postgres_url
from tests.waiting import wait_until

POOLS = ("alpha", "beta")
SLOW_REGISTRATION_DELETE = "github DELETE /orgs/{org}/actions/runners/{runner_id}"


@pytest.fixture
def replicas(sandbox: Sandbox, tmp_path: Path) -> Iterator[tuple[LocalCorral, LocalCorral]]:
    with postgres_url() as url:
        document = corral_config(
            sandbox.info,
            url,
            {pool: pool_spec([pool], min_idle=1) for pool in POOLS},
            default_pool=POOLS[0],
            lease_time="3s",
        )
        started: list[LocalCorral] = []
        try:
            for name in ("replica-a", "replica-b"):
                folder = tmp_path / name
                folder.mkdir()
                started.append(LocalCorral(sandbox.info, folder / "corral.yaml", document, replica=name).start())
            yield started[0], started[1]
        finally:
            for corral in started:
                corral.stop()


def held_by(corral: LocalCorral) -> set[str]:
    return {pool for pool in POOLS if corral.service.engine.leases.holds(pool)}


def test_a_delete_passed_on_answers_with_the_owners_outcome_however_long_it_takes(
    replicas: tuple[LocalCorral, LocalCorral], control: httpx.Client
) -> None:
    first, second = replicas
    wait_until(lambda: held_by(first) and held_by(second), timeout=30, what="each replica holding a pool")
    pool = sorted(held_by(second))[0]
    idle = wait_until(
        lambda: first.runners(pool=pool, states=[RunnerState.IDLE]), timeout=30, what=f"an idle runner of {pool}"
    )[0]
    slow = {"match": SLOW_REGISTRATION_DELETE, "latency_ms": (ANSWER_WAIT_S + 1.0) * 1000, "count": 1}
    control.put("/faults", json={"endpoints": [slow]}).raise_for_status()
    with first.api() as api:
        answer = api.delete(f"/api/v1/runners/{idle.id}", timeout=ANSWER_WAIT_S + 30)
    assert (answer.status_code, answer.json()) == (202, {"outcome": "deleting"})
    assert control.get("/faults").json()["endpoints"] == [], "the owner's delete waited for the slow GitHub"
    (deleted,) = [runner for runner in first.runners(pool=pool) if runner.id == idle.id]
    assert deleted.state in (RunnerState.DELETING, RunnerState.DELETED)
