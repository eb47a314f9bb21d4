"""Self-hosted runner endpoints at org, repo and enterprise scope, checked with githubkit's models."""

from __future__ import annotations

import base64
import json
import re

import httpx
import pytest
from githubkit.exception import RequestFailed
from githubkit_schemas.v2026_03_10.models import Runner

from corral_sandbox.server import Sandbox
from tests.sandbox.github_support import installation_client, jit_config, pat_client


def test_jit_runner_is_listed_offline_with_read_only_and_custom_labels(sandbox: Sandbox) -> None:
    gh = installation_client(sandbox, "octo-org")
    response = gh.rest.actions.generate_runner_jitconfig_for_org(
        "octo-org", data={"name": "corral-small-1", "runner_group_id": 1, "labels": ["small", "self-hosted"]}
    )
    assert response.status_code == 201
    created = response.parsed_data
    listed = gh.rest.actions.list_self_hosted_runners_for_org("octo-org").parsed_data
    assert listed.total_count == 1
    runner = listed.runners[0]
    assert (runner.id, runner.name, runner.status, runner.busy) == (
        created.runner.id,
        "corral-small-1",
        "offline",
        False,
    )
    assert [(label.name, label.type) for label in runner.labels] == [
        ("self-hosted", "read-only"),
        ("Linux", "read-only"),
        ("X64", "read-only"),
        ("small", "custom"),
    ]
    assert gh.rest.actions.get_self_hosted_runner_for_org("octo-org", runner.id).parsed_data.name == "corral-small-1"


def test_encoded_jit_config_has_the_runner_files_and_is_unique(sandbox: Sandbox) -> None:
    gh = pat_client(sandbox)
    runner_id, encoded = jit_config(gh, "octo-org", "a", ["small"])
    _, other = jit_config(gh, "octo-org", "b", ["small"])
    files = json.loads(base64.b64decode(encoded))
    assert set(files) == {".runner", ".credentials", ".credentials_rsaparams"}
    runner_file = json.loads(base64.b64decode(files[".runner"]))
    assert runner_file["AgentId"] == str(runner_id) and runner_file["AgentName"] == "a"
    assert runner_file["GitHubUrl"].endswith("/octo-org")
    rsa_params = json.loads(base64.b64decode(files[".credentials_rsaparams"]))
    other_params = json.loads(base64.b64decode(json.loads(base64.b64decode(other))[".credentials_rsaparams"]))
    assert len(base64.b64decode(rsa_params["d"])) == 256
    assert rsa_params["d"] != other_params["d"]


def test_duplicate_runner_name_conflicts(sandbox: Sandbox) -> None:
    gh = pat_client(sandbox)
    jit_config(gh, "octo-org", "dup", ["small"])
    with pytest.raises(RequestFailed) as failure:
        jit_config(gh, "octo-org", "dup", ["small"])
    assert failure.value.response.status_code == 409
    assert "already exists" in failure.value.response.json()["message"]


@pytest.mark.parametrize(
    "body",
    [
        {"runner_group_id": 1, "labels": ["x"]},
        {"name": "r", "labels": ["x"]},
        {"name": "r", "runner_group_id": 1, "labels": []},
        {"name": "r", "runner_group_id": 1, "labels": [f"l{i}" for i in range(101)]},
    ],
)
def test_invalid_jit_requests_are_422(sandbox: Sandbox, body: dict[str, object]) -> None:
    response = httpx.post(
        sandbox.info.github_url + "/orgs/octo-org/actions/runners/generate-jitconfig",
        json=body,
        headers={"Authorization": f"token {sandbox.info.pat}"},
    )
    assert response.status_code == 422
    assert response.json()["message"].startswith("Invalid request.")


def test_pages_link_exactly_as_github_does(sandbox: Sandbox) -> None:
    gh = pat_client(sandbox)
    for i in range(7):
        jit_config(gh, "octo-org", f"r{i}", ["small"])
    first = gh.rest.actions.list_self_hosted_runners_for_org("octo-org", per_page=3)
    link = first.headers["link"]
    base = re.match(r"<([^?]+)\?", link)
    assert base is not None and re.search(r"/organizations/\d+/actions/runners$", base.group(1))
    url = base.group(1)
    assert link == f'<{url}?per_page=3&page=2>; rel="next", <{url}?per_page=3&page=3>; rel="last"'
    middle = gh.rest.actions.list_self_hosted_runners_for_org("octo-org", per_page=3, page=2)
    assert middle.headers["link"] == (
        f'<{url}?per_page=3&page=1>; rel="prev", <{url}?per_page=3&page=3>; rel="next", '
        f'<{url}?per_page=3&page=3>; rel="last", <{url}?per_page=3&page=1>; rel="first"'
    )
    last = gh.rest.actions.list_self_hosted_runners_for_org("octo-org", per_page=3, page=3)
    assert [r.name for r in last.parsed_data.runners] == ["r6"]
    assert last.headers["link"] == f'<{url}?per_page=3&page=2>; rel="prev", <{url}?per_page=3&page=1>; rel="first"'
    walked = list(
        gh.rest.paginate(
            gh.rest.actions.list_self_hosted_runners_for_org,
            map_func=lambda r: r.parsed_data.runners,
            org="octo-org",
            per_page=3,
        )
    )
    assert [r.name for r in walked] == [f"r{i}" for i in range(7)]


def test_per_page_defaults_to_30_and_caps_at_100(sandbox: Sandbox) -> None:
    gh = pat_client(sandbox)
    for i in range(101):
        jit_config(gh, "big-org", f"r{i}", ["small"])
    assert len(gh.rest.actions.list_self_hosted_runners_for_org("big-org").parsed_data.runners) == 30
    capped = gh.rest.actions.list_self_hosted_runners_for_org("big-org", per_page=500).parsed_data
    assert (capped.total_count, len(capped.runners)) == (101, 100)


def test_delete_runner(sandbox: Sandbox) -> None:
    gh = pat_client(sandbox)
    runner_id, _ = jit_config(gh, "octo-org", "gone", ["small"])
    assert gh.rest.actions.delete_self_hosted_runner_from_org("octo-org", runner_id).status_code == 204
    with pytest.raises(RequestFailed) as failure:
        gh.rest.actions.get_self_hosted_runner_for_org("octo-org", runner_id)
    assert failure.value.response.status_code == 404


def test_busy_runner_cannot_be_deleted(sandbox: Sandbox) -> None:
    gh = pat_client(sandbox)
    runner_id, encoded = jit_config(gh, "octo-org", "busy-one", ["small"])
    github = sandbox.world.github
    sandbox.call(lambda: github.submit_job("octo-org/app", ["self-hosted", "small"], 60.0))
    sandbox.call(lambda: github.connect_runner(github.runner_for_user_data(encoded.encode()) or 0))
    assert gh.rest.actions.get_self_hosted_runner_for_org("octo-org", runner_id).parsed_data.busy
    with pytest.raises(RequestFailed) as failure:
        gh.rest.actions.delete_self_hosted_runner_from_org("octo-org", runner_id)
    assert failure.value.response.status_code == 422
    assert failure.value.response.json()["message"] == 'Bad request - Runner "busy-one" is still running a job'


def test_repo_and_enterprise_scopes_are_separate(sandbox: Sandbox) -> None:
    gh = pat_client(sandbox)
    repo_runner = gh.rest.actions.generate_runner_jitconfig_for_repo(
        "octo-org", "app", data={"name": "r", "runner_group_id": 1, "labels": ["small"]}
    ).parsed_data.runner
    listed = gh.rest.actions.list_self_hosted_runners_for_repo("octo-org", "app")
    assert [r.id for r in listed.parsed_data.runners] == [repo_runner.id]
    assert gh.rest.actions.list_self_hosted_runners_for_org("octo-org").parsed_data.total_count == 0
    created = gh.request(
        "POST",
        "/enterprises/octo-corp/actions/runners/generate-jitconfig",
        json={"name": "r", "runner_group_id": 1, "labels": ["small"]},
    )
    assert created.status_code == 201
    page = gh.request("GET", "/enterprises/octo-corp/actions/runners").json()
    assert [Runner.model_validate(r).name for r in page["runners"]] == ["r"]


def test_tokens_downloads_and_groups(sandbox: Sandbox) -> None:
    gh = pat_client(sandbox)
    registration = gh.rest.actions.create_registration_token_for_org("octo-org")
    removal = gh.rest.actions.create_remove_token_for_org("octo-org")
    assert registration.status_code == removal.status_code == 201
    assert re.fullmatch(r"[A-Z0-9]{29}", registration.parsed_data.token)
    downloads = gh.rest.actions.list_runner_applications_for_org("octo-org").parsed_data
    assert {(d.os, d.architecture) for d in downloads} >= {("linux", "x64"), ("linux", "arm64")}
    groups = gh.rest.actions.list_self_hosted_runner_groups_for_org("octo-org").parsed_data
    assert [(g.id, g.name, g.default) for g in groups.runner_groups] == [(1, "Default", True)]
    assert gh.rest.actions.get_self_hosted_runner_group_for_org("octo-org", 1).parsed_data.name == "Default"


def test_custom_labels_can_be_changed_but_read_only_ones_stay(sandbox: Sandbox) -> None:
    gh = pat_client(sandbox)
    runner_id, _ = jit_config(gh, "octo-org", "labelled", ["small"])
    added = gh.rest.actions.add_custom_labels_to_self_hosted_runner_for_org(
        "octo-org", runner_id, data={"labels": ["gpu"]}
    ).parsed_data
    assert [label.name for label in added.labels] == ["self-hosted", "Linux", "X64", "small", "gpu"]
    replaced = gh.rest.actions.set_custom_labels_for_self_hosted_runner_for_org(
        "octo-org", runner_id, data={"labels": ["large"]}
    ).parsed_data
    assert [label.name for label in replaced.labels] == ["self-hosted", "Linux", "X64", "large"]
    cleared = gh.rest.actions.remove_all_custom_labels_from_self_hosted_runner_for_org("octo-org", runner_id)
    assert [label.name for label in cleared.parsed_data.labels] == ["self-hosted", "Linux", "X64"]
