"""The Actions service's admin routes: runner groups, scale sets, JIT configs for a set's runners, runners.

Paths, query parameters, bodies and status codes as `actions/scaleset`'s client.go uses them; errors as GitHub
answers them where its clients' issues quote the answer (`RunnerScaleSetExistsException` 400,
`RunnerScaleSetNotFoundException` 404), and with the exception names the Go client matches on otherwise.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from corral_sandbox.server import Sandbox
from tests.sandbox.github_support import jit_config, pat_client
from tests.sandbox.scaleset_support import (
    AGENTS,
    FAST,
    SCALE_SETS,
    ScaleSetClient,
    checked,
    error,
    start_runner,
)
from tests.waiting import wait_until

GROUPS = "_apis/runtime/runnergroups/"


@pytest.fixture
def client(sandbox: Sandbox, control: httpx.Client) -> ScaleSetClient:
    control.put("/scalesets/settings", json=FAST).raise_for_status()
    return ScaleSetClient(sandbox).connect()


def groups(client: ScaleSetClient, name: str | None = None) -> list[dict[str, Any]]:
    found = checked(client.call("GET", GROUPS, params={"groupName": name} if name else None), 200, "runnerGroupList")
    assert found["count"] == len(found["value"])
    value: list[dict[str, Any]] = found["value"]
    return value


def test_runner_groups_default_always_and_others_from_the_control_api(
    client: ScaleSetClient, control: httpx.Client
) -> None:
    assert (
        groups(client, "Default")
        == groups(client, "default")
        == [{"id": 1, "name": "Default", "size": 0, "isDefaultGroup": True}]
    )
    assert groups(client, "gpu") == []
    created = control.post("/runner-groups", json={"scope": "orgs/octo-org", "name": "gpu"})
    assert created.status_code == 201
    gpu = created.json()
    assert control.post("/runner-groups", json={"scope": "orgs/octo-org", "name": "GPU"}).status_code == 409
    assert control.post("/runner-groups", json={"scope": "repos/octo-org/app", "name": "x"}).status_code == 422
    assert groups(client, "gpu") == [{"id": gpu["id"], "name": "gpu", "size": 0, "isDefaultGroup": False}]
    assert [g["name"] for g in groups(client)] == ["Default", "gpu"]
    other_org = ScaleSetClient(client.sandbox, "other-org").connect()
    assert groups(other_org, "gpu") == []
    # `size` counts the group's runners
    scale_set = client.create_scale_set("gpu-set", group_id=gpu["id"])
    client.jit_config(scale_set["id"], "gpu-runner-1")
    assert groups(client, "gpu")[0]["size"] == 1


def test_scale_set_create_read_update_delete(client: ScaleSetClient) -> None:
    created = client.create_scale_set("linux-x64", labels=["linux-x64", "self-hosted"])
    assert created["name"] == "linux-x64"
    assert (created["runnerGroupId"], created["runnerGroupName"]) == (1, "Default")
    assert created["labels"] == [{"type": "System", "name": "linux-x64"}, {"type": "System", "name": "self-hosted"}]
    assert created["runnerSetting"] == {"ephemeral": True, "isElastic": True, "disableUpdate": True}
    assert created["runnerJitConfigUrl"] == f"{client.service_url}{SCALE_SETS}/{created['id']}/generatejitconfig"
    assert set(created["statistics"].values()) == {0}

    def find(params: dict[str, Any]) -> list[dict[str, Any]]:
        listed = checked(client.call("GET", SCALE_SETS, params=params), 200, "runnerScaleSetList")
        assert listed["count"] == len(listed["value"])
        value: list[dict[str, Any]] = listed["value"]
        return value

    assert find({"runnerGroupId": 1, "name": "linux-x64"}) == [created]
    assert find({"runnerGroupId": 1, "name": "LINUX-X64"}) == [created]
    assert find({"runnerGroupId": 1, "name": "other"}) == []
    assert find({"runnerGroupId": 1}) == [created]
    by_id = checked(client.call("GET", f"{SCALE_SETS}/{created['id']}"), 200, "runnerScaleSet")
    assert by_id == created

    patch = {"name": "linux", "labels": [{"name": "linux", "type": "System"}], "RunnerSetting": {}}
    updated = checked(client.call("PATCH", f"{SCALE_SETS}/{created['id']}", body=patch), 200, "runnerScaleSet")
    assert (updated["id"], updated["name"], updated["labels"]) == (
        created["id"],
        "linux",
        [{"type": "System", "name": "linux"}],
    )
    assert updated["runnerSetting"] == {"ephemeral": False, "isElastic": False, "disableUpdate": False}

    deleted = client.call("DELETE", f"{SCALE_SETS}/{created['id']}")
    assert (deleted.status_code, deleted.content) == (204, b"")
    for method in ("GET", "DELETE", "PATCH"):
        error(client.call(method, f"{SCALE_SETS}/{created['id']}", body={}), 404, "RunnerScaleSetNotFoundException")
    assert find({"runnerGroupId": 1}) == []


def test_scale_set_names_are_unique_in_a_runner_group_only(client: ScaleSetClient, control: httpx.Client) -> None:
    first = client.create_scale_set("linux")
    body = {"name": "Linux", "runnerGroupId": 1, "labels": []}
    refused = error(client.call("POST", SCALE_SETS, body=body), 400, "RunnerScaleSetExistsException")
    assert refused["typeName"] == (
        "GitHub.Actions.Runtime.WebApi.RunnerScaleSetExistsException, GitHub.Actions.Runtime.WebApi"
    )
    gpu = control.post("/runner-groups", json={"scope": "orgs/octo-org", "name": "gpu"}).json()
    elsewhere = client.create_scale_set("linux", group_id=gpu["id"])
    assert elsewhere["id"] != first["id"] and elsewhere["runnerGroupName"] == "gpu"
    error(client.call("PATCH", f"{SCALE_SETS}/{elsewhere['id']}", body={"runnerGroupId": 1}), 400, "ExistsException")
    # a scale set created with no labels is labelled with its name
    bare = checked(client.call("POST", SCALE_SETS, body={"name": "bare"}), 200, "runnerScaleSet")
    assert bare["labels"] == [{"type": "System", "name": "bare"}]


def test_scale_set_requests_github_cannot_use(client: ScaleSetClient) -> None:
    error(client.call("POST", SCALE_SETS, body={"runnerGroupId": 1}), 400, "ArgumentException")
    error(client.call("POST", SCALE_SETS, body={"name": "x", "labels": [{"type": "System"}]}), 400, "ArgumentException")
    error(
        client.call("POST", SCALE_SETS, body={"name": "x", "runnerGroupId": 99}), 404, "TaskAgentPoolNotFoundException"
    )
    error(client.call("GET", SCALE_SETS, params={"runnerGroupId": "one"}), 400, "ArgumentException")
    error(client.call("GET", f"{SCALE_SETS}/not-a-number"), 404, "RunnerScaleSetNotFoundException")
    broken = client.http.post(
        client.url(SCALE_SETS), headers={"Authorization": f"Bearer {client.admin_token}"}, content=b"{not json"
    )
    error(broken, 400, "ArgumentException")
    # another tenant's scale set is not found from here
    theirs = ScaleSetClient(client.sandbox, "other-org").connect().create_scale_set("theirs")
    error(client.call("GET", f"{SCALE_SETS}/{theirs['id']}"), 404, "RunnerScaleSetNotFoundException")


def test_jit_config_registers_a_runner_of_the_scale_set(client: ScaleSetClient) -> None:
    scale_set = client.create_scale_set("linux")
    config = client.jit_config(scale_set["id"], "linux-runner-1")
    runner = config["runner"]
    assert (runner["name"], runner["runnerScaleSetId"]) == ("linux-runner-1", scale_set["id"])
    response = client.call(
        "POST", f"{SCALE_SETS}/{scale_set['id']}/generatejitconfig", body={"name": "linux-runner-1", "workFolder": "_w"}
    )
    error(response, 409, "AgentExistsException")
    error(client.call("POST", f"{SCALE_SETS}/{scale_set['id']}/generatejitconfig", body={}), 400, "ArgumentException")
    error(client.call("POST", f"{SCALE_SETS}/424242/generatejitconfig", body={"name": "x"}), 404, "NotFoundException")
    # GitHub lists it among the organisation's runners, offline until a guest starts it
    gh = pat_client(client.sandbox)
    listed = gh.rest.actions.list_self_hosted_runners_for_org("octo-org").parsed_data
    assert [(r.id, r.name, r.status) for r in listed.runners] == [(runner["id"], "linux-runner-1", "offline")]
    stats = checked(client.call("GET", f"{SCALE_SETS}/{scale_set['id']}"), 200, "runnerScaleSet")["statistics"]
    assert (stats["totalRegisteredRunners"], stats["totalIdleRunners"]) == (1, 0)
    start_runner(client.sandbox, config, "server-1")
    stats = checked(client.call("GET", f"{SCALE_SETS}/{scale_set['id']}"), 200, "runnerScaleSet")["statistics"]
    assert (stats["totalRegisteredRunners"], stats["totalIdleRunners"], stats["totalBusyRunners"]) == (1, 1, 0)


def test_runners_by_id_and_name_and_their_removal(client: ScaleSetClient, control: httpx.Client) -> None:
    scale_set = client.create_scale_set("linux")
    mine = client.jit_config(scale_set["id"], "linux-runner-1")["runner"]
    gh = pat_client(client.sandbox)
    classic_id, _ = jit_config(gh, "octo-org", "classic-1", ["small"])
    assert checked(client.call("GET", f"{AGENTS}/{mine['id']}"), 200, "runnerReference") == mine
    by_name = checked(client.call("GET", AGENTS, params={"agentName": "linux-runner-1"}), 200, "runnerReferenceList")
    assert by_name == {"count": 1, "value": [mine]}
    classic = checked(client.call("GET", AGENTS, params={"agentName": "classic-1"}), 200, "runnerReferenceList")
    assert classic["value"] == [{"id": classic_id, "name": "classic-1", "runnerScaleSetId": 0}]
    assert checked(client.call("GET", AGENTS, params={"agentName": "nobody"}), 200, "runnerReferenceList")["count"] == 0
    assert checked(client.call("GET", AGENTS), 200, "runnerReferenceList")["count"] == 2
    error(client.call("GET", f"{AGENTS}/987654"), 404, "AgentNotFoundException")

    # busy: a runner running a job cannot be removed
    config = client.jit_config(scale_set["id"], "linux-runner-2")
    control.post("/jobs", json={"repo": "octo-org/app", "labels": ["linux"], "duration": 600}).raise_for_status()
    start_runner(client.sandbox, config, "server-2")
    busy = config["runner"]["id"]
    wait_until(
        lambda: client.sandbox.call(lambda: client.sandbox.world.github.scheduler.runners[busy].busy), what="busy"
    )
    error(client.call("DELETE", f"{AGENTS}/{busy}"), 400, "JobStillRunningException")

    assert client.call("DELETE", f"{AGENTS}/{mine['id']}").status_code == 204
    error(client.call("GET", f"{AGENTS}/{mine['id']}"), 404, "AgentNotFoundException")
    error(client.call("DELETE", f"{AGENTS}/{mine['id']}"), 404, "AgentNotFoundException")
    listed = gh.rest.actions.list_self_hosted_runners_for_org("octo-org").parsed_data
    assert sorted(r.name for r in listed.runners) == ["classic-1", "linux-runner-2"]


def test_doubled_slashes_are_served_and_answers_carry_an_activity_id(client: ScaleSetClient) -> None:
    url = f"{client.service_url}/{SCALE_SETS}?api-version=6.0-preview"
    assert "//_apis" in url
    response = client.http.get(url, headers={"Authorization": f"Bearer {client.admin_token}"})
    assert checked(response, 200, "runnerScaleSetList")["count"] == 0
    assert len(response.headers["ActivityId"]) == 36


def test_endpoint_faults_reach_the_actions_service_in_its_error_shape(
    client: ScaleSetClient, control: httpx.Client
) -> None:
    assert control.get("/scalesets/settings").json()["long_poll_s"] == FAST["long_poll_s"]
    fault = {"match": "github GET /_actions/{tenant}/_apis/runtime/runnerscalesets", "error_rate": 1.0, "count": 1}
    control.put("/faults", json={"endpoints": [{**fault, "status": 503}]}).raise_for_status()
    error(client.call("GET", SCALE_SETS), 503, "Exception")
    assert client.call("GET", SCALE_SETS).status_code == 200
    calls = control.get("/stats").json()["api_calls"]["github"]
    assert calls["GET /_actions/{tenant}/_apis/runtime/runnerscalesets"] == 2
    assert calls["POST /actions/runner-registration"] == 1
