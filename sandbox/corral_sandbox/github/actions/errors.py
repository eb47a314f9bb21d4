"""Errors as the Actions service renders them: a .NET exception, `typeName` and `message` being what clients read.

The Go client (`actions/scaleset`, `ParseActionsErrorFromResponse`) decodes `{"typeName", "message"}` and
matches on the type name (`AgentExistsException`, `AgentNotFoundException`, `JobStillRunningException`, a
409's `RunnerScaleSetSessionConflictException`); the rest of the body is the shape Azure DevOps-derived
services answer with. Type names and messages below were seen in GitHub's answers quoted in the clients' issues
where a source is given; the others are marked as the sandbox's choice.
"""

from __future__ import annotations

from fastapi.responses import JSONResponse

RUNTIME = "GitHub.Actions.Runtime.WebApi"
DISTRIBUTED_TASK = "GitHub.DistributedTask.WebApi"


def _runtime(exception: str) -> str:
    return f"{RUNTIME}.{exception}, {RUNTIME}"


def _task(exception: str) -> str:
    return f"{DISTRIBUTED_TASK}.{exception}, {DISTRIBUTED_TASK}"


class ActionsError(Exception):
    def __init__(self, status: int, type_name: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.type_name = type_name
        self.message = message

    def response(self) -> JSONResponse:
        return actions_error_response(self.status, self.type_name, self.message)


def actions_error_response(status: int, type_name: str, message: str) -> JSONResponse:
    short = type_name.split(",", 1)[0].rsplit(".", 1)[-1]
    body = {
        "$id": "1",
        "innerException": None,
        "message": message,
        "typeName": type_name,
        "typeKey": short,
        "errorCode": 0,
        "eventId": 3000,
    }
    return JSONResponse(body, status_code=status)


def fault_response(status: int, message: str) -> JSONResponse:
    """The `ErrorResponder` for endpoint faults injected on the Actions service."""
    return actions_error_response(status, "System.Exception, System.Private.CoreLib", message)


def unauthorized() -> ActionsError:
    """A missing, forged, expired or revoked admin or queue token (sandbox's wording; the Go client keys on 401)."""
    return ActionsError(
        401,
        "Microsoft.VisualStudio.Services.Common.VssUnauthorizedException, Microsoft.VisualStudio.Services.Common",
        "VS30063: You are not authorized to access this resource: the access token is missing, invalid or expired.",
    )


def preview_required() -> ActionsError:
    """Azure DevOps answers a preview resource asked for without `-preview` in its api-version this way."""
    return ActionsError(
        400,
        "Microsoft.VisualStudio.Services.WebApi.VssInvalidPreviewVersionException, "
        "Microsoft.VisualStudio.Services.WebApi",
        "The requested version of the resource is under preview. The -preview flag must be supplied in the "
        "api-version for such requests. For example: 6.0-preview",
    )


def bad_request(message: str) -> ActionsError:
    """A body or parameter the service cannot use (sandbox's choice of type)."""
    return ActionsError(400, "System.ArgumentException, System.Private.CoreLib", message)


def scale_set_not_found(scale_set_id: int | str) -> ActionsError:
    """Seen: ARC #3935, #4370 (`404 ... No runner scale set found with identifier 6.`)."""
    return ActionsError(
        404, _runtime("RunnerScaleSetNotFoundException"), f"No runner scale set found with identifier {scale_set_id}."
    )


def scale_set_exists(name: str, group_name: str) -> ActionsError:
    """Seen: a duplicate name in a runner group answers `400 RunnerScaleSetExistsException` (message: ours)."""
    return ActionsError(
        400,
        _runtime("RunnerScaleSetExistsException"),
        f"A runner scale set named {name} already exists in runner group {group_name}.",
    )


def group_not_found(group_id: int) -> ActionsError:
    """An unknown `runnerGroupId` (type and message: the sandbox's choice; runner groups are agent pools)."""
    return ActionsError(404, _task("TaskAgentPoolNotFoundException"), f"Runner group {group_id} not found.")


def session_conflict(scale_set_name: str, owner: str) -> ActionsError:
    """Seen: ARC #3351 (`409 ... The runner scale set gha-rs already has an active session for owner ...`)."""
    return ActionsError(
        409,
        _runtime("RunnerScaleSetSessionConflictException"),
        f"The runner scale set {scale_set_name} already has an active session for owner {owner}.",
    )


def session_expired(session_id: str) -> ActionsError:
    """Seen: deleting a session GitHub had dropped, ARC #4285 (`400 ... The session identifier ... is not valid.`)."""
    return ActionsError(
        400,
        _runtime("RunnerScaleSetSessionExpiredException"),
        f"The session identifier {session_id} is not valid.",
    )


def session_unknown() -> ActionsError:
    """Seen: refreshing a session the broker evicted, actions/scaleset #123 (`404 with RunnerAdminException: runner
    referenced a session ID that doesn't exist in redis`)."""
    return ActionsError(404, "RunnerAdminException", "runner referenced a session ID that doesn't exist in redis")


def agent_not_found(runner_id: int | str) -> ActionsError:
    """The type the Go client maps to `RunnerNotFoundError` (message: the sandbox's)."""
    return ActionsError(404, _task("AgentNotFoundException"), f"No runner found with identifier {runner_id}.")


def agent_exists(name: str) -> ActionsError:
    """The type the Go client maps to `RunnerExistsError` (status and message: the sandbox's)."""
    return ActionsError(409, _task("AgentExistsException"), f"A runner with the name {name} already exists.")


def job_still_running(name: str) -> ActionsError:
    """The type the Go client maps to `JobStillRunningError` (status and message: the sandbox's)."""
    return ActionsError(
        400,
        _task("JobStillRunningException"),
        f"The runner {name} is running a job and cannot be removed.",
    )
