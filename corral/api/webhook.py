"""`POST /webhook`: verify, record durably, wake the pool. Never calls the cloud or GitHub itself.

Answers: 401 bad or missing signature, 415 not JSON, 413 too large, 400 malformed, 202 recorded,
200 for `ping`, for events and actions corral ignores, and for a delivery already recorded.
Nothing is recorded unless the answer is 202.
"""

from __future__ import annotations

import asyncio
import json
import logging

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from corral.github.webhooks import MalformedPayload, parse_workflow_job, signature_valid
from corral.metrics import QUEUED_TO_RUNNING_SECONDS, WEBHOOKS
from corral.model import JobState
from corral.policy import match_pool
from corral.service import Service

logger = logging.getLogger("corral.webhook")

MAX_BODY_BYTES = 1024 * 1024
"""workflow_job payloads are a few KiB; GitHub caps deliveries at 25 MB, we need far less."""


def _answer(status: int, outcome: str, detail: str) -> Response:
    WEBHOOKS.labels(outcome).inc()
    return JSONResponse({"detail": detail}, status_code=status)


def build_webhook_router(service: Service, secret: bytes) -> APIRouter:
    router = APIRouter(tags=["webhook"])

    @router.post("/webhook", status_code=202)
    async def webhook(request: Request) -> Response:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
            return _answer(413, "too_large", "payload too large")
        body = await request.body()
        if len(body) > MAX_BODY_BYTES:
            return _answer(413, "too_large", "payload too large")
        if not signature_valid(secret, body, request.headers.get("x-hub-signature-256")):
            return _answer(401, "bad_signature", "missing or invalid X-Hub-Signature-256")
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            return _answer(415, "bad_content_type", "content type must be application/json")
        event = request.headers.get("x-github-event", "")
        delivery = request.headers.get("x-github-delivery")
        try:
            payload = json.loads(body)
        except ValueError:
            return _answer(400, "malformed", "body is not valid JSON")
        if event == "ping":
            return _answer(200, "ping", "pong")
        if event != "workflow_job":
            return _answer(200, "ignored", f"event {event!r} is not used by corral")
        try:
            job = parse_workflow_job(payload)
        except MalformedPayload as exc:
            return _answer(400, "malformed", str(exc))
        if job.status is None:
            return _answer(200, "ignored", f"action {job.action!r} needs no runner")
        config = service.config
        pool = match_pool(job.labels, job.repository, config.pools, config.default_pool)
        recorded = await asyncio.to_thread(
            service.store.record_job_event,
            delivery_id=delivery,
            event=event,
            action=job.action,
            job=job.as_job_update(pool),
        )
        if not recorded:
            return _answer(200, "duplicate", "delivery already recorded")
        if pool is None and job.status is JobState.QUEUED:
            logger.info("job %d of %s fits no pool (labels %s)", job.job_id, job.repository, job.labels)
            WEBHOOKS.labels("unmatched").inc()
        if job.status is JobState.IN_PROGRESS and job.queued_at and job.started_at:
            QUEUED_TO_RUNNING_SECONDS.labels(pool or "none").observe((job.started_at - job.queued_at).total_seconds())
        service.engine.job_event(job.status, job.runner_name, job.job_id)
        if pool is not None:
            service.engine.request_scale(pool)
        return _answer(202, "recorded", "recorded")

    return router
