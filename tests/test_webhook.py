"""The webhook endpoint as GitHub (and an attacker) would hit it: what it accepts, refuses and records."""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from corral.local import LocalCorral, corral_config, pool_spec
from corral.sandbox.server import Sandbox
from tests.waiting import wait_until
from tests.webhook_fixtures import WEBHOOK_EXAMPLES

EXAMPLES = WEBHOOK_EXAMPLES


@pytest.fixture
def corral(sandbox: Sandbox, tmp_path: Path) -> Iterator[LocalCorral]:
    pools = {"small": pool_spec(["small"]), "other": pool_spec(["ubuntu-latest"], scope={"org": "Codertocat"})}
    document = corral_config(sandbox.info, f"sqlite:///{tmp_path / 'c.db'}", pools, default_pool="small")
    document["reconcile_interval"] = "1h"  # no periodic pass: only the webhook can make things happen
    running = LocalCorral(sandbox.info, tmp_path / "corral.yaml", document).start()
    httpx.put(f"{sandbox.info.control_url}/webhook", json={"url": None}).raise_for_status()
    yield running
    running.stop()


def sign(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def deliver(
    corral: LocalCorral,
    body: bytes,
    *,
    event: str = "workflow_job",
    secret: str | None = None,
    delivery: str | None = None,
    content_type: str = "application/json",
    signature: str | None = None,
) -> httpx.Response:
    headers = {
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
        "Content-Type": content_type,
        "X-Hub-Signature-256": signature or sign(secret or corral.sandbox.webhook_secret, body),
    }
    return httpx.post(f"{corral.url}/webhook", content=body, headers=headers)


def jobs(corral: LocalCorral) -> list[dict[str, Any]]:
    with corral.api() as api:
        body: list[dict[str, Any]] = api.get("/api/v1/jobs").json()
        return body


def job_payload(job_id: int, action: str, labels: list[str], repo: str = "octo-org/app") -> bytes:
    example = json.loads((EXAMPLES / "workflow_job.queued.payload.json").read_text())
    example["action"] = action
    example["workflow_job"].update({"id": job_id, "labels": labels, "status": action})
    example["repository"]["full_name"] = repo
    return json.dumps(example).encode()


@pytest.mark.parametrize("example", sorted(path.name for path in EXAMPLES.glob("*.json")))
def test_every_published_example_is_accepted(corral: LocalCorral, example: str) -> None:
    body = (EXAMPLES / example).read_bytes()
    event = example.split(".", 1)[0]
    response = deliver(corral, body, event=event)
    expected = 200 if event == "ping" or ".waiting." in example else 202
    assert response.status_code == expected, response.text


def test_a_queued_job_is_recorded_with_its_pool_and_a_runner_is_requested_at_once(corral: LocalCorral) -> None:
    assert deliver(corral, job_payload(101, "queued", ["self-hosted", "small"])).status_code == 202
    (job,) = jobs(corral)
    assert (job["id"], job["status"], job["pool"]) == (101, "queued", "small")
    runners = wait_until(lambda: corral.service.store.runners(pool="small"), what="a runner row, with no pass")
    assert runners[0].job_id == 101


def test_unmatched_jobs_are_recorded_without_a_pool_and_get_no_runner(corral: LocalCorral) -> None:
    assert deliver(corral, job_payload(102, "queued", ["self-hosted", "windows"])).status_code == 202
    assert [(job["id"], job["pool"]) for job in jobs(corral)] == [(102, None)]
    assert corral.service.store.runners() == []


@pytest.mark.parametrize(
    ("mutate", "status"),
    [
        (lambda body, sig: (body + b" ", sig), 401),
        (lambda body, sig: (body, sign("wrong-secret", body)), 401),
        (lambda body, sig: (body, "sha1=" + sig[7:]), 401),
        (lambda body, sig: (body, ""), 401),
    ],
)
def test_tampered_or_unsigned_deliveries_are_refused_and_record_nothing(
    corral: LocalCorral, mutate: Any, status: int
) -> None:
    body = job_payload(103, "queued", ["small"])
    sent_body, signature = mutate(body, sign(corral.sandbox.webhook_secret, body))
    headers = {"X-GitHub-Event": "workflow_job", "X-GitHub-Delivery": "x", "Content-Type": "application/json"}
    if signature:
        headers["X-Hub-Signature-256"] = signature
    assert httpx.post(f"{corral.url}/webhook", content=sent_body, headers=headers).status_code == status
    assert jobs(corral) == []


def test_malformed_bodies_are_refused_and_record_nothing(corral: LocalCorral) -> None:
    body = job_payload(104, "queued", ["small"])
    assert deliver(corral, body[: len(body) // 2]).status_code == 400
    assert deliver(corral, json.dumps({"action": "queued", "workflow_job": {"id": "x"}}).encode()).status_code == 400
    assert deliver(corral, b"{}" + b" " * (2 * 1024 * 1024)).status_code == 413
    assert deliver(corral, body, content_type="application/x-www-form-urlencoded").status_code == 415
    assert deliver(corral, body, event="issues").status_code == 200
    assert jobs(corral) == []


def test_duplicates_are_ignored_and_out_of_order_events_end_in_the_right_state(corral: LocalCorral) -> None:
    completed = job_payload(105, "completed", ["small"])
    assert deliver(corral, completed, delivery="d-1").status_code == 202
    assert deliver(corral, completed, delivery="d-1").status_code == 200
    assert deliver(corral, job_payload(105, "queued", ["small"]), delivery="d-2").status_code == 202
    assert [(job["id"], job["status"]) for job in jobs(corral)] == [(105, "completed")]
    assert corral.service.store.runners() == [], "a job that is already over gets no runner"


def test_without_a_secret_the_endpoint_does_not_exist(sandbox: Sandbox, tmp_path: Path) -> None:
    document = corral_config(sandbox.info, f"sqlite:///{tmp_path / 'c.db'}", {"small": pool_spec(["small"])})
    del document["github"]["webhook_secret"]
    corral = LocalCorral(sandbox.info, tmp_path / "corral.yaml", document).start()
    try:
        body = job_payload(106, "queued", ["small"])
        assert httpx.post(f"{corral.url}/webhook", content=body).status_code == 404
    finally:
        corral.stop()
