"""The webhook endpoint as GitHub (and an attacker) would hit it: what it accepts, refuses and records."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import Connection, func, select

from corral.api.webhook import MAX_BODY_BYTES
from corral.github.webhooks import MAX_DELIVERY_ID_LENGTH, MAX_LABEL_LENGTH, MAX_LABELS, MAX_RUNNER_NAME_LENGTH
from corral.store.schema import DELIVERIES, JOBS
from corral_sandbox.local import LocalCorral, corral_config, pool_spec
from corral_sandbox.server import Sandbox
from tests.store_urls import postgres_url, sqlite_url
from tests.waiting import wait_until
from tests.webhook_fixtures import WEBHOOK_EXAMPLES


def count_rows(connection: Connection) -> tuple[int, int]:
    """Deliveries and jobs recorded, counted by the database."""
    deliveries = connection.execute(select(func.count()).select_from(DELIVERIES)).scalar_one()
    jobs_ = connection.execute(select(func.count()).select_from(JOBS)).scalar_one()
    return deliveries, jobs_


EXAMPLES = WEBHOOK_EXAMPLES


def start_corral(sandbox: Sandbox, tmp_path: Path, database_url: str) -> LocalCorral:
    pools = {"small": pool_spec(["small"]), "other": pool_spec(["ubuntu-latest"], scope={"org": "Codertocat"})}
    document = corral_config(sandbox.info, database_url, pools, default_pool="small")
    document["reconcile_interval"] = "1h"  # no periodic pass: only the webhook can make things happen
    running = LocalCorral(sandbox.info, tmp_path / "corral.yaml", document).start()
    httpx.put(f"{sandbox.info.control_url}/webhook", json={"url": None}).raise_for_status()
    return running


@pytest.fixture
def corral(sandbox: Sandbox, tmp_path: Path) -> Iterator[LocalCorral]:
    running = start_corral(sandbox, tmp_path, f"sqlite:///{tmp_path / 'c.db'}")
    yield running
    running.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def corral_on_each_database(request: pytest.FixtureRequest, sandbox: Sandbox, tmp_path: Path) -> Iterator[LocalCorral]:
    """The same corral on SQLite and on the real PostgreSQL, whose column sizes and integer ranges bite."""
    with sqlite_url(tmp_path) if request.param == "sqlite" else postgres_url() as url:
        running = start_corral(sandbox, tmp_path, url)
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
    runners = wait_until(lambda: corral.runners(pool="small"), what="a runner row, with no pass")
    assert runners[0].job_id == 101


def test_unmatched_jobs_are_recorded_without_a_pool_and_get_no_runner(corral: LocalCorral) -> None:
    assert deliver(corral, job_payload(102, "queued", ["self-hosted", "windows"])).status_code == 202
    assert [(job["id"], job["pool"]) for job in jobs(corral)] == [(102, None)]
    assert corral.runners() == []


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
    assert corral.runners() == [], "a job that is already over gets no runner"


def test_without_a_secret_the_endpoint_does_not_exist(sandbox: Sandbox, tmp_path: Path) -> None:
    document = corral_config(sandbox.info, f"sqlite:///{tmp_path / 'c.db'}", {"small": pool_spec(["small"])})
    del document["github"]["webhook_secret"]
    corral = LocalCorral(sandbox.info, tmp_path / "corral.yaml", document).start()
    try:
        body = job_payload(106, "queued", ["small"])
        assert httpx.post(f"{corral.url}/webhook", content=body).status_code == 404
    finally:
        corral.stop()


def test_an_oversized_chunked_body_is_refused_while_it_streams_not_after(corral: LocalCorral) -> None:
    """No Content-Length to refuse up front: corral must count as it reads and stop reading at the limit."""
    chunk = b" " * 65536
    total = 128 * 1024 * 1024
    sent = 0

    def body() -> Iterator[bytes]:
        nonlocal sent
        while sent < total:
            sent += len(chunk)
            yield chunk

    headers = {"X-GitHub-Event": "workflow_job", "Content-Type": "application/json", "X-Hub-Signature-256": "sha256=0"}
    response = httpx.post(f"{corral.url}/webhook", content=body(), headers=headers, timeout=30)
    assert response.status_code == 413
    # What was sent beyond the limit sits in socket buffers (a few MiB on loopback), never in corral.
    assert sent < total // 4, f"corral read {sent} bytes of a body refused at {MAX_BODY_BYTES}"
    assert deliver(corral, job_payload(107, "queued", ["small"])).status_code == 202, "and it still serves"


def hostile(mutate: Callable[[dict[str, Any]], None], action: str = "queued") -> bytes:
    example = json.loads(job_payload(108, action, ["self-hosted", "small"]))
    mutate(example)
    return json.dumps(example).encode()


def job_field(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda payload: payload["workflow_job"].update({key: value})


def each(*changes: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def apply(payload: dict[str, Any]) -> None:
        for change in changes:
            change(payload)

    return apply


def full_name(value: str) -> Callable[[dict[str, Any]], None]:
    return lambda payload: payload["repository"].update({"full_name": value})


DEEPLY_NESTED = b'{"action": "queued", "workflow_job": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"

HOSTILE_BODIES: dict[str, bytes] = {
    "deep nesting": DEEPLY_NESTED,
    "id 2^63": hostile(job_field("id", 2**63)),
    "id zero": hostile(job_field("id", 0)),
    "id negative": hostile(job_field("id", -77)),
    "id true": hostile(job_field("id", True)),
    "id float": hostile(job_field("id", 108.5)),
    "run_id 2^63": hostile(job_field("run_id", 2**63)),
    "run_id negative": hostile(job_field("run_id", -1)),
    "created_at without zone": hostile(job_field("created_at", "2024-05-01T10:00:00")),
    "created_at out of range": hostile(job_field("created_at", "0001-01-01T00:00:00+01:00")),
    "started_at a number": hostile(job_field("started_at", 1714557600)),
    "repository 300 characters": hostile(full_name("octo-org/" + "a" * 300)),
    "repository owner 40 characters": hostile(full_name("o" * 40 + "/app")),
    "repository without owner": hostile(full_name("app")),
    "repository with a path": hostile(full_name("octo-org/app/../../etc")),
    "repository with a newline": hostile(full_name("octo-org/app\nforged log line")),
    "labels 10,000": hostile(job_field("labels", ["small"] * 10_000)),
    "label 500,000 characters": hostile(job_field("labels", ["self-hosted", "x" * 500_000])),
    "label empty": hostile(job_field("labels", ["self-hosted", ""])),
    "label with a newline": hostile(job_field("labels", ["self-hosted", "small\nforged log line"])),
    "runner_name too long": hostile(job_field("runner_name", "r" * (MAX_RUNNER_NAME_LENGTH + 1)), "in_progress"),
    "conclusion too long": hostile(job_field("conclusion", "x" * 40), "completed"),
    "action too long": hostile(lambda payload: payload.update({"action": "queued" * 10})),
}


def test_hostile_signed_payloads_get_400_and_nothing_is_recorded(corral_on_each_database: LocalCorral) -> None:
    """A valid signature is no licence: each field corral keeps is checked against GitHub's limits and the
    columns it goes into, on SQLite and on PostgreSQL alike, and a refused delivery leaves no trace."""
    corral = corral_on_each_database
    answers = {
        name: deliver(corral, body, delivery=f"hostile-{index}")
        for index, (name, body) in enumerate(HOSTILE_BODIES.items())
    }
    answers["delivery id too long"] = deliver(
        corral, job_payload(109, "queued", ["small"]), delivery="d" * (MAX_DELIVERY_ID_LENGTH + 1)
    )
    wrong = {
        name: (answer.status_code, answer.text[:200]) for name, answer in answers.items() if answer.status_code != 400
    }
    assert wrong == {}, "each of these should be refused with 400"
    assert all(len(answer.text) < 1000 for answer in answers.values()), "an answer repeats a hostile field in full"
    assert jobs(corral) == []
    assert corral.service.store.run_blocking(count_rows) == (0, 0), "no delivery and no job recorded"
    assert corral.runners() == [], "no runner was started for a refused job"
    # A refused delivery was not recorded, so GitHub's redelivery of a good body with that id is taken.
    assert deliver(corral, job_payload(110, "queued", ["small"]), delivery="hostile-1").status_code == 202
    assert [job["id"] for job in jobs(corral)] == [110]


def test_payloads_at_the_limits_are_accepted_on_each_database(corral_on_each_database: LocalCorral) -> None:
    corral = corral_on_each_database
    labels = [f"{index}-" + "x" * (MAX_LABEL_LENGTH - 4) for index in range(MAX_LABELS)]
    owner, name = "o" * 39, "r" * 100
    queued = hostile(each(job_field("labels", labels), full_name(f"{owner}/{name}")))
    assert deliver(corral, queued, delivery="d" * MAX_DELIVERY_ID_LENGTH).status_code == 202
    completed = hostile(
        each(
            job_field("id", 2**63 - 1),
            job_field("runner_name", "r" * MAX_RUNNER_NAME_LENGTH),
            job_field("conclusion", "action_required"),
            job_field("completed_at", "2024-05-01T12:00:00+02:00"),
        ),
        "completed",
    )
    assert deliver(corral, completed).status_code == 202
    recorded = {job["id"]: job for job in jobs(corral)}
    assert recorded[108]["repository"] == f"{owner}/{name}" and recorded[108]["labels"] == labels
    assert recorded[2**63 - 1]["runner_name"] == "r" * MAX_RUNNER_NAME_LENGTH
    assert recorded[2**63 - 1]["completed_at"].startswith("2024-05-01T10:00:00"), "kept as UTC"


def test_hostile_fields_never_reach_the_log_in_full(corral: LocalCorral, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    assert deliver(corral, HOSTILE_BODIES["label 500,000 characters"]).status_code == 400
    unmatched = [f"{index}-" + "y" * (MAX_LABEL_LENGTH - 4) for index in range(MAX_LABELS)]
    assert deliver(corral, job_payload(111, "queued", unmatched)).status_code == 202
    wait_until(lambda: any("fits no pool" in record.getMessage() for record in caplog.records), what="the log line")
    longest = max(len(record.getMessage()) for record in caplog.records)
    assert longest < 1000, f"a log line of {longest} characters repeats a hostile field"
