"""The world between the two far ends, driven only through the real clients and the control API.

A server booted with a JIT config GitHub issued becomes a runner that takes a job, runs it, deregisters
and shuts its server off: the loop corral depends on, end to end.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import openstack.connection
import openstack.exceptions
import pytest
from githubkit import GitHub, TokenAuthStrategy
from githubkit.exception import RequestFailed

from corral_sandbox.server import Sandbox
from tests.conftest import connect
from tests.waiting import wait_until
from tests.webhook_receiver import WebhookReceiver

ORG = "octo-org"
REPO = f"{ORG}/app"


def github(sandbox: Sandbox) -> GitHub[TokenAuthStrategy]:
    return GitHub(TokenAuthStrategy(sandbox.info.pat), base_url=sandbox.info.github_url)


def jit_runner(sandbox: Sandbox, name: str, labels: list[str]) -> tuple[int, str]:
    """Ask GitHub for a JIT config the way corral does; returns (runner id, encoded config)."""
    client = github(sandbox)
    resp = client.rest.actions.generate_runner_jitconfig_for_org(
        ORG, data={"name": name, "runner_group_id": 1, "labels": labels}
    )
    return resp.parsed_data.runner.id, resp.parsed_data.encoded_jit_config


def boot(conn: openstack.connection.Connection, name: str, user_data: str) -> Any:
    image = conn.image.find_image("ubuntu-24.04-runner", ignore_missing=False)
    flavor = conn.compute.find_flavor("m1.small", ignore_missing=False)
    network = conn.network.find_network("private", ignore_missing=False)
    return conn.compute.create_server(
        name=name,
        image_id=image.id,
        flavor_id=flavor.id,
        networks=[{"uuid": network.id}],
        user_data=base64.b64encode(user_data.encode()).decode(),
    )


def server_status(conn: openstack.connection.Connection, server_id: str) -> str:
    return str(conn.compute.get_server(server_id).status)


def job(control: httpx.Client, job_id: int) -> dict[str, Any]:
    response = control.get(f"/jobs/{job_id}")
    response.raise_for_status()
    body: dict[str, Any] = response.json()
    return body


def workflow_job_actions(receiver: WebhookReceiver, job_id: int) -> list[str]:
    actions = []
    for delivery in receiver.snapshot():
        if delivery.headers.get("X-GitHub-Event") != "workflow_job":
            continue
        payload = json.loads(delivery.body)
        if payload["workflow_job"]["id"] == job_id:
            actions.append(payload["action"])
    return actions


def test_a_jit_runner_takes_a_fitting_job_runs_it_and_its_server_shuts_off(
    sandbox: Sandbox,
    os_conn: openstack.connection.Connection,
    control: httpx.Client,
    webhook_receiver: WebhookReceiver,
) -> None:
    gh = github(sandbox)
    submitted = control.post("/jobs", json={"repo": REPO, "labels": ["self-hosted", "small"], "duration": 0.2})
    assert submitted.status_code == 201
    job_id = submitted.json()["id"]
    assert submitted.json()["status"] == "queued"

    runner_id, jit = jit_runner(sandbox, "corral-small-1", ["small"])
    script = f"#!/bin/sh\n./run.sh --jitconfig {jit}\nshutdown -h now\n"
    server = boot(os_conn, "corral-small-1", script)

    done = wait_until(lambda: job(control, job_id)["status"] == "completed" and job(control, job_id), what="job")
    assert done["runner_id"] == runner_id
    assert done["conclusion"] == "success"
    assert done["queued_at"] <= done["started_at"] <= done["completed_at"]
    assert done["queued_at_s"] <= done["started_at_s"] <= done["completed_at_s"] - 0.2, "sub-second times"
    wait_until(lambda: server_status(os_conn, server.id) == "SHUTOFF", what="server SHUTOFF")
    runners = gh.rest.actions.list_self_hosted_runners_for_org(ORG).parsed_data
    assert runner_id not in [runner.id for runner in runners.runners], "ephemeral runner must deregister"
    wait_until(
        lambda: workflow_job_actions(webhook_receiver, job_id) == ["queued", "in_progress", "completed"],
        what="queued, in_progress, completed webhooks in order",
    )


def test_a_runner_does_not_take_a_job_whose_labels_it_lacks(
    sandbox: Sandbox, os_conn: openstack.connection.Connection, control: httpx.Client
) -> None:
    gh = github(sandbox)
    gpu_job = control.post("/jobs", json={"repo": REPO, "labels": ["self-hosted", "gpu"], "duration": 0}).json()
    runner_id, jit = jit_runner(sandbox, "corral-small-2", ["small"])
    boot(os_conn, "corral-small-2", f"#!/bin/sh\n./run.sh --jitconfig {jit}\n")

    def online() -> bool:
        runner = gh.rest.actions.get_self_hosted_runner_for_org(ORG, runner_id).parsed_data
        return runner.status == "online"

    wait_until(online, what="runner online")
    assert job(control, gpu_job["id"])["status"] == "queued"
    small_job = control.post("/jobs", json={"repo": REPO, "labels": ["SMALL"], "duration": 0}).json()
    wait_until(lambda: job(control, small_job["id"])["runner_id"] == runner_id, what="label match ignores case")


def test_user_data_without_a_jit_config_boots_but_no_runner_appears(
    sandbox: Sandbox, os_conn: openstack.connection.Connection, control: httpx.Client
) -> None:
    gh = github(sandbox)
    jit_runner(sandbox, "corral-small-3", ["small"])
    server = boot(os_conn, "corral-small-3", "#!/bin/sh\necho hello\n")
    wait_until(lambda: server_status(os_conn, server.id) == "ACTIVE", what="ACTIVE")
    wait_until(lambda: control.get("/stats").json()["counters"].get("servers_without_runner") == 1, what="count")
    runners = gh.rest.actions.list_self_hosted_runners_for_org(ORG).parsed_data.runners
    assert [runner.status for runner in runners] == ["offline"]


def test_a_jit_config_inside_base64_cloud_config_is_found(
    sandbox: Sandbox, os_conn: openstack.connection.Connection
) -> None:
    gh = github(sandbox)
    runner_id, jit = jit_runner(sandbox, "corral-small-4", ["small"])
    wrapped = base64.b64encode(f"JIT={jit}\n".encode()).decode()
    boot(os_conn, "corral-small-4", f"#cloud-config\nwrite_files:\n- encoding: b64\n  content: {wrapped}\n")

    def status() -> str:
        return str(gh.rest.actions.get_self_hosted_runner_for_org(ORG, runner_id).parsed_data.status)

    wait_until(lambda: status() == "online", what="runner online from a base64-wrapped config")


def test_runners_that_never_register_leave_their_server_active(
    sandbox: Sandbox, os_conn: openstack.connection.Connection, control: httpx.Client
) -> None:
    gh = github(sandbox)
    control.put("/faults", json={"world": {"never_register_rate": 1.0}}).raise_for_status()
    runner_id, jit = jit_runner(sandbox, "corral-small-5", ["small"])
    server = boot(os_conn, "corral-small-5", f"./run.sh --jitconfig {jit}")
    wait_until(lambda: server_status(os_conn, server.id) == "ACTIVE", what="ACTIVE")
    wait_until(lambda: control.get("/stats").json()["counters"].get("runners_never_registered"), what="count")
    runner = gh.rest.actions.get_self_hosted_runner_for_org(ORG, runner_id).parsed_data
    assert runner.status == "offline"


def test_boot_failures_put_servers_in_error_with_a_fault(
    sandbox: Sandbox, os_conn: openstack.connection.Connection, control: httpx.Client
) -> None:
    control.put("/faults", json={"world": {"boot_failure_rate": 1.0}}).raise_for_status()
    server = boot(os_conn, "corral-small-6", "#!/bin/sh\n")
    wait_until(lambda: server_status(os_conn, server.id) == "ERROR", what="ERROR")
    fault = os_conn.compute.get_server(server.id).fault
    assert fault and fault["code"] >= 400 and fault["message"]


def test_deleting_a_busy_runners_server_fails_its_job(
    sandbox: Sandbox, os_conn: openstack.connection.Connection, control: httpx.Client
) -> None:
    gh = github(sandbox)
    job_id = control.post("/jobs", json={"repo": REPO, "labels": ["small"], "duration": 600}).json()["id"]
    runner_id, jit = jit_runner(sandbox, "corral-small-7", ["small"])
    server = boot(os_conn, "corral-small-7", f"./run.sh --jitconfig {jit}")
    wait_until(lambda: job(control, job_id)["status"] == "in_progress", what="job in progress")
    os_conn.compute.delete_server(server.id)
    finished = wait_until(
        lambda: job(control, job_id)["status"] == "completed" and job(control, job_id), what="job ends"
    )
    assert finished["conclusion"] == "failure"
    runner = gh.rest.actions.get_self_hosted_runner_for_org(ORG, runner_id).parsed_data
    assert runner.status == "offline"


def test_server_lifetimes_stay_listed_with_their_metadata_after_the_servers_are_gone(
    sandbox: Sandbox, os_conn: openstack.connection.Connection, control: httpx.Client
) -> None:
    _, jit = jit_runner(sandbox, "corral-small-8", ["small"])
    control.post("/jobs", json={"repo": REPO, "labels": ["small"], "duration": 0}).raise_for_status()
    image = os_conn.image.find_image("ubuntu-24.04-runner", ignore_missing=False)
    flavor = os_conn.compute.find_flavor("m1.small", ignore_missing=False)
    server = os_conn.compute.create_server(
        name="corral-small-8",
        image_id=image.id,
        flavor_id=flavor.id,
        networks="none",
        metadata={"corral-pool": "small"},
        user_data=base64.b64encode(f"./run.sh --jitconfig {jit}".encode()).decode(),
    )
    wait_until(lambda: server_status(os_conn, server.id) == "SHUTOFF", what="the runner ran its job and exited")
    os_conn.compute.delete_server(server.id)
    wait_until(lambda: control.get("/stats").json()["cloud"]["servers"] == 0, what="the server gone")

    [life] = control.get("/servers").json()
    assert (life["id"], life["name"], life["metadata"]) == (server.id, "corral-small-8", {"corral-pool": "small"})
    assert life["created_s"] <= life["active_s"] <= life["stopped_s"] <= life["delete_requested_s"] <= life["gone_s"]
    assert life["errored_s"] is None


def test_a_trace_queues_its_jobs_at_their_arrival_times(sandbox: Sandbox, control: httpx.Client) -> None:
    trace = {"jobs": [{"at": 0.0, "repo": REPO, "labels": ["a"]}, {"at": 0.3, "repo": REPO, "labels": ["b"]}]}
    assert control.post("/trace", json=trace).json() == {"scheduled": 2, "last_arrival_s": 0.3}
    jobs = wait_until(lambda: len(control.get("/jobs").json()) == 2 and control.get("/jobs").json(), what="jobs")
    first, second = sorted(jobs, key=lambda j: j["queued_at"])
    assert [first["labels"], second["labels"]] == [["a"], ["b"]]
    assert control.get("/jobs", params={"status": "queued"}).json() == jobs


def test_reset_forgets_jobs_faults_and_counters(sandbox: Sandbox, control: httpx.Client) -> None:
    control.post("/jobs", json={"repo": REPO, "labels": ["x"]}).raise_for_status()
    control.put("/faults", json={"world": {"boot_failure_rate": 0.5}}).raise_for_status()
    assert control.post("/reset").status_code == 204
    assert control.get("/jobs").json() == []
    assert control.get("/faults").json()["world"]["boot_failure_rate"] == 0.0
    assert control.get("/stats").json()["api_calls"]["github"] == {}


def test_bad_fault_specs_are_refused_with_the_field_named(sandbox: Sandbox, control: httpx.Client) -> None:
    response = control.put("/faults", json={"world": {"boot_failure_rate": 3}})
    assert response.status_code == 400
    assert "boot_failure_rate" in response.json()["message"]


def test_injected_endpoint_errors_reach_the_client_and_are_counted(
    sandbox: Sandbox, os_conn: openstack.connection.Connection, control: httpx.Client
) -> None:
    spec = {"endpoints": [{"match": "openstack GET /compute/v2.1/flavors*", "error_rate": 1.0, "status": 503}]}
    control.put("/faults", json=spec).raise_for_status()
    try:
        list(os_conn.compute.flavors())
    except openstack.exceptions.HttpException as exc:
        assert exc.status_code == 503
    else:
        raise AssertionError("the injected 503 did not reach openstacksdk")
    stats = control.get("/stats").json()
    assert stats["counters"]["openstack_injected_errors"] >= 1
    assert stats["injected_errors"]["openstack"]["GET /compute/v2.1/flavors/detail"] >= 1
    assert any(key.startswith("GET /compute/v2.1/flavors") for key in stats["api_calls"]["openstack"])


def test_a_second_cloud_is_apart_from_the_first_but_its_runners_reach_the_same_github(
    sandbox: Sandbox, os_conn: openstack.connection.Connection, control: httpx.Client
) -> None:
    """Another region or provider: its own Keystone, servers, quota, faults and records, while a runner
    booted there takes jobs from the same GitHub."""
    second = connect(sandbox, sandbox.info.second_cloud_name)
    try:
        assert str(second.compute.get_endpoint()).startswith(sandbox.info.second_openstack_url)
        control.put("/quota", params={"cloud": "two"}, json={"instances": 1}).raise_for_status()
        submitted = control.post("/jobs", json={"repo": REPO, "labels": ["small"], "duration": 0}).json()
        runner_id, jit = jit_runner(sandbox, "corral-small-5", ["small"])
        server = boot(second, "corral-small-5", f"#!/bin/sh\n./run.sh --jitconfig {jit}\n")
        wait_until(lambda: job(control, submitted["id"])["runner_id"] == runner_id, what="the job taken")
        wait_until(lambda: server_status(second, server.id) == "SHUTOFF", what="its server shut off")
        assert [s.id for s in os_conn.compute.servers()] == [], "the first cloud has no such server"
        with pytest.raises(openstack.exceptions.ForbiddenException, match="Quota exceeded for instances"):
            boot(second, "corral-small-6", "#!/bin/sh\n")
        assert boot(os_conn, "corral-small-6", "#!/bin/sh\n").id, "the first cloud's quota is its own"
        control.put("/faults", json={"endpoints": [{"match": "openstack-two *", "error_rate": 1.0}]})
        with pytest.raises(openstack.exceptions.HttpException) as refused:
            second.compute.delete_server(server.id)
        assert refused.value.status_code == 500
        assert len(list(os_conn.compute.servers())) == 1, "a fault on the second cloud leaves the first alone"
        history = control.get("/servers", params={"cloud": "two"}).json()
        assert [life["name"] for life in history] == ["corral-small-5"]
        assert control.get("/servers", params={"cloud": "three"}).status_code == 404
        clouds = control.get("/stats").json()["clouds"]
        assert (clouds["one"]["servers"], clouds["two"]["servers"]) == (1, 1)
    finally:
        second.close()


def test_a_server_lost_mid_job_fails_its_job_after_githubs_lost_contact_delay(
    sandbox: Sandbox, os_conn: openstack.connection.Connection, control: httpx.Client
) -> None:
    """`lost_mid_job_rate: 1`: halfway through its job the runner's server goes to ERROR (its host failed);
    GitHub fails the job `lost_contact_delay` later, and the control API says it was the machine."""
    control.put("/faults", json={"world": {"lost_mid_job_rate": 1.0}}).raise_for_status()
    control.put("/timings", json={"lost_contact_delay": 0.5}).raise_for_status()
    job_id = control.post("/jobs", json={"repo": REPO, "labels": ["small"], "duration": 2.0}).json()["id"]
    runner_id, jit = jit_runner(sandbox, "corral-small-lost", ["small"])
    server = boot(os_conn, "corral-small-lost", f"./run.sh --jitconfig {jit}")
    failed = wait_until(lambda: (j := job(control, job_id))["status"] == "completed" and j, what="job ends")
    assert (failed["conclusion"], failed["runner_lost"], failed["run_attempt"]) == ("failure", True, 1)
    # Timers never fire early: the server died 1 s into the job, GitHub gave up 0.5 s after that.
    assert failed["completed_at_s"] - failed["started_at_s"] >= 1.5
    lost = os_conn.compute.get_server(server.id)
    assert lost.status == "ERROR" and "host failed" in lost.fault["message"]
    gh = github(sandbox)
    runner = gh.rest.actions.get_self_hosted_runner_for_org(ORG, runner_id).parsed_data
    assert (runner.status, runner.busy) == ("offline", False)
    counters = control.get("/stats").json()["counters"]
    assert (counters["servers_lost_mid_job"], counters["openstack_servers_crashed"]) == (1, 1)


def test_a_job_that_fails_on_its_own_fails_with_its_runner_alive_to_the_end(
    sandbox: Sandbox, os_conn: openstack.connection.Connection, control: httpx.Client
) -> None:
    job_id = control.post(
        "/jobs", json={"repo": REPO, "labels": ["small"], "duration": 0.1, "conclusion": "failure"}
    ).json()["id"]
    _, jit = jit_runner(sandbox, "corral-small-red", ["small"])
    server = boot(os_conn, "corral-small-red", f"./run.sh --jitconfig {jit}")
    failed = wait_until(lambda: (j := job(control, job_id))["status"] == "completed" and j, what="job ends")
    assert (failed["conclusion"], failed["runner_lost"]) == ("failure", False)
    # The runner ran it to the end, deregistered and shut its machine down, as after a success.
    wait_until(lambda: server_status(os_conn, server.id) == "SHUTOFF", what="server SHUTOFF")


def test_a_rerun_queues_the_job_again_as_a_new_job_in_the_runs_next_attempt(
    sandbox: Sandbox, control: httpx.Client, webhook_receiver: WebhookReceiver
) -> None:
    gh = github(sandbox)
    first = control.post("/jobs", json={"repo": REPO, "labels": ["gpu"], "duration": 0}).json()
    owner, name = REPO.split("/")
    with pytest.raises(RequestFailed) as running:
        gh.rest.actions.re_run_job_for_workflow_run(owner, name, first["id"])
    assert running.value.response.status_code == 403  # its run is not completed
    control.post(f"/jobs/{first['id']}/cancel").raise_for_status()
    assert gh.rest.actions.re_run_job_for_workflow_run(owner, name, first["id"]).status_code == 201
    (again,) = [j for j in control.get("/jobs").json() if j["id"] != first["id"]]
    assert (again["run_id"], again["run_attempt"], again["status"]) == (first["run_id"], 2, "queued")
    assert (again["labels"], again["workflow_name"]) == (first["labels"], first["workflow_name"])
    latest = gh.rest.actions.list_jobs_for_workflow_run(owner, name, first["run_id"]).parsed_data
    every = gh.rest.actions.list_jobs_for_workflow_run(owner, name, first["run_id"], filter_="all").parsed_data
    assert [(j.id, j.run_attempt) for j in latest.jobs] == [(again["id"], 2)]
    assert [(j.id, j.run_attempt) for j in every.jobs] == [(first["id"], 1), (again["id"], 2)]
    assert gh.rest.actions.get_workflow_run(owner, name, first["run_id"]).parsed_data.run_attempt == 2
    wait_until(lambda: workflow_job_actions(webhook_receiver, again["id"]) == ["queued"], what="its queued webhook")
    (queued,) = [
        json.loads(d.body)["workflow_job"]
        for d in webhook_receiver.snapshot()
        if d.headers.get("X-GitHub-Event") == "workflow_job" and json.loads(d.body)["workflow_job"]["id"] == again["id"]
    ]
    assert (queued["run_id"], queued["run_attempt"]) == (first["run_id"], 2)
    with pytest.raises(RequestFailed) as unknown:
        gh.rest.actions.re_run_job_for_workflow_run(owner, name, 1)
    assert unknown.value.response.status_code == 404
