"""Runners that read their JIT config from user data, take jobs, finish them and leave, as on GitHub."""

from __future__ import annotations

import base64
import gzip
from typing import Any

import httpx
import pytest

from corral_sandbox.server import Sandbox
from tests.sandbox.github_support import installation_client, jit_config, pat_client
from tests.waiting import wait_until

CLOUD_CONFIG = """#cloud-config
write_files:
  - path: /opt/runner/start.sh
    permissions: "0755"
    encoding: b64
    content: {content}
runcmd:
  - [/opt/runner/start.sh]
"""


def _start_script(encoded: str) -> bytes:
    return f"#!/bin/sh\nexec /opt/runner/run.sh --jitconfig {encoded}\n".encode()


def _boot(sandbox: Sandbox, user_data: bytes) -> int | None:
    """What a guest does at boot: hand its user data to GitHub, then connect the runner it names."""
    github = sandbox.world.github

    def boot() -> int | None:
        runner_id = github.runner_for_user_data(user_data)
        if runner_id is not None:
            github.connect_runner(runner_id)
        return runner_id

    return sandbox.call(boot)


def _submit(control: httpx.Client, labels: list[str], duration: float = 0.05, repo: str = "octo-org/app") -> Any:
    response = control.post("/jobs", json={"repo": repo, "labels": labels, "duration": duration})
    response.raise_for_status()
    return response.json()


def _job(control: httpx.Client, job_id: int) -> Any:
    return control.get(f"/jobs/{job_id}").json()


def test_runner_found_in_cloud_config_runs_one_job_and_deregisters(sandbox: Sandbox, control: httpx.Client) -> None:
    gh = installation_client(sandbox, "octo-org")
    runner_id, encoded = jit_config(gh, "octo-org", "corral-1", ["small"])
    job = _submit(control, ["self-hosted", "SMALL"])
    content = base64.b64encode(_start_script(encoded)).decode()
    assert _boot(sandbox, CLOUD_CONFIG.format(content=content).encode()) == runner_id
    done = wait_until(lambda: (j := _job(control, job["id"]))["status"] == "completed" and j, what="job completed")
    assert (done["conclusion"], done["runner_id"], done["runner_name"]) == ("success", runner_id, "corral-1")
    assert gh.rest.actions.list_self_hosted_runners_for_org("octo-org").parsed_data.total_count == 0
    parsed = gh.rest.actions.get_job_for_workflow_run("octo-org", "app", job["id"]).parsed_data
    assert (parsed.status, parsed.conclusion, parsed.runner_group_name) == ("completed", "success", "Default")
    assert [step.name for step in parsed.steps or []] == ["Set up job", "Run workload", "Complete job"]


def test_config_is_found_gzipped_and_used_only_once(sandbox: Sandbox) -> None:
    runner_id, encoded = jit_config(pat_client(sandbox), "octo-org", "zipped", ["small"])
    user_data = gzip.compress(_start_script(encoded))
    assert _boot(sandbox, base64.b64encode(user_data)) == runner_id
    assert _boot(sandbox, user_data) is None
    assert _boot(sandbox, b"#!/bin/sh\necho no runner here\n") is None


def test_idle_runner_takes_a_job_submitted_later_only_if_labels_fit(sandbox: Sandbox, control: httpx.Client) -> None:
    gh = pat_client(sandbox)
    runner_id, encoded = jit_config(gh, "octo-org", "idle", ["small"])
    _boot(sandbox, encoded.encode())
    online = gh.rest.actions.get_self_hosted_runner_for_org("octo-org", runner_id).parsed_data
    assert (online.status, online.busy) == ("online", False)
    misfit = _submit(control, ["self-hosted", "gpu"], duration=60)
    other_org = _submit(control, ["self-hosted", "small"], duration=60, repo="other-org/app")
    fit = _submit(control, ["self-hosted", "linux", "x64", "small"], duration=60)
    assert _job(control, fit["id"])["status"] == "in_progress"
    assert _job(control, misfit["id"])["status"] == "queued"
    assert _job(control, other_org["id"])["status"] == "queued"
    assert gh.rest.actions.get_self_hosted_runner_for_org("octo-org", runner_id).parsed_data.busy


def test_runner_takes_the_oldest_fitting_queued_job(sandbox: Sandbox, control: httpx.Client) -> None:
    older = _submit(control, ["self-hosted"], duration=60)
    newer = _submit(control, ["self-hosted"], duration=60)
    _, encoded = jit_config(pat_client(sandbox), "octo-org", "r", ["small"])
    _boot(sandbox, encoded.encode())
    assert _job(control, older["id"])["status"] == "in_progress"
    assert _job(control, newer["id"])["status"] == "queued"


@pytest.mark.parametrize(
    ("choice", "takers"),
    [
        (None, ["first", "second", "third"]),
        ("oldest", ["first", "second", "third"]),
        ("newest", ["third", "second", "first"]),
    ],
)
def test_a_queued_job_goes_to_the_idle_runner_the_world_fault_runner_choice_names(
    sandbox: Sandbox, control: httpx.Client, choice: str | None, takers: list[str]
) -> None:
    """GitHub promises no order among the idle runners a job fits: the sandbox hands it to the one idle
    longest, or with `runner_choice: newest` to the one that came online last (so no test leans on either)."""
    if choice is not None:
        control.put("/faults", json={"world": {"runner_choice": choice}}).raise_for_status()
    assert control.get("/faults").json()["world"]["runner_choice"] == (choice or "oldest")
    gh = pat_client(sandbox)
    names: dict[int, str] = {}
    for name in ("first", "second", "third"):
        runner_id, encoded = jit_config(gh, "octo-org", name, ["small"])
        _boot(sandbox, encoded.encode())
        names[runner_id] = name
    jobs = [_submit(control, ["self-hosted", "small"], duration=60) for _ in names]
    assert [names[_job(control, job["id"])["runner_id"]] for job in jobs] == takers


def test_lost_machine_fails_the_job_and_leaves_the_runner_offline(sandbox: Sandbox, control: httpx.Client) -> None:
    gh = pat_client(sandbox)
    runner_id, encoded = jit_config(gh, "octo-org", "lost", ["small"])
    job = _submit(control, ["self-hosted"], duration=60)
    _boot(sandbox, encoded.encode())
    sandbox.call(lambda: sandbox.world.github.disconnect_runner(runner_id))
    assert (_job(control, job["id"])["status"], _job(control, job["id"])["conclusion"]) == ("completed", "failure")
    runner = gh.rest.actions.get_self_hosted_runner_for_org("octo-org", runner_id).parsed_data
    assert (runner.status, runner.busy) == ("offline", False)


def test_cancel_queued_and_running_jobs(sandbox: Sandbox, control: httpx.Client) -> None:
    gh = pat_client(sandbox)
    queued = _submit(control, ["self-hosted", "never"], duration=60)
    assert control.post(f"/jobs/{queued['id']}/cancel").json()["conclusion"] == "cancelled"
    _, encoded = jit_config(gh, "octo-org", "r", ["small"])
    running = _submit(control, ["self-hosted"], duration=60)
    _boot(sandbox, encoded.encode())
    cancelled = control.post(f"/jobs/{running['id']}/cancel").json()
    assert (cancelled["status"], cancelled["conclusion"]) == ("completed", "cancelled")
    assert gh.rest.actions.list_self_hosted_runners_for_org("octo-org").parsed_data.total_count == 0


def test_runs_are_listed_by_status_and_parse_with_githubkit(sandbox: Sandbox, control: httpx.Client) -> None:
    gh = installation_client(sandbox, "octo-org")
    waiting = _submit(control, ["self-hosted", "gpu"], duration=60)
    _, encoded = jit_config(gh, "octo-org", "r", ["small"])
    running = _submit(control, ["self-hosted"], duration=60)
    _boot(sandbox, encoded.encode())
    queued = gh.rest.actions.list_workflow_runs_for_repo("octo-org", "app", status="queued").parsed_data
    in_progress = gh.rest.actions.list_workflow_runs_for_repo("octo-org", "app", status="in_progress").parsed_data
    assert [r.id for r in queued.workflow_runs] == [waiting["run_id"]]
    assert [r.id for r in in_progress.workflow_runs] == [running["run_id"]]
    run = gh.rest.actions.get_workflow_run("octo-org", "app", running["run_id"]).parsed_data
    assert (run.status, run.repository.full_name) == ("in_progress", "octo-org/app")
    jobs = gh.rest.actions.list_jobs_for_workflow_run("octo-org", "app", running["run_id"]).parsed_data
    assert [(j.id, j.status, j.labels) for j in jobs.jobs] == [(running["id"], "in_progress", ["self-hosted"])]


def test_server_active_bridge_connects_the_runner(sandbox: Sandbox, control: httpx.Client) -> None:
    runner_id, encoded = jit_config(pat_client(sandbox), "octo-org", "bridged", ["small"])
    job = _submit(control, ["self-hosted"], duration=0.01)
    sandbox.call(lambda: sandbox.world.server_active("server-1", encoded.encode()))
    done = wait_until(lambda: (j := _job(control, job["id"]))["status"] == "completed" and j, what="job done")
    assert done["runner_id"] == runner_id
