"""Webhook deliveries: signed, ordered per job, schema-valid, logged, redeliverable, and faultable."""

from __future__ import annotations

import json
from typing import Any

import httpx
from githubkit.webhooks import parse_obj
from githubkit_schemas.v2026_03_10.models import WebhookPingPropHook

from corral_sandbox.server import Sandbox
from tests.sandbox.github_support import (
    app_client,
    events,
    jit_config,
    pat_client,
    signature_ok,
    validate_workflow_job,
)
from tests.waiting import wait_until
from tests.webhook_receiver import WebhookReceiver


def _run_one_job(sandbox: Sandbox, control: httpx.Client) -> dict[str, Any]:
    _, encoded = jit_config(pat_client(sandbox), "octo-org", "hooked", ["small"])
    job: dict[str, Any] = control.post(
        "/jobs", json={"repo": "octo-org/app", "labels": ["self-hosted"], "duration": 0.01}
    ).json()
    github = sandbox.world.github
    sandbox.call(lambda: github.connect_runner(github.runner_for_user_data(encoded.encode()) or 0))
    return job


def _job_events(receiver: WebhookReceiver, count: int) -> list[dict[str, Any]]:
    return wait_until(
        lambda: found if len(found := events(receiver.snapshot(), "workflow_job")) >= count else None,
        what=f"{count} workflow_job deliveries",
    )


def test_job_lifecycle_is_delivered_in_order_signed_and_schema_valid(
    sandbox: Sandbox, control: httpx.Client, webhook_receiver: WebhookReceiver
) -> None:
    job = _run_one_job(sandbox, control)
    payloads = _job_events(webhook_receiver, 3)
    assert [p["action"] for p in payloads] == ["queued", "in_progress", "completed"]
    for payload in payloads:
        validate_workflow_job(payload)
        parse_obj("workflow_job", payload)
        assert payload["workflow_job"]["id"] == job["id"]
        assert payload["repository"]["full_name"] == "octo-org/app"
        assert payload["organization"]["login"] == "octo-org"
        assert payload["installation"]["id"] > 0
    assert payloads[0]["workflow_job"]["runner_id"] is None
    assert payloads[1]["workflow_job"]["runner_name"] == "hooked"
    assert payloads[2]["workflow_job"]["conclusion"] == "success"
    for delivery in webhook_receiver.snapshot():
        assert signature_ok(delivery, sandbox.info.webhook_secret)
        headers = delivery.headers
        assert headers["User-Agent"].startswith("GitHub-Hookshot/")
        assert headers["Content-Type"] == "application/json"
        assert headers["X-GitHub-Hook-Installation-Target-Type"] == "integration"
        assert headers["X-GitHub-Hook-Installation-Target-ID"] == str(sandbox.info.app_id)
        assert len(headers["X-GitHub-Delivery"]) == 36
    guids = [d.headers["X-GitHub-Delivery"] for d in webhook_receiver.snapshot()]
    assert len(set(guids)) == len(guids)


def test_setting_the_webhook_sends_a_ping(sandbox: Sandbox, webhook_receiver: WebhookReceiver) -> None:
    pings = wait_until(lambda: events(webhook_receiver.snapshot(), "ping"), what="ping delivery")
    ping = parse_obj("ping", pings[0])
    assert isinstance(ping.hook, WebhookPingPropHook)
    assert ping.hook.app_id == sandbox.info.app_id
    assert ping.hook.config.url == webhook_receiver.url


def test_delivery_log_lists_inspects_and_redelivers(
    sandbox: Sandbox, control: httpx.Client, webhook_receiver: WebhookReceiver
) -> None:
    _run_one_job(sandbox, control)
    _job_events(webhook_receiver, 3)
    wait_until(lambda: len(control.get("/deliveries").json()) == 4, what="four logged deliveries")
    app = app_client(sandbox)
    page = app.rest.apps.list_webhook_deliveries(per_page=2)
    listed = page.parsed_data
    assert 'rel="next"' in page.headers["link"] and "cursor=" in page.headers["link"]
    everything = list(app.rest.paginate(app.rest.apps.list_webhook_deliveries, per_page=2))
    assert len(everything) == 4  # the ping and three workflow_job events, newest first
    assert [d.event for d in everything][-1] == "ping"
    assert all(d.status == "OK" and d.status_code == 200 for d in everything)
    detail = app.rest.apps.get_webhook_delivery(listed[0].id).parsed_data
    assert detail.request.payload is not None
    assert detail.guid == listed[0].guid
    assert app.rest.apps.redeliver_webhook_delivery(listed[0].id).status_code == 202
    redelivered = wait_until(
        lambda: [d for d in webhook_receiver.snapshot() if d.headers["X-GitHub-Delivery"] == listed[0].guid][1:],
        what="redelivery",
    )
    assert signature_ok(redelivered[0], sandbox.info.webhook_secret)
    newest = app.rest.apps.list_webhook_deliveries(per_page=1).parsed_data[0]
    assert (newest.guid, newest.redelivery) == (listed[0].guid, True)


def test_dropped_deliveries_are_logged_as_failed_and_can_be_redelivered(
    sandbox: Sandbox, control: httpx.Client, webhook_receiver: WebhookReceiver
) -> None:
    wait_until(lambda: events(webhook_receiver.snapshot(), "ping"), what="ping delivery")
    control.put("/faults", json={"world": {"webhook_drop_rate": 1.0}}).raise_for_status()
    job = control.post("/jobs", json={"repo": "octo-org/app", "labels": ["self-hosted"]}).json()
    app = app_client(sandbox)
    failed = wait_until(
        lambda: app.rest.apps.list_webhook_deliveries(status="failure").parsed_data, what="failed delivery"
    )
    assert (failed[0].event, failed[0].action, failed[0].status_code) == ("workflow_job", "queued", 0)
    assert events(webhook_receiver.snapshot(), "workflow_job") == []
    control.put("/faults", json={"world": {}}).raise_for_status()
    app.rest.apps.redeliver_webhook_delivery(failed[0].id)
    payload = _job_events(webhook_receiver, 1)[0]
    assert payload["workflow_job"]["id"] == job["id"]
    assert control.get("/stats").json()["github"]["webhooks"]["dropped"] == 1


def test_lost_events_leave_no_trace(sandbox: Sandbox, control: httpx.Client, webhook_receiver: WebhookReceiver) -> None:
    wait_until(lambda: events(webhook_receiver.snapshot(), "ping"), what="ping delivery")
    control.put("/faults", json={"world": {"webhook_lose_rate": 1.0}}).raise_for_status()
    job = control.post("/jobs", json={"repo": "octo-org/app", "labels": ["self-hosted"]}).json()
    stats = wait_until(
        lambda: s if (s := control.get("/stats").json()["github"]["webhooks"])["lost"] == 1 else None,
        what="a lost event",
    )
    assert stats["pending"] == 0
    assert [d["event"] for d in control.get("/deliveries").json()] == ["ping"]
    assert events(webhook_receiver.snapshot(), "workflow_job") == []
    # GitHub keeps no trace, but the control API says which event was lost, for benchmarks to classify.
    lost = control.get("/deliveries/lost").json()
    assert lost == [{"event": "workflow_job", "action": "queued", "job_id": job["id"]}]
    assert control.post("/reset").status_code == 204
    assert control.get("/deliveries/lost").json() == []


def test_receiver_errors_are_logged_with_githubs_status(
    sandbox: Sandbox, control: httpx.Client, webhook_receiver: WebhookReceiver
) -> None:
    wait_until(lambda: events(webhook_receiver.snapshot(), "ping"), what="ping delivery")
    webhook_receiver.status = 503
    control.post("/jobs", json={"repo": "octo-org/app", "labels": ["self-hosted"]}).raise_for_status()
    logged = wait_until(lambda: [d for d in control.get("/deliveries").json() if d["event"] == "workflow_job"])
    assert (logged[0]["status_code"], logged[0]["status"]) == (503, "Invalid HTTP Response: 503")
    app = app_client(sandbox)
    detail = app.rest.apps.get_webhook_delivery(logged[0]["id"])
    assert detail.parsed_data.response.headers is not None
    assert json.loads(detail.content)["request"]["payload"]["action"] == "queued"
