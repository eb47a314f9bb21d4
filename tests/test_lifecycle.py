"""Pools converge against the sandbox: warm runners, demand from webhooks, grow, shrink, add, remove,
switch the default. Servers and registrations are checked on both far ends, not in corral's store."""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from githubkit import GitHub, TokenAuthStrategy

from corral.clock import utcnow
from corral.model import RunnerState
from corral_sandbox.local import LocalCorral, corral_config, pool_spec, sandbox_connection
from corral_sandbox.server import Sandbox
from tests.conftest import StartCorral
from tests.waiting import wait_until

ORG = "octo-org"


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'corral.db'}"


def cloud_servers(sandbox: Sandbox) -> dict[str, list[str]]:
    """Owned servers per pool, as the cloud lists them: pool -> statuses."""
    conn = sandbox_connection(sandbox.info)
    pools: dict[str, list[str]] = {}
    for server in conn.compute.servers(details=True):
        pool = (server.metadata or {}).get("corral-pool")
        if pool:
            pools.setdefault(pool, []).append(server.status)
    conn.close()
    return pools


def registrations(sandbox: Sandbox) -> list[Any]:
    github = GitHub(TokenAuthStrategy(sandbox.info.pat), base_url=sandbox.info.github_url)
    return list(github.rest.actions.list_self_hosted_runners_for_org(ORG, per_page=100).parsed_data.runners)


def online_per_pool(sandbox: Sandbox) -> dict[str, int]:
    counts: dict[str, int] = {}
    for runner in registrations(sandbox):
        if runner.status == "online":
            pool = runner.name.split("-")[1]
            counts[pool] = counts.get(pool, 0) + 1
    return counts


def converge(corral: LocalCorral, check: Any, what: str, timeout: float = 20.0) -> Any:
    """Run passes until `check()` holds (each pass is synchronous, so this waits on state, not time)."""

    def probe() -> Any:
        corral.settle()
        return check()

    return wait_until(probe, timeout=timeout, what=what)


def pools_view(corral: LocalCorral) -> dict[str, dict[str, Any]]:
    with corral.api() as api:
        return {pool["name"]: pool for pool in api.get("/api/v1/pools").json()}


def test_warm_runners_come_up_and_grow_and_shrink(
    sandbox: Sandbox, start_corral: StartCorral, database_url: str
) -> None:
    document = corral_config(sandbox.info, database_url, {"small": pool_spec(["small"], min_idle=2)})
    corral = start_corral(document=document)
    converge(corral, lambda: online_per_pool(sandbox) == {"small": 2}, "two warm runners online")
    assert cloud_servers(sandbox) == {"small": ["ACTIVE", "ACTIVE"]}
    view = converge(corral, lambda: pools_view(corral)["small"]["idle"] == 2 and pools_view(corral)["small"], "idle")
    assert (view["idle"], view["desired"], view["ready"], view["default"]) == (2, 2, True, True)

    document["pools"]["small"]["min_idle"] = 4
    assert corral.reload(document) == []
    converge(corral, lambda: online_per_pool(sandbox) == {"small": 4}, "grown to four")
    assert pools_view(corral)["small"]["applied_generation"] == 2

    document["pools"]["small"]["min_idle"] = 1
    assert corral.reload(document) == []
    converge(corral, lambda: online_per_pool(sandbox) == {"small": 1}, "shrunk to one")
    converge(corral, lambda: cloud_servers(sandbox) == {"small": ["ACTIVE"]}, "surplus servers deleted")


def test_queued_jobs_get_one_runner_each_and_everything_is_cleaned_up(
    sandbox: Sandbox, start_corral: StartCorral, database_url: str, control: httpx.Client
) -> None:
    corral = start_corral(
        document=corral_config(sandbox.info, database_url, {"small": pool_spec(["small"], max_runners=5)})
    )
    jobs = [
        control.post("/jobs", json={"repo": f"{ORG}/app", "labels": ["self-hosted", "small"], "duration": 0.2}).json()
        for _ in range(3)
    ]

    def all_done() -> bool:
        return all(control.get(f"/jobs/{job['id']}").json()["status"] == "completed" for job in jobs)

    converge(corral, all_done, "three jobs completed")
    converge(corral, lambda: cloud_servers(sandbox) == {} and registrations(sandbox) == [], "nothing left behind")
    stats = control.get("/stats").json()["cloud"]
    assert stats["servers_created"] == 3, "one runner per job, no more"


def job_status(control: httpx.Client, job_id: int) -> dict[str, Any]:
    body: dict[str, Any] = control.get(f"/jobs/{job_id}").json()
    return body


def test_adding_and_removing_pools(
    sandbox: Sandbox, start_corral: StartCorral, database_url: str, control: httpx.Client
) -> None:
    document = corral_config(sandbox.info, database_url, {"small": pool_spec(["small"], min_idle=2)})
    corral = start_corral(document=document)
    converge(corral, lambda: online_per_pool(sandbox) == {"small": 2}, "small warm")

    document["pools"]["big"] = pool_spec(["big"], min_idle=2, flavor="m1.large")
    document["default_pool"] = "big"
    assert corral.reload(document) == []
    converge(corral, lambda: online_per_pool(sandbox) == {"small": 2, "big": 2}, "big pool added")

    # Long enough that its runner is still busy when the idle ones have gone, even on a loaded machine.
    busy = control.post("/jobs", json={"repo": f"{ORG}/app", "labels": ["small"], "duration": 15}).json()
    converge(corral, lambda: job_status(control, busy["id"])["status"] == "in_progress", "small runner busy")
    del document["pools"]["small"]
    assert corral.reload(document) == []
    converge(corral, lambda: cloud_servers(sandbox).get("small") == ["ACTIVE"], "idle runners of the removed pool go")
    assert job_status(control, busy["id"])["status"] == "in_progress", "the busy one is left to finish its job"
    converge(corral, lambda: "small" not in cloud_servers(sandbox), "and goes once its job is done")
    assert job_status(control, busy["id"])["conclusion"] == "success"
    converge(corral, lambda: "small" not in pools_view(corral), "removed pool drained from the view")
    assert online_per_pool(sandbox) == {"big": 2}


def test_switching_the_default_pool_moves_generic_demand(
    sandbox: Sandbox, start_corral: StartCorral, database_url: str, control: httpx.Client
) -> None:
    pools = {"small": pool_spec(["small"]), "big": pool_spec(["big"], flavor="m1.large")}
    document = corral_config(sandbox.info, database_url, pools, default_pool="small")
    corral = start_corral(document=document)

    def generic_job_pool() -> str:
        job = control.post("/jobs", json={"repo": f"{ORG}/app", "labels": ["self-hosted"], "duration": 0}).json()
        done = converge(corral, lambda: job_status(control, job["id"])["status"] == "completed", "generic job done")
        assert done
        runner_name = job_status(control, job["id"])["runner_name"]
        with corral.api() as api:
            runners = api.get("/api/v1/runners", params={"include_deleted": True}).json()
        return str(next(runner["pool"] for runner in runners if runner["name"] == runner_name))

    assert generic_job_pool() == "small"
    document["default_pool"] = "big"
    assert corral.reload(document) == []
    assert generic_job_pool() == "big"
    assert pools_view(corral)["big"]["default"] is True


def test_an_invalid_reload_keeps_the_running_generation(
    sandbox: Sandbox, start_corral: StartCorral, database_url: str
) -> None:
    document = corral_config(sandbox.info, database_url, {"small": pool_spec(["small"])})
    corral = start_corral(document=document)
    broken = {**document, "default_pool": "nope"}
    with corral.api() as api:
        corral.write_config(broken)
        response = api.post("/api/v1/reload")
    assert response.status_code == 422
    assert response.json()["problems"] == ["default_pool: 'nope' names no pool; use one of ['small']"]
    assert response.json()["generation"] == 1


def test_a_burst_starts_one_runner_per_job(
    sandbox: Sandbox, start_corral: StartCorral, database_url: str, control: httpx.Client
) -> None:
    corral = start_corral(
        document=corral_config(sandbox.info, database_url, {"small": pool_spec(["small"], max_runners=50)})
    )
    burst = {"jobs": [{"repo": f"{ORG}/app", "labels": ["small"], "duration": 0.3} for _ in range(30)]}
    control.post("/trace", json=burst).raise_for_status()

    def all_done() -> bool:
        jobs = control.get("/jobs").json()
        return len(jobs) == 30 and all(job["status"] == "completed" for job in jobs)

    converge(corral, all_done, "the burst completed", timeout=60)
    assert control.get("/stats").json()["cloud"]["servers_created"] == 30, "a burst of N starts N, not N+k"


def jobs_completed(control: httpx.Client) -> int:
    return int(control.get("/stats").json()["github"]["jobs"]["completed"])


def registration_deletes(control: httpx.Client) -> int:
    calls = control.get("/stats").json()["api_calls"]["github"]
    return int(calls.get("DELETE /orgs/{org}/actions/runners/{runner_id}", 0))


def test_a_runner_that_deregistered_itself_after_its_job_costs_no_delete_call(
    sandbox: Sandbox, start_corral: StartCorral, database_url: str, control: httpx.Client
) -> None:
    """An ephemeral runner deregisters itself after its job. A look made while it ran still lists it; deleting
    that registration on the strength of it was one wasted GitHub call per job, half of a busy pool's budget."""
    pools = {"small": pool_spec(["small"], max_runners=50)}
    corral = start_corral(document=corral_config(sandbox.info, database_url, pools, reconcile_interval="1s"))
    steady = {"jobs": [{"at": i / 10, "repo": f"{ORG}/app", "labels": ["small"], "duration": 1.0} for i in range(40)]}
    control.post("/trace", json=steady).raise_for_status()
    # Not a latency check: on a loaded machine a job whose runners both took other jobs waits to be confirmed
    # still queued (`confirm_after`) before it gets a third, which can take longer than the usual wait.
    wait_until(lambda: jobs_completed(control) == 40, timeout=60, what="the 40 jobs completed")
    converge(corral, lambda: corral.runners(states=[RunnerState.DELETING]) == [], "every runner deleted")
    assert control.get("/stats").json()["github"]["runners"]["registered"] == 0
    deletes = registration_deletes(control)
    assert deletes <= 4, f"{deletes} registration deletes for 40 runners that had deregistered themselves"


def test_a_job_cancelled_while_waiting_gets_no_runner(
    sandbox: Sandbox, start_corral: StartCorral, database_url: str, control: httpx.Client
) -> None:
    document = corral_config(sandbox.info, database_url, {"small": pool_spec(["small"])}, stale_job_check="1s")
    corral = start_corral(document=document)
    with corral.api() as api:
        api.post("/api/v1/pools/small/drain").raise_for_status()
    # Until the job is cancelled GitHub answers no question about it: a "still queued" given before the cancel
    # would rightly count as confirmed for `stale_job_check`, and the job would get its runner.
    unanswered = {"match": "github GET /repos/*/actions/jobs/*", "error_rate": 1.0, "status": 503}
    control.put("/faults", json={"endpoints": [unanswered]}).raise_for_status()
    job = control.post("/jobs", json={"repo": f"{ORG}/app", "labels": ["small"], "duration": 0}).json()
    wait_until(lambda: corral.job(job["id"]) is not None, what="the job recorded")
    lost = {"world": {"webhook_lose_rate": 1.0}}
    control.put("/faults", json={"endpoints": [unanswered], **lost}).raise_for_status()
    control.post(f"/jobs/{job['id']}/cancel").raise_for_status()  # its `completed` webhook is lost
    wait_until(lambda: control.get("/stats").json()["github"]["webhooks"]["lost"] >= 1, what="the lost webhook")
    control.put("/faults", json=lost).raise_for_status()
    received = corral.job(job["id"])
    assert received is not None
    # stale_job_check cannot go below 1s: only a job queued that long is confirmed with GitHub first.
    wait_until(lambda: utcnow() - received.received_at > timedelta(seconds=1), what="the job older than 1s")
    with corral.api() as api:
        api.post("/api/v1/pools/small/undrain").raise_for_status()

    def asked_github() -> bool:
        stored = corral.job(job["id"])
        return stored is not None and stored.status == "completed"

    converge(corral, asked_github, "GitHub asked about the stale job")
    assert control.get("/stats").json()["cloud"]["servers_created"] == 0, "no runner for a cancelled job"


def test_a_pool_the_cloud_cannot_serve_is_not_ready_and_the_others_carry_on(
    sandbox: Sandbox, start_corral: StartCorral, database_url: str
) -> None:
    pools = {
        "small": pool_spec(["small"], min_idle=1),
        "broken": pool_spec(["broken"], min_idle=1, image="no-such-image", networks=["no-such-net"]),
    }
    corral = start_corral(document=corral_config(sandbox.info, database_url, pools, default_pool="small"))
    converge(corral, lambda: online_per_pool(sandbox) == {"small": 1}, "the healthy pool warms up")
    broken = pools_view(corral)["broken"]
    assert broken["ready"] is False
    assert "no-such-image" in broken["reason"] and "no-such-net" in broken["reason"]
    assert pools_view(corral)["small"]["ready"] is True
    assert "broken" not in cloud_servers(sandbox), "nothing is created for a pool that cannot work"


def test_a_replaced_user_data_template_is_what_the_servers_boot(
    sandbox: Sandbox, start_corral: StartCorral, database_url: str, tmp_path: Path, control: httpx.Client
) -> None:
    # A template that forgets the JIT config: servers boot, and no runner can ever come online.
    (tmp_path / "broken.sh").write_text("#!/bin/sh\necho starting ${runner_name} of ${pool}\n")
    document = corral_config(
        sandbox.info, database_url, {"small": pool_spec(["small"], min_idle=1)}, user_data_template="broken.sh"
    )
    corral = start_corral(document=document)
    converge(corral, lambda: cloud_servers(sandbox) == {"small": ["ACTIVE"]}, "a server booted")
    wait_until(lambda: control.get("/stats").json()["counters"].get("servers_without_runner") == 1, what="no JIT")
    assert online_per_pool(sandbox) == {}


def test_a_server_and_registration_whose_runner_corral_forgot_are_deleted_on_the_next_look(
    sandbox: Sandbox, start_corral: StartCorral, database_url: str
) -> None:
    """The join of both views: whatever left a runner's server and registration behind while corral counts it
    as deleted (a lost delete, a crash, an operator editing the database), the next look finds and removes them."""
    document = corral_config(sandbox.info, database_url, {"small": pool_spec(["small"], min_idle=1)})
    corral = start_corral(document=document)
    converge(corral, lambda: online_per_pool(sandbox) == {"small": 1}, "a warm runner online")
    (runner,) = corral.runners(pool="small")
    forgotten = sqlite3.connect(database_url.removeprefix("sqlite:///"))
    with forgotten:
        forgotten.execute("UPDATE runners SET state = 'deleted' WHERE id = ?", (runner.id,))
    forgotten.close()
    converge(
        corral,
        lambda: runner.name not in {registration.name for registration in registrations(sandbox)},
        "the forgotten runner's registration deleted",
    )
    converge(corral, lambda: runner.server_id not in server_ids(sandbox), "and its server")
    converge(corral, lambda: online_per_pool(sandbox) == {"small": 1}, "a new warm runner in its place")


def server_ids(sandbox: Sandbox) -> set[str]:
    conn = sandbox_connection(sandbox.info)
    try:
        return {server.id for server in conn.compute.servers()}
    finally:
        conn.close()
