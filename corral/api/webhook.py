"""`POST /webhook`: verify, record durably, wake the pool. Never calls the cloud or GitHub itself.

Answers: 401 bad or missing signature, 415 not JSON, 413 too large, 400 malformed, 202 recorded,
200 for `ping`, for events and actions corral ignores, and for a delivery already recorded.
Nothing is recorded unless the answer is 202.

The body is counted as it streams in and refused with 413 the moment it passes the limit, whether or not
a Content-Length was declared: anyone can reach this endpoint, and the signature can only be checked once
the whole body is here, so reading first and measuring after would let a chunked upload of any size
into memory.
"""

from __future__ import annotations

import logging

import orjson
from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from starlette.requests import ClientDisconnect

from corral.github.webhooks import (
    MalformedPayload,
    clipped,
    delivery_id_valid,
    parse_workflow_job,
    signature_valid,
)
from corral.metrics import DATABASE_ERRORS, QUEUED_TO_RUNNING_SECONDS, WEBHOOKS
from corral.model import Delivery, DeliveryOutcome, JobState
from corral.outages import log_unexpected
from corral.policy import match_pool
from corral.service import Service

logger = logging.getLogger("corral.webhook")

MAX_BODY_BYTES = 1024 * 1024
"""workflow_job payloads are a few KiB; GitHub caps deliveries at 25 MB, we need far less."""


def _answer(status: int, outcome: str, detail: str, *, close: bool = False) -> Response:
    WEBHOOKS.labels(outcome).inc()
    headers = {"Connection": "close"} if close else None
    return JSONResponse({"detail": detail}, status_code=status, headers=headers)


def _too_large() -> Response:
    """413, closing the connection: the rest of the body is never read, not even to be thrown away."""
    return _answer(413, "too_large", f"payload larger than {MAX_BODY_BYTES} bytes", close=True)


async def _read_body(request: Request, limit: int) -> bytes | None:
    """The body, or None as soon as more than `limit` bytes have arrived (nothing more is read)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def build_webhook_router(service: Service, secret: bytes) -> APIRouter:
    router = APIRouter(tags=["webhook"])

    @router.post("/webhook", status_code=202)
    async def webhook(request: Request) -> Response:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
            return _too_large()
        try:
            body = await _read_body(request, MAX_BODY_BYTES)
        except ClientDisconnect:
            return _answer(400, "disconnected", "the client went away before the body was complete")
        if body is None:
            return _too_large()
        if not signature_valid(secret, body, request.headers.get("x-hub-signature-256")):
            return _answer(401, "bad_signature", "missing or invalid X-Hub-Signature-256")
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            return _answer(415, "bad_content_type", "content type must be application/json")
        event = request.headers.get("x-github-event", "")
        delivery = request.headers.get("x-github-delivery")
        try:
            payload = orjson.loads(body)  # a third of the standard library's CPU on GitHub's 8 KB payloads
        except orjson.JSONDecodeError as exc:  # its message says where, never what the body held
            return _answer(400, "malformed", f"body is not valid JSON ({exc})")
        if event == "ping":
            return _answer(200, "ping", "pong")
        if event != "workflow_job":
            return _answer(200, "ignored", f"event {clipped(event)} is not used by corral")
        if not delivery_id_valid(delivery):
            return _answer(400, "malformed", f"X-GitHub-Delivery {clipped(delivery)} is not a delivery id")
        try:
            job = parse_workflow_job(payload)
        except MalformedPayload as exc:
            return _answer(400, "malformed", str(exc))
        if job.status is None:
            return _answer(200, "ignored", f"action {clipped(job.action)} needs no runner")
        config = service.config
        pool = match_pool(job.labels, job.repository, config.pools, config.default_pool)
        delivered = Delivery(id=delivery, event=event, action=job.action, job=job.as_job_update(pool))
        try:
            outcome = await service.intake.record(delivered)
        except Exception:
            DATABASE_ERRORS.labels("intake").inc()
            log_unexpected(
                logger, "cannot record webhook delivery %s; GitHub will retry or corral will redeliver", delivery
            )
            return _answer(503, "unavailable", "cannot record the delivery now; retry later")
        if outcome is DeliveryOutcome.DUPLICATE:
            return _answer(200, "duplicate", "delivery already recorded")
        if pool is None and job.status is JobState.QUEUED:
            logger.info("job %d of %s fits no pool (labels %s)", job.job_id, job.repository, clipped(job.labels))
            WEBHOOKS.labels("unmatched").inc()
        if job.status is JobState.IN_PROGRESS and job.queued_at and job.started_at:
            QUEUED_TO_RUNNING_SECONDS.labels(pool or "none").observe((job.started_at - job.queued_at).total_seconds())
        return _answer(202, "recorded", "recorded")

    return router
