"""What an operator watching corral sees: metrics that move, log lines per transition, no secret anywhere."""

from __future__ import annotations

import json
import logging
import re

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from corral.logs import configure_logging
from corral.model import RunnerState
from corral_sandbox.local import LocalCorral
from corral_sandbox.server import Sandbox
from tests.conftest import StartCorral
from tests.waiting import wait_until


@pytest.fixture
def corral(start_corral: StartCorral) -> LocalCorral:
    return start_corral()


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def run_one_job(corral: LocalCorral, control: httpx.Client) -> int:
    job = control.post("/jobs", json={"repo": "octo-org/app", "labels": ["small"], "duration": 0.1}).json()

    def done() -> bool:
        corral.settle()
        return bool(control.get(f"/jobs/{job['id']}").json()["status"] == "completed")

    wait_until(done, what="job completed")

    def runner_gone() -> bool:
        corral.settle()
        return not corral.runners(states=[s for s in RunnerState if s is not RunnerState.DELETED])

    wait_until(runner_gone, what="runner gone")
    return int(job["id"])


def test_metrics_need_a_token_and_count_what_happened(corral: LocalCorral, control: httpx.Client) -> None:
    assert httpx.get(f"{corral.url}/metrics").status_code == 401
    _, metrics_only = corral.create_token("prometheus", "metrics")
    scrape = httpx.Client(base_url=corral.url, headers={"Authorization": f"Bearer {metrics_only}"})
    assert scrape.get("/api/v1/pools").status_code == 403, "a metrics token reads nothing else"
    run_one_job(corral, control)
    values = samples(scrape.get("/metrics").text)
    pool = frozenset({("pool", "small")})
    assert values[("corral_queued_to_create_seconds_count", pool)] >= 1
    assert values[("corral_runner_boot_seconds_count", pool)] >= 1
    assert values[("corral_queued_to_running_seconds_count", pool)] >= 1
    assert values[("corral_webhooks_total", frozenset({("outcome", "recorded")}))] >= 3
    jit = frozenset({("endpoint", "POST /orgs/{owner}/actions/runners/generate-jitconfig"), ("status", "201")})
    assert values[("corral_github_calls_total", jit)] >= 1
    assert values[("corral_github_rate_limit_remaining", frozenset({("resource", "core")}))] > 0
    assert values[("corral_cloud_calls_total", frozenset({("operation", "create_server"), ("outcome", "ok")}))] >= 1
    assert values[("corral_reconcile_pass_seconds_count", pool)] >= 1
    assert values[("corral_observe_seconds_count", frozenset())] >= 1


def test_transitions_are_logged_as_json_fields_and_no_secret_reaches_the_log(
    corral: LocalCorral, control: httpx.Client, sandbox: Sandbox, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging("json")
    try:
        run_one_job(corral, control)
    finally:
        logging.getLogger().handlers.clear()
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    transitions = [line for line in lines if "to_state" in line]
    # idle and busy may come and go between two passes with a 0.1 s job; the rest are always seen
    assert {"pending", "creating", "booting", "finished", "deleting", "deleted"} <= {
        line["to_state"] for line in transitions
    }
    assert all(line["pool"] == "small" and line["reason"] for line in transitions)
    text = "\n".join(json.dumps(line) for line in lines)
    for secret in [sandbox.info.pat, sandbox.info.webhook_secret, corral.token]:
        assert secret not in text
    assert not re.search(r"[A-Za-z0-9+/=]{200,}", text), "a JIT config (kilobytes of base64) reached the log"
