"""`corral trace import` reads GitHub's Actions API (the sandbox's) into a job trace `corral simulate` replays:
the jobs that ran and completed, with GitHub's own times; a job cancelled before any runner took it is left
out and counted."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from corral.cli import main
from corral.simulate.trace import load_trace
from corral_sandbox.local import LocalCorral, corral_config, pool_spec
from corral_sandbox.server import Sandbox
from tests.waiting import wait_until

DURATIONS = (1.0, 2.0, 3.0)


def test_the_jobs_corral_ran_come_back_as_a_trace_with_their_labels_and_durations(
    sandbox: Sandbox, control: httpx.Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    document = corral_config(sandbox.info, f"sqlite:///{tmp_path / 'corral.db'}", {"small": pool_spec(["small"])})
    corral = LocalCorral(sandbox.info, tmp_path / "corral.yaml", document).start()
    try:
        ran = [
            control.post(
                "/jobs", json={"repo": "octo-org/app", "labels": ["self-hosted", "small"], "duration": d}
            ).json()
            for d in DURATIONS
        ]
        # No pool has `gpu`: cancelled while queued, it never ran on a runner.
        never = control.post("/jobs", json={"repo": "octo-org/app", "labels": ["gpu"], "duration": 5}).json()
        control.post(f"/jobs/{never['id']}/cancel").raise_for_status()
        wait_until(
            lambda: all(control.get(f"/jobs/{job['id']}").json()["status"] == "completed" for job in ran),
            timeout=60,
            what="the three jobs completed",
        )
    finally:
        corral.stop()
    monkeypatch.setenv("CORRAL_GITHUB_TOKEN", sandbox.info.pat)
    output = tmp_path / "jobs.jsonl"
    arguments = ["--repo", "octo-org/app", "--since", "1h", "--github-url", sandbox.info.github_url]
    assert main(["trace", "import", *arguments, "--output", str(output)]) == 0
    assert "3 job(s) of 4 run(s)" in capsys.readouterr().err
    lines = [json.loads(line) for line in output.read_text().splitlines()]
    assert [(line["repo"], line["labels"], line["workflow_name"]) for line in lines] == [
        ("octo-org/app", ["self-hosted", "small"], "CI")
    ] * 3
    # GitHub's times are whole seconds: each duration is a job's, to within one (queued in the same second, the
    # jobs' order among themselves is GitHub's listing's).
    durations = sorted(line["duration"] for line in lines)
    assert all(abs(found - duration) <= 1 for found, duration in zip(durations, DURATIONS, strict=True)), durations
    assert len(load_trace(output).jobs) == 3  # it reads back as a trace


def test_without_credentials_it_says_which_to_give(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    monkeypatch.delenv("CORRAL_GITHUB_TOKEN", raising=False)
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    assert main(["trace", "import", "--repo", "octo-org/app"]) == 2
    assert "give --config" in capsys.readouterr().err


def test_a_repository_not_written_owner_slash_name_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trace", "import", "--repo", "octo-org"]) == 2
    assert "--repo 'octo-org': write it as OWNER/REPO" in capsys.readouterr().err
