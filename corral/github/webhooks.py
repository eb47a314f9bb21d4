"""Webhook deliveries from GitHub: signature verification and the parts of `workflow_job` corral needs.

Verification follows GitHub's documentation: HMAC-SHA256 of the raw body with the webhook secret, sent
as `X-Hub-Signature-256: sha256=<hex>`, compared in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from corral.model import JobState

ACTIONS_TO_STATE = {
    "queued": JobState.QUEUED,
    "in_progress": JobState.IN_PROGRESS,
    "completed": JobState.COMPLETED,
}
"""`waiting` (deployment protection) is not here: such a job gets a runner once GitHub queues it."""


class MalformedPayload(ValueError):
    """The body is not a workflow_job event corral can use; the message names the missing part."""


def signature_valid(secret: bytes, body: bytes, header: str | None) -> bool:
    if not header or not header.startswith("sha256="):
        return False
    expected = "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, header)


@dataclass(frozen=True)
class WorkflowJobEvent:
    action: str
    job_id: int
    run_id: int | None
    repository: str
    labels: list[str]
    status: JobState | None
    conclusion: str | None
    runner_name: str | None
    queued_at: datetime | None
    started_at: datetime | None
    completed_at: datetime | None

    def as_job_update(self, pool: str | None) -> dict[str, Any]:
        assert self.status is not None
        return {
            "id": self.job_id,
            "repository": self.repository,
            "labels": self.labels,
            "status": self.status.value,
            "conclusion": self.conclusion,
            "pool": pool,
            "run_id": self.run_id,
            "runner_name": self.runner_name,
            "queued_at": self.queued_at,
            "started_at": self.started_at if self.status is not JobState.QUEUED else None,
            "completed_at": self.completed_at,
        }


def _time(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise MalformedPayload(f"timestamp {value!r} is not ISO 8601") from None


def parse_workflow_job(payload: object) -> WorkflowJobEvent:
    if not isinstance(payload, dict):
        raise MalformedPayload("body is not a JSON object")
    job = payload.get("workflow_job")
    repository = payload.get("repository")
    action = payload.get("action")
    if not isinstance(job, dict) or not isinstance(action, str):
        raise MalformedPayload("missing workflow_job or action")
    if not isinstance(repository, dict) or not isinstance(repository.get("full_name"), str):
        raise MalformedPayload("missing repository.full_name")
    job_id = job.get("id")
    labels = job.get("labels")
    if not isinstance(job_id, int) or isinstance(job_id, bool):
        raise MalformedPayload("workflow_job.id is not an integer")
    if not isinstance(labels, list) or not all(isinstance(label, str) for label in labels):
        raise MalformedPayload("workflow_job.labels is not a list of strings")
    run_id = job.get("run_id")
    return WorkflowJobEvent(
        action=action,
        job_id=job_id,
        run_id=run_id if isinstance(run_id, int) else None,
        repository=repository["full_name"],
        labels=labels,
        status=ACTIONS_TO_STATE.get(action),
        conclusion=job.get("conclusion") if isinstance(job.get("conclusion"), str) else None,
        runner_name=job.get("runner_name") if isinstance(job.get("runner_name"), str) else None,
        queued_at=_time(job.get("created_at")),
        started_at=_time(job.get("started_at")),
        completed_at=_time(job.get("completed_at")),
    )
