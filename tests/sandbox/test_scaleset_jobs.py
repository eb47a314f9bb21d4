"""Jobs for runner scale sets, end to end: routing by the set's labels, the messages its listener hears,
its runners started from its JIT configs, and what GitHub does when a runner never picks its job up.

The full cycle boots a server through openstacksdk, as corral does, with the set's JIT config in its user data.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import openstack.connection
import pytest

from corral_sandbox.server import Sandbox
from tests.sandbox.github_support import jit_config, pat_client, validate_workflow_job
from tests.sandbox.scaleset_support import (
    FAST,
    SCALE_SETS,
    ScaleSetClient,
    Session,
    boot_server,
    checked,
    error,
    job_messages,
    start_runner,
)
from tests.waiting import wait_until
from tests.webhook_receiver import WebhookReceiver

REPO = "octo-org/app"


@pytest.fixture
def client(sandbox: Sandbox, control: httpx.Client) -> ScaleSetClient:
    control.put("/scalesets/settings", json=FAST).raise_for_status()
    return ScaleSetClient(sandbox).connect()


def submit(control: httpx.Client, labels: list[str], duration: float = 60, repo: str = REPO) -> dict[str, Any]:
    response = control.post("/jobs", json={"repo": repo, "labels": labels, "duration": duration})
    response.raise_for_status()
    job: dict[str, Any] = response.json()
    return job


def job(control: httpx.Client, job_id: int) -> dict[str, Any]:
    found: dict[str, Any] = control.get(f"/jobs/{job_id}").json()
    return found


def listen_until(
    client: ScaleSetClient, session: Session, done: Callable[[], bool], what: str, capacity: int | None = 10
) -> None:
    """Poll and acknowledge, as the reference listener does, until `done()`."""

    def step() -> bool:
        client.receive(session, capacity=capacity)
        return done()

    wait_until(step, what=what)


def kinds(session: Session) -> list[str]:
    return [m["messageType"] for m in session.seen]


def statistics(client: ScaleSetClient, scale_set_id: int) -> dict[str, int]:
    found: dict[str, int] = checked(client.call("GET", f"{SCALE_SETS}/{scale_set_id}"), 200, "runnerScaleSet")[
        "statistics"
    ]
    return found


def test_a_job_for_the_scale_set_runs_on_a_server_booted_with_its_jit_config(
    client: ScaleSetClient,
    control: httpx.Client,
    os_conn: openstack.connection.Connection,
    webhook_receiver: WebhookReceiver,
) -> None:
    scale_set = client.create_scale_set("linux-x64")
    session = client.open_session(scale_set["id"])
    queued = submit(control, ["linux-x64"], duration=0.2)
    listen_until(client, session, lambda: kinds(session) == ["JobAssigned"], "JobAssigned")
    assigned = session.seen[0]
    assert assigned["requestLabels"] == ["linux-x64"]
    assert (assigned["ownerName"], assigned["repositoryName"], assigned["workflowRunId"]) == (
        "octo-org",
        "app",
        queued["run_id"],
    )
    assert assigned["jobId"] == queued["scale_set"]["job_id"]
    assert assigned["runnerAssignTime"] == assigned["finishTime"] == "0001-01-01T00:00:00Z"
    assert statistics(client, scale_set["id"])["totalAssignedJobs"] == 1

    config = client.jit_config(scale_set["id"], "linux-x64-runner-1")
    cloud_config = f"#cloud-config\nruncmd:\n  - [/opt/runner/run.sh, --jitconfig, {config['encodedJITConfig']}]\n"
    server = boot_server(os_conn, "linux-x64-runner-1", cloud_config)
    listen_until(client, session, lambda: "JobCompleted" in kinds(session), "the job to run and complete")

    assert kinds(session) == ["JobAssigned", "JobStarted", "JobCompleted"]
    started, completed = session.seen[1], session.seen[2]
    runner = config["runner"]
    assert (started["runnerId"], started["runnerName"]) == (runner["id"], runner["name"])
    assert (completed["result"], completed["runnerId"], completed["runnerName"]) == (
        "succeeded",
        runner["id"],
        runner["name"],
    )
    assert {m["runnerRequestId"] for m in session.seen} == {assigned["runnerRequestId"]}
    assert completed["runnerAssignTime"] != "0001-01-01T00:00:00Z" != completed["finishTime"]
    done = job(control, queued["id"])
    assert (done["status"], done["conclusion"], done["runner_id"]) == ("completed", "success", runner["id"])
    wait_until(lambda: os_conn.compute.get_server(server.id).status == "SHUTOFF", what="the runner's server off")
    assert set(statistics(client, scale_set["id"]).values()) == {0}

    # GitHub still sends the workflow_job webhooks for a scale set's job
    def actions() -> list[str]:
        payloads = [
            json.loads(d.body) for d in webhook_receiver.snapshot() if d.headers.get("X-GitHub-Event") == "workflow_job"
        ]
        for payload in payloads:
            validate_workflow_job(payload)
        return [p["action"] for p in payloads if p["workflow_job"]["id"] == queued["id"]]

    wait_until(lambda: actions() == ["queued", "in_progress", "completed"], what="the three workflow_job webhooks")
    gh = pat_client(client.sandbox)
    rest = gh.rest.actions.get_job_for_workflow_run("octo-org", "app", queued["id"]).parsed_data
    assert (rest.runner_name, rest.runner_group_name, rest.conclusion) == (runner["name"], "Default", "success")


def test_statistics_follow_the_runners_and_jobs(client: ScaleSetClient, control: httpx.Client) -> None:
    scale_set = client.create_scale_set("linux")
    configs = [client.jit_config(scale_set["id"], f"linux-{n}") for n in range(3)]
    start_runner(client.sandbox, configs[0], "server-0")
    start_runner(client.sandbox, configs[1], "server-1")
    assert statistics(client, scale_set["id"]) == {
        "totalAvailableJobs": 0,
        "totalAcquiredJobs": 0,
        "totalAssignedJobs": 0,
        "totalRunningJobs": 0,
        "totalRegisteredRunners": 3,
        "totalBusyRunners": 0,
        "totalIdleRunners": 2,
    }
    for _ in range(3):
        submit(control, ["linux"])
    stats = statistics(client, scale_set["id"])
    assert (stats["totalAssignedJobs"], stats["totalRunningJobs"]) == (3, 2)
    assert (stats["totalRegisteredRunners"], stats["totalBusyRunners"], stats["totalIdleRunners"]) == (3, 2, 0)


def test_classic_jobs_and_runners_stay_apart_from_scale_sets(client: ScaleSetClient, control: httpx.Client) -> None:
    scale_set = client.create_scale_set("small")
    gh = pat_client(client.sandbox)
    classic_id, classic_config = jit_config(gh, "octo-org", "classic-1", ["small"])
    set_config = client.jit_config(scale_set["id"], "set-1")
    start_runner(client.sandbox, set_config, "server-set")
    classic_job = submit(control, ["self-hosted", "small"])
    assert job(control, classic_job["id"])["status"] == "queued"
    assert job(control, classic_job["id"])["scale_set"] is None
    start_runner(client.sandbox, {"runner": {"id": classic_id}, "encodedJITConfig": classic_config}, "server-classic")
    assert job(control, classic_job["id"])["runner_id"] == classic_id
    set_job = submit(control, ["SMALL"])
    assert job(control, set_job["id"])["runner_id"] == set_config["runner"]["id"]
    other_org = submit(control, ["small"], repo="other-org/app")
    assert (job(control, other_org["id"])["status"], job(control, other_org["id"])["scale_set"]) == ("queued", None)


def test_a_job_goes_to_a_scale_set_whose_labels_hold_all_of_its_own_the_name_only_if_registered(
    client: ScaleSetClient, control: httpx.Client
) -> None:
    """GitHub routes by the labels a scale set was registered with: its listener registers the name among them
    (actions-runner-controller's `buildRunnerScaleSetLabels`) so that `runs-on: <name>` reaches it."""
    named = client.create_scale_set("ci-gpu", labels=["ci-gpu", "gpu", "linux"])
    unnamed = client.create_scale_set("ci-arm", labels=["arm", "linux"])
    for labels in (["ci-gpu"], ["CI-GPU", "gpu"], ["gpu", "linux"]):
        assert job(control, submit(control, labels)["id"])["scale_set"]["scale_set_id"] == named["id"], labels
    assert job(control, submit(control, ["arm"])["id"])["scale_set"]["scale_set_id"] == unnamed["id"]
    for labels in (["ci-arm"], ["ci-gpu", "arm"], ["gpu", "x64"]):
        assert job(control, submit(control, labels)["id"])["scale_set"] is None, f"{labels}: no set has them all"


def test_a_job_queued_before_its_scale_set_existed_moves_to_it(client: ScaleSetClient, control: httpx.Client) -> None:
    early = submit(control, ["linux"])
    assert job(control, early["id"])["scale_set"] is None
    scale_set = client.create_scale_set("linux")
    assert job(control, early["id"])["scale_set"]["state"] == "assigned"
    response = client.call("POST", f"{SCALE_SETS}/{scale_set['id']}/sessions", body={"ownerName": "late"})
    assert checked(response, 200, "session")["statistics"]["totalAssignedJobs"] == 1


def test_github_fills_a_scale_set_up_to_the_capacity_its_listener_advertised(
    client: ScaleSetClient, control: httpx.Client
) -> None:
    scale_set = client.create_scale_set("linux")
    session = client.open_session(scale_set["id"])
    assert client.receive(session, capacity=1) is None
    first, second = submit(control, ["linux"]), submit(control, ["linux"])
    listen_until(client, session, lambda: len(session.seen) == 1, "one assignment", capacity=1)
    assert session.seen[0]["runnerRequestId"] == first["scale_set"]["runner_request_id"]
    assert job(control, second["id"])["scale_set"]["state"] == "pending"
    assert statistics(client, scale_set["id"])["totalAssignedJobs"] == 1
    listen_until(client, session, lambda: len(session.seen) == 2, "the second assignment", capacity=2)
    assert job(control, second["id"])["scale_set"]["state"] == "assigned"


def test_enterprise_server_assigns_a_job_only_once_a_scale_set_acquires_it(
    client: ScaleSetClient, control: httpx.Client
) -> None:
    control.put("/scalesets/settings", json={"requires_acquire": True}).raise_for_status()
    first_set = client.create_scale_set("linux-a", labels=["linux"])
    second_set = client.create_scale_set("linux-b", labels=["linux"])
    first = client.open_session(first_set["id"], owner="a")
    queued = submit(control, ["linux"])
    listen_until(client, first, lambda: kinds(first) == ["JobAvailable"], "JobAvailable")
    available = first.seen[0]
    request_id = available["runnerRequestId"]
    assert available["acquireJobUrl"] == f"{client.service_url}{SCALE_SETS}/{first_set['id']}/acquirejobs"
    assert statistics(client, first_set["id"])["totalAvailableJobs"] == 1
    assert statistics(client, first_set["id"])["totalAssignedJobs"] == 0
    # a listener that comes later hears of the job too
    second = client.open_session(second_set["id"], owner="b")
    listen_until(client, second, lambda: kinds(second) == ["JobAvailable"], "JobAvailable for the second set")

    acquired = checked(client.acquire(first_set["id"], first, [request_id, 987654]), 200, "int64List")
    assert acquired == {"count": 1, "value": [request_id]}
    lost = checked(client.acquire(second_set["id"], second, [request_id]), 200, "int64List")
    assert lost == {"count": 0, "value": []}
    error(client.acquire(second_set["id"], first, [request_id]), 401, "VssUnauthorizedException")
    listen_until(client, first, lambda: kinds(first) == ["JobAvailable", "JobAssigned"], "JobAssigned")
    stats = statistics(client, first_set["id"])
    assert (stats["totalAvailableJobs"], stats["totalAcquiredJobs"], stats["totalAssignedJobs"]) == (0, 1, 1)
    assert job(control, queued["id"])["scale_set"]["scale_set_id"] == first_set["id"]
    config = client.jit_config(first_set["id"], "linux-a-1")
    start_runner(client.sandbox, config, "server-a")
    assert job(control, queued["id"])["runner_id"] == config["runner"]["id"]


def test_github_com_assigns_without_acquire_and_acquire_only_confirms(
    client: ScaleSetClient, control: httpx.Client
) -> None:
    scale_set = client.create_scale_set("linux")
    session = client.open_session(scale_set["id"])
    submit(control, ["linux"])
    listen_until(client, session, lambda: kinds(session) == ["JobAssigned"], "JobAssigned without acquiring")
    request_id = session.seen[0]["runnerRequestId"]
    confirmed = checked(client.acquire(scale_set["id"], session, [request_id]), 200, "int64List")
    assert confirmed == {"count": 1, "value": [request_id]}
    error(client.acquire(scale_set["id"], session, ["x"]), 400, "ArgumentException")  # type: ignore[list-item]


def test_a_job_whose_runner_never_picks_it_up_is_requeued_and_runs_on_another(
    client: ScaleSetClient, control: httpx.Client
) -> None:
    control.put("/scalesets/settings", json={"reassign_after_s": 0.2}).raise_for_status()
    scale_set = client.create_scale_set("linux")
    session = client.open_session(scale_set["id"])
    queued = submit(control, ["linux"], duration=0)
    hung, healthy = (client.jit_config(scale_set["id"], name) for name in ("hung", "healthy"))
    control.put("/faults", json={"world": {"scaleset_pickup_stall_rate": 1.0}}).raise_for_status()
    start_runner(client.sandbox, hung, "server-hung")
    control.put("/faults", json={"world": {}}).raise_for_status()
    start_runner(client.sandbox, healthy, "server-healthy")
    listen_until(client, session, lambda: "JobStarted" in kinds(session), "the job to start on the healthy runner")
    listen_until(client, session, lambda: kinds(session)[-1] == "JobCompleted", "the job to complete")

    assert kinds(session) == ["JobAssigned", "JobCompleted", "JobAssigned", "JobStarted", "JobCompleted"]
    first_try, canceled, retry, started, completed = session.seen
    assert (canceled["result"], canceled["runnerId"], canceled["runnerName"]) == (
        "canceled",
        hung["runner"]["id"],
        "hung",
    )
    assert canceled["runnerRequestId"] == first_try["runnerRequestId"] != retry["runnerRequestId"]
    assert canceled["jobId"] == retry["jobId"] == completed["jobId"]
    assert (started["runnerName"], completed["result"]) == ("healthy", "succeeded")
    assert job(control, queued["id"])["scale_set"]["requeues"] == 1
    assert control.get("/stats").json()["counters"]["scaleset_jobs_requeued"] == 1


def test_a_job_no_runner_picks_up_is_requeued_three_times_then_fails(
    client: ScaleSetClient, control: httpx.Client
) -> None:
    control.put("/scalesets/settings", json={"reassign_after_s": 0.1}).raise_for_status()
    control.put("/faults", json={"world": {"scaleset_pickup_stall_rate": 1.0}}).raise_for_status()
    scale_set = client.create_scale_set("linux")
    session = client.open_session(scale_set["id"])
    queued = submit(control, ["linux"])
    for n in range(5):
        start_runner(client.sandbox, client.jit_config(scale_set["id"], f"hung-{n}"), f"s-{n}")
    wait_until(lambda: job(control, queued["id"])["status"] == "completed", what="the job to give up")
    listen_until(client, session, lambda: len(job_messages(session, "JobCompleted")) == 4, "four JobCompleted")
    completions = job_messages(session, "JobCompleted")
    assert [c["result"] for c in completions] == ["canceled", "canceled", "canceled", "failed"]
    assert len({c["runnerId"] for c in completions}) == 4
    assert len(job_messages(session, "JobAssigned")) == 4
    assert job_messages(session, "JobStarted") == []
    done = job(control, queued["id"])
    assert (done["conclusion"], done["runner_id"], done["scale_set"]["requeues"]) == ("failure", None, 3)
    # the fifth runner was never assigned anything; the hung ones are no longer idle
    assert statistics(client, scale_set["id"])["totalIdleRunners"] == 1


def test_canceled_and_lost_jobs_complete_as_canceled_and_failed(client: ScaleSetClient, control: httpx.Client) -> None:
    scale_set = client.create_scale_set("linux")
    session = client.open_session(scale_set["id"])
    waiting = submit(control, ["linux"])
    control.post(f"/jobs/{waiting['id']}/cancel").raise_for_status()
    running = submit(control, ["linux"])
    config = client.jit_config(scale_set["id"], "doomed")
    start_runner(client.sandbox, config, "server-doomed")
    client.sandbox.call(lambda: client.sandbox.world.server_gone("server-doomed"))
    listen_until(client, session, lambda: len(job_messages(session, "JobCompleted")) == 2, "two completions")
    canceled, failed = job_messages(session, "JobCompleted")
    assert (canceled["runnerRequestId"], canceled["result"], canceled["runnerId"]) == (
        waiting["scale_set"]["runner_request_id"],
        "canceled",
        0,
    )
    assert (failed["result"], failed["runnerId"]) == ("failed", config["runner"]["id"])
    assert job(control, running["id"])["conclusion"] == "failure"


def test_a_scale_set_github_deletes_loses_its_session_and_runners_and_its_jobs_wait(
    client: ScaleSetClient, control: httpx.Client
) -> None:
    scale_set = client.create_scale_set("linux")
    session = client.open_session(scale_set["id"])
    client.jit_config(scale_set["id"], "idle-1")
    queued = submit(control, ["linux"])
    deleted = control.delete(f"/scalesets/{scale_set['id']}")
    assert deleted.status_code == 204
    assert control.delete(f"/scalesets/{scale_set['id']}").status_code == 404
    error(client.get_message(session), 401, "VssUnauthorizedException")
    error(client.refresh_session(scale_set["id"], session), 404, "RunnerScaleSetNotFoundException")
    error(client.call("GET", f"{SCALE_SETS}/{scale_set['id']}"), 404, "RunnerScaleSetNotFoundException")
    sessions = f"{SCALE_SETS}/{scale_set['id']}/sessions"
    error(client.call("POST", sessions, body={"ownerName": "x"}), 404, "RunnerScaleSetNotFoundException")
    gh = pat_client(client.sandbox)
    assert gh.rest.actions.list_self_hosted_runners_for_org("octo-org").parsed_data.total_count == 0
    assert job(control, queued["id"])["scale_set"] is None
    assert job(control, queued["id"])["status"] == "queued"
    again = client.create_scale_set("linux")
    assert again["id"] != scale_set["id"]
    assert job(control, queued["id"])["scale_set"]["scale_set_id"] == again["id"]


def test_a_job_run_by_a_scale_set_in_a_runner_group_reports_that_group(
    client: ScaleSetClient, control: httpx.Client, webhook_receiver: WebhookReceiver
) -> None:
    group = control.post("/runner-groups", json={"scope": "orgs/octo-org", "name": "gpu"}).json()
    scale_set = client.create_scale_set("gpu", group_id=group["id"])
    start_runner(client.sandbox, client.jit_config(scale_set["id"], "gpu-1"), "server-gpu")
    queued = submit(control, ["gpu"])

    def in_progress() -> dict[str, Any] | None:
        for delivery in webhook_receiver.snapshot():
            payload = json.loads(delivery.body)
            if delivery.headers.get("X-GitHub-Event") == "workflow_job" and payload["action"] == "in_progress":
                found: dict[str, Any] = payload["workflow_job"]
                return found
        return None

    webhook_job = wait_until(in_progress, what="the in_progress webhook")
    assert (webhook_job["id"], webhook_job["runner_group_id"], webhook_job["runner_group_name"]) == (
        queued["id"],
        group["id"],
        "gpu",
    )
