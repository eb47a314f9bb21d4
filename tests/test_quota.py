"""Planning within the project's quota: pools that share a small quota serve every job, and the cloud never
has to refuse a create for quota, because corral does not send one the headroom shows refused."""

from __future__ import annotations

import httpx

from corral.cloud.quota import Headroom, ServerCost
from corral.engine.quota import MAX_RESERVATION_S, QuotaBudget
from corral_sandbox.local import pool_spec
from corral_sandbox.server import Sandbox
from tests.conftest import StartCorral
from tests.test_end_to_end import everything_done
from tests.test_lifecycle import online_per_pool
from tests.test_resilience import runner_failures
from tests.waiting import wait_until


def test_jobs_that_come_before_the_first_look_has_read_the_quota_wait_for_it(
    sandbox: Sandbox, control: httpx.Client, start_corral: StartCorral
) -> None:
    """Right after a start, passes run before the first look: with Nova's limits slow to answer (3 s), jobs
    that come then get no create the quota of one instance would refuse; they are served one at a time."""
    control.put("/quota", json={"instances": 1}).raise_for_status()
    slow = {"match": "openstack GET */limits", "latency_ms": 3000, "count": 1}
    control.put("/faults", json={"endpoints": [slow]}).raise_for_status()
    corral = start_corral({"small": pool_spec(["small"], max_runners=5)})
    jobs = [{"at": 0.0, "repo": "octo-org/app", "labels": ["small"], "duration": 0.2} for _ in range(3)]
    control.post("/trace", json={"jobs": jobs}).raise_for_status()
    wait_until(lambda: everything_done(control, 3), timeout=60, what="the three jobs served")
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


def test_a_higher_priority_pool_waiting_for_quota_gets_the_room_of_a_lower_ones_warm_runners(
    sandbox: Sandbox, control: httpx.Client, start_corral: StartCorral
) -> None:
    """The quota is full of a low-priority pool's warm runners when jobs come for a high-priority pool: the
    warm runners make room at once (idle_grace is an hour here), the jobs are served, and the low pool warms
    up again once they are done."""
    control.put("/quota", json={"instances": 3}).raise_for_status()
    pools = {
        "low": pool_spec(["low"], min_idle=3, priority=1, idle_grace="1h"),
        "high": pool_spec(["high"], priority=10, max_runners=3),
    }
    corral = start_corral(pools, default_pool="low")
    wait_until(lambda: online_per_pool(sandbox) == {"low": 3}, timeout=30, what="the low pool warm, the quota full")
    jobs = [control.post("/jobs", json={"repo": "octo-org/app", "labels": ["high"], "duration": 0.5}).json()["id"]]
    jobs.append(control.post("/jobs", json={"repo": "octo-org/app", "labels": ["high"], "duration": 0.5}).json()["id"])
    wait_until(
        lambda: all(control.get(f"/jobs/{job}").json()["status"] == "completed" for job in jobs),
        timeout=60,
        what="the high-priority jobs served in the room of the low pool's warm runners",
    )
    ran_on = {control.get(f"/jobs/{job}").json()["runner_name"].split("-")[1] for job in jobs}
    assert ran_on == {"high"}
    wait_until(lambda: online_per_pool(sandbox) == {"low": 3}, timeout=60, what="the low pool warm again")
    refused = [reason for reason in runner_failures(corral) if "quota" in reason.lower()]
    assert refused == [], f"creates refused for quota: {refused[:3]}"


def test_what_a_higher_priority_pool_waits_for_is_kept_from_lower_ones() -> None:
    budget = QuotaBudget(clock=lambda: 0.0)
    server = ServerCost(cores=1, ram_mb=1024)
    budget.refresh(Headroom(instances=6), read_began_at=0.0)
    high, short = budget.claim(server, 5, pool="high", priority=10, for_jobs=5)
    assert (len(high), short) == (5, [])
    for key in high:
        budget.release(key)  # nothing was written: the room is free again
    budget.refresh(Headroom(instances=3), read_began_at=0.0)
    high, short = budget.claim(server, 5, pool="high", priority=10, for_jobs=5)
    assert (len(high), short) == (3, ["instances"]), "three fit; two runners for its jobs wait"
    for key in high:
        budget.release(key)
    budget.refresh(Headroom(instances=2), read_began_at=0.0)  # a low pool's runner went away
    assert budget.outranked("low", 1) == 2 and budget.outranked("peer", 10) == 0
    low, short = budget.claim(server, 2, pool="low", priority=1)
    assert (low, short) == ([], ["instances"]), "the room is kept for the waiting high-priority jobs"
    peer, _ = budget.claim(server, 1, pool="peer", priority=10)
    assert len(peer) == 1, "a pool of the same priority is not held back"
    budget.not_waiting("high")
    assert budget.outranked("low", 1) == 0
