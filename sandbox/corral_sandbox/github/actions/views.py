"""How the Actions service renders its objects, field for field as `actions/scaleset`'s `types.go` reads them.

Times are RFC 3339 in UTC; a time not reached yet is Go's zero time, `0001-01-01T00:00:00Z`, which is what a
Go (or .NET) service writes for an unset non-nullable time and what `time.Time` reads back as zero. Scale
sets are written with `runnerSetting` in camel case (the reference's spelling; `types.go` tags it
`RunnerSetting` and Go decodes keys case-insensitively, so both clients read it).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from corral_sandbox.github.actions.model import RunnerGroup, ScaleSet, ScaleSetJob, Session
from corral_sandbox.github.clock import isoformat
from corral_sandbox.github.model import Runner

ZERO_TIME = "0001-01-01T00:00:00Z"


def time(moment: datetime | None) -> str:
    return isoformat(moment) or ZERO_TIME


def runner_group(group: RunnerGroup, size: int) -> dict[str, Any]:
    return {"id": group.id, "name": group.name, "size": size, "isDefaultGroup": group.is_default}


def scale_set(s: ScaleSet, group_name: str, service_url: str, statistics: dict[str, int]) -> dict[str, Any]:
    return {
        "id": s.id,
        "name": s.name,
        "runnerGroupId": s.group_id,
        "runnerGroupName": group_name,
        "labels": [{"type": "System", "name": label} for label in s.labels],
        "runnerSetting": {"ephemeral": s.ephemeral, "isElastic": s.is_elastic, "disableUpdate": s.disable_update},
        "createdOn": time(s.created_on),
        "runnerJitConfigUrl": f"{service_url}_apis/runtime/runnerscalesets/{s.id}/generatejitconfig",
        "statistics": statistics,
    }


def session(
    sess: Session, scale_set_json: dict[str, Any], queue_url: str, token: str, statistics: dict[str, int]
) -> dict[str, Any]:
    return {
        "sessionId": sess.id,
        "ownerName": sess.owner,
        "runnerScaleSet": scale_set_json,
        "messageQueueUrl": queue_url,
        "messageQueueAccessToken": token,
        "statistics": statistics,
    }


def runner_reference(runner: Runner) -> dict[str, Any]:
    return {"id": runner.id, "name": runner.name, "runnerScaleSetId": runner.scale_set_id or 0}


def job_message(message_type: str, tracked: ScaleSetJob, **extra: Any) -> dict[str, Any]:
    """One entry of a message body: `JobMessageBase` plus what the type adds (`acquireJobUrl`; `runnerId`
    and `runnerName`; `result`), which may also override a base field (a canceled attempt's `finishTime`)."""
    job = tracked.job
    workflow_file = job.run.name.lower().replace(" ", "-") + ".yml"
    base = {
        "messageType": message_type,
        "runnerRequestId": tracked.request_id,
        "repositoryName": job.repo.name,
        "ownerName": job.repo.owner.login,
        "jobId": tracked.job_guid,
        "jobWorkflowRef": f"{job.repo.full_name}/.github/workflows/{workflow_file}@refs/heads/main",
        "jobDisplayName": job.name,
        "workflowRunId": job.run.id,
        "eventName": "push",
        "requestLabels": list(job.labels),
        "queueTime": time(job.created_at),
        "scaleSetAssignTime": time(tracked.scale_set_assign_time),
        "runnerAssignTime": time(tracked.runner_assign_time),
        "finishTime": time(job.completed_at),
    }
    return {**base, **extra}
