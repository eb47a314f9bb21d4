"""Planning within the project's quota: pools that share a small quota serve every job, and the cloud never
has to refuse a create for quota, because corral does not send one the headroom shows refused."""

from __future__ import annotations

import random

import httpx

from corral.cloud.quota import Headroom, ServerCost
from corral.engine.quota import MAX_RESERVATION_S, QuotaBudget
from corral.local import pool_spec
from corral.sandbox.server import Sandbox
from tests.conftest import StartCorral
from tests.test_end_to_end import everything_done, nothing_left
from tests.test_resilience import runner_failures
from tests.waiting import wait_until


def test_two_pools_sharing_a_quota_of_ten_serve_a_hundred_jobs_with_no_create_refused(
    sandbox: Sandbox, control: httpx.Client, start_corral: StartCorral
) -> None:
    control.put("/quota", json={"instances": 10}).raise_for_status()
    pools = {"small": pool_spec(["small"], max_runners=10), "large": pool_spec(["large"], max_runners=10)}
    corral = start_corral(pools, default_pool="small")
    rng = random.Random(5)
    jobs = [
        {"at": rng.uniform(0, 5), "repo": "octo-org/app", "labels": [rng.choice(["small", "large"])], "duration": 0.3}
        for _ in range(100)
    ]
    control.post("/trace", json={"jobs": jobs}).raise_for_status()
    wait_until(lambda: everything_done(control, 100), timeout=180, what="all 100 jobs completed")
    wait_until(lambda: nothing_left(control), timeout=60, what="no server or registration left")
    refused = [reason for reason in runner_failures(corral) if "quota" in reason.lower()]
    assert refused == [], f"{len(refused)} creates refused for quota: {refused[:3]}"


def test_a_create_holds_its_cost_until_a_reading_made_after_it_finished() -> None:
    """Between two readings the budget counts this replica's own creates, exactly once: not before the
    reading includes them (Nova counts a server once it accepted the create), and not after."""
    now = [100.0]
    budget = QuotaBudget(clock=lambda: now[0])
    server = ServerCost(cores=2, ram_mb=4096)
    budget.refresh(Headroom(instances=5, cores=8), read_began_at=now[0])
    claims, short = budget.claim(server, 6)
    assert (len(claims), short) == (4, ["cores"]), "8 cores hold four 2-core servers"
    budget.bind(claims[0], "r1")
    budget.bind(claims[1], "r2")
    budget.release(claims[2])
    budget.release(claims[3])
    assert budget.left() == Headroom(instances=3, cores=4)

    now[0] = 101.0
    budget.finished("r1")  # answered; r2 still in flight
    now[0] = 102.0
    budget.refresh(Headroom(instances=4, cores=6), read_began_at=101.5)  # Nova counts r1, not yet r2
    assert budget.left() == Headroom(instances=3, cores=4), "r1 is in the reading now; r2 is still held"
    budget.finished("r2")
    budget.refresh(Headroom(instances=3, cores=4), read_began_at=102.0)
    assert budget.left() == Headroom(instances=2, cores=2), "a reading begun as r2 finished may predate it"
    now[0] = 103.0
    budget.refresh(Headroom(instances=3, cores=4), read_began_at=103.0)
    assert budget.left() == Headroom(instances=3, cores=4), "both in the reading, neither held"

    (stuck,), _ = budget.claim(server, 1)
    budget.bind(stuck, "r3")  # a create that never runs
    now[0] += MAX_RESERVATION_S + 1
    budget.refresh(Headroom(instances=3, cores=4), read_began_at=now[0])
    assert budget.left() == Headroom(instances=3, cores=4), "a reservation whose create never ran lapses"
    budget.refresh(None, read_began_at=now[0])
    claims, short = budget.claim(server, 9)
    assert (len(claims), short) == (9, []), "an unreadable quota holds nothing back"
