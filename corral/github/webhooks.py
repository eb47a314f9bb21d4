"""Webhook deliveries from GitHub: signature verification and the parts of `workflow_job` corral needs.

Verification follows GitHub's documentation: HMAC-SHA256 of the raw body with the webhook secret, sent
as `X-Hub-Signature-256: sha256=<hex>`, compared in constant time.

A valid signature proves who sent a body, not that its fields are sane: a leaked secret, a proxy that
re-signs, or a bug upstream must not be able to make corral start a runner for job -77, fill a column
past its size, or write half a megabyte of label into the log. So every field corral reads is checked
against GitHub's own limits and corral's column sizes, and anything outside them is refused whole.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from datetime import UTC, datetime

from corral.model import MAX_WORKFLOW_NAME, JobState, JobUpdate

ACTIONS_TO_STATE = {
    "queued": JobState.QUEUED,
    "in_progress": JobState.IN_PROGRESS,
    "completed": JobState.COMPLETED,
}
"""`waiting` (deployment protection) is not here: such a job gets a runner once GitHub queues it."""

MAX_ID = 2**63 - 1
"""GitHub's ids are positive and corral keeps them in BIGINT columns (signed 64-bit)."""
MAX_LABELS = 100
"""GitHub accepts at most 100 labels on a runner, so a job asking for more can never run; corral's pool
config has the same bound."""
MAX_LABEL_LENGTH = 256
"""GitHub documents no limit on a label's length; real ones are a few dozen characters. 256 is far above
any runner label seen and keeps a job's labels (at most 100 of them) to a few KiB."""
MAX_RUNNER_NAME_LENGTH = 128
MAX_ATTEMPT = 2**31 - 1
"""A run's attempts fit the `run_attempt` column (GitHub allows 50 re-runs of a run)."""
"""The `jobs.runner_name` column; GitHub's runner names are shorter (corral's own are under 60)."""
MAX_DELIVERY_ID_LENGTH = 64
"""The `deliveries.id` column; GitHub's delivery ids are 36-character GUIDs."""
REPOSITORY_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,39}/[A-Za-z0-9._-]{1,100}")
"""`owner/name`: GitHub account names are at most 39 letters, digits and hyphens (underscores appear in
Enterprise Managed Users' names); repository names at most 100 letters, digits, `.`, `-` and `_`."""
WORD_PATTERN = re.compile(r"[a-z_]{1,32}")
"""`action` and `conclusion`: GitHub's values are short lowercase words (`in_progress`, `timed_out`)."""
DELIVERY_ID_PATTERN = re.compile(rf"[\x21-\x7e]{{1,{MAX_DELIVERY_ID_LENGTH}}}")
"""Printable ASCII without spaces: what GitHub sends, and what any other sender can reasonably send."""
SHOWN_CHARACTERS = 120
"""How much of a refused value an answer or a log line repeats: enough to recognise it, never all of it."""


class MalformedPayload(ValueError):
    """The body is not a workflow_job event corral can use; the message names the field and the rule."""


def signature_valid(secret: bytes, body: bytes, header: str | None) -> bool:
    if not header or not header.startswith("sha256="):
        return False
    expected = "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, header)


def clipped(value: object, limit: int = SHOWN_CHARACTERS) -> str:
    """`repr(value)`, cut to `limit` characters: hostile input may be shown, never in full."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def delivery_id_valid(delivery: str | None) -> bool:
    """A missing id is allowed (deliveries are then not de-duplicated); a present one must fit its column."""
    return delivery is None or DELIVERY_ID_PATTERN.fullmatch(delivery) is not None


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
    workflow: str | None = None
    name: str | None = None
    run_attempt: int | None = None

    def as_job_update(self, pool: str | None) -> JobUpdate:
        assert self.status is not None
        return JobUpdate(
            id=self.job_id,
            repository=self.repository,
            labels=tuple(self.labels),
            status=self.status,
            pool=pool,
            conclusion=self.conclusion,
            run_id=self.run_id,
            runner_name=self.runner_name,
            queued_at=self.queued_at,
            started_at=self.started_at if self.status is not JobState.QUEUED else None,
            completed_at=self.completed_at,
            workflow=self.workflow,
            name=self.name,
            run_attempt=self.run_attempt,
        )


def _id(value: object, field: str, *, optional: bool = False) -> int | None:
    if value is None and optional:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise MalformedPayload(f"{field} is not an integer: {clipped(value)}")
    if not 1 <= value <= MAX_ID:
        raise MalformedPayload(f"{field} must be between 1 and 2^63-1, not {clipped(value)}")
    return value


def _word(value: object, field: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not WORD_PATTERN.fullmatch(value):
        raise MalformedPayload(f"{field} must be a lowercase word of at most 32 characters, not {clipped(value)}")
    return value


def _time(value: object, field: str) -> datetime | None:
    """An RFC 3339 timestamp, as UTC. A time without a zone is refused rather than guessed at: GitHub's
    schema says `date-time`, which always carries one, and a guess would skew every wait corral measures."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise MalformedPayload(f"{field} is not a timestamp: {clipped(value)}")
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise MalformedPayload(f"{field} {clipped(value)} is not ISO 8601") from None
    if parsed.tzinfo is None:
        raise MalformedPayload(f"{field} {clipped(value)} has no time zone")
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        raise MalformedPayload(f"{field} {clipped(value)} is out of range") from None


def _labels(value: object) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(label, str) for label in value):
        raise MalformedPayload("workflow_job.labels is not a list of strings")
    if len(value) > MAX_LABELS:
        raise MalformedPayload(f"workflow_job.labels has {len(value)} labels; at most {MAX_LABELS} are allowed")
    for label in value:
        if not 1 <= len(label) <= MAX_LABEL_LENGTH or not label.isprintable():
            raise MalformedPayload(
                f"workflow_job.labels: {clipped(label)} is not 1 to {MAX_LABEL_LENGTH} printable characters"
            )
    return value


def _runner_name(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_RUNNER_NAME_LENGTH or not value.isprintable():
        raise MalformedPayload(
            f"workflow_job.runner_name must be 1 to {MAX_RUNNER_NAME_LENGTH} printable characters, not {clipped(value)}"
        )
    return value


def _name(value: object, field: str) -> str | None:
    """A name given as free text, optional, kept to the column's length: a long one is cut, not refused. The
    workflow's (`workflow_name`, for usage accounting; older GitHub Enterprise Server versions do not send
    it) and the job's in its workflow (`name`, what a job's re-runs share)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise MalformedPayload(f"workflow_job.{field} is not a string: {clipped(value)}")
    return value[:MAX_WORKFLOW_NAME] or None


def _attempt(value: object) -> int | None:
    """`run_attempt`: 1 for a run's first attempt, one more for each re-run."""
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_ATTEMPT:
        raise MalformedPayload(
            f"workflow_job.run_attempt must be an integer from 1 to {MAX_ATTEMPT}, not {clipped(value)}"
        )
    return value


def _repository(value: object) -> str:
    name = value.get("full_name") if isinstance(value, dict) else None
    if not isinstance(name, str):
        raise MalformedPayload("missing repository.full_name")
    if not REPOSITORY_PATTERN.fullmatch(name):
        raise MalformedPayload(f"repository.full_name {clipped(name)} is not a GitHub owner/name")
    return name


def parse_workflow_job(payload: object) -> WorkflowJobEvent:
    """The fields corral uses, each checked; raises MalformedPayload naming the first that is not sane."""
    if not isinstance(payload, dict):
        raise MalformedPayload("body is not a JSON object")
    job = payload.get("workflow_job")
    action = payload.get("action")
    if not isinstance(job, dict) or not isinstance(action, str):
        raise MalformedPayload("missing workflow_job or action")
    _word(action, "action")
    job_id = _id(job.get("id"), "workflow_job.id")
    assert job_id is not None
    return WorkflowJobEvent(
        action=action,
        job_id=job_id,
        run_id=_id(job.get("run_id"), "workflow_job.run_id", optional=True),
        repository=_repository(payload.get("repository")),
        labels=_labels(job.get("labels")),
        status=ACTIONS_TO_STATE.get(action),
        conclusion=_word(job.get("conclusion"), "workflow_job.conclusion"),
        runner_name=_runner_name(job.get("runner_name")),
        queued_at=_time(job.get("created_at"), "workflow_job.created_at"),
        started_at=_time(job.get("started_at"), "workflow_job.started_at"),
        completed_at=_time(job.get("completed_at"), "workflow_job.completed_at"),
        workflow=_name(job.get("workflow_name"), "workflow_name"),
        name=_name(job.get("name"), "name"),
        run_attempt=_attempt(job.get("run_attempt")),
    )
