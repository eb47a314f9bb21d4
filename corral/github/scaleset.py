"""GitHub's runner scale-set protocol: the Actions service calls a `scale_set` pool makes.

A scale-set pool is not told of its jobs by webhooks: corral registers a runner scale set, opens a message
session on it and long-polls the session's queue. This is GitHub's own protocol (the `actions/scaleset` Go
client is the reference; `docs/DESIGN.md` cites it), spoken here with httpx because githubkit covers only
the REST API:

1. a registration token from the REST API is exchanged (`POST /actions/runner-registration`, `RemoteAuth`)
   for the Actions service's URL and an admin token (a JWT), renewed a minute before it expires;
2. the admin token finds or creates the runner group's scale set, JIT configs and sessions;
3. a session's own queue token reads and acknowledges messages; a 401 there means it expired, and the
   session is refreshed (`PATCH`) and the call made once more.

Errors are typed for the listener's recovery: `SessionConflict` (409: another session holds the scale
set), `NotFound` (the scale set or session is gone on GitHub's side), `QueueTokenExpired`. Tokens are
credentials: they appear in no message, exception or `repr`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
import jwt

from corral.config import ScopeConfig
from corral.github.client import GitHubClient, GitHubError, JitConfig
from corral.metrics import GITHUB_CALL_SECONDS, GITHUB_CALLS
from corral.model import JobMessage

API_VERSION = "6.0-preview"
SCALE_SETS = "_apis/runtime/runnerscalesets"
RUNNER_GROUPS = "_apis/runtime/runnergroups/"
AGENTS = "_apis/distributedtask/pools/0/agents"
RENEW_BEFORE_S = 60.0
"""The admin token is renewed this long before it expires, as GitHub's own client does."""
LONG_POLL_S = 50.0
"""GitHub holds a message request open about this long before answering 202 (nothing)."""
MAX_CAPACITY_HEADER = "X-ScaleSetMaxCapacity"
SESSION_CONFLICT = "RunnerScaleSetSessionConflictException"


class ScaleSetError(GitHubError):
    """The Actions service refused or failed a call."""


class SessionConflict(ScaleSetError):
    """409: the scale set already has a session (another replica's, or one a crashed corral left behind,
    which GitHub ends once its owner stops polling)."""


class NotFound(ScaleSetError):
    """404: the scale set (GitHub deletes idle ones after some days) or the session is gone."""


class QueueTokenExpired(ScaleSetError):
    """401 on a message call: the session's queue token expired; refreshing the session renews it."""


@dataclass(frozen=True)
class Statistics:
    """What the service counts for a scale set: its jobs by stage and its runners."""

    available: int = 0
    acquired: int = 0
    assigned: int = 0
    running: int = 0
    registered: int = 0
    busy: int = 0
    idle: int = 0

    @classmethod
    def of(cls, data: Mapping[str, Any] | None) -> Statistics:
        data = data or {}
        return cls(
            available=int(data.get("totalAvailableJobs", 0)),
            acquired=int(data.get("totalAcquiredJobs", 0)),
            assigned=int(data.get("totalAssignedJobs", 0)),
            running=int(data.get("totalRunningJobs", 0)),
            registered=int(data.get("totalRegisteredRunners", 0)),
            busy=int(data.get("totalBusyRunners", 0)),
            idle=int(data.get("totalIdleRunners", 0)),
        )


@dataclass(frozen=True)
class ScaleSet:
    id: int
    name: str
    runner_group_id: int
    labels: tuple[str, ...]

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> ScaleSet:
        labels = tuple(str(label.get("name", "")) for label in data.get("labels") or [])
        return cls(int(data["id"]), str(data["name"]), int(data.get("runnerGroupId", 0)), labels)


@dataclass(frozen=True)
class Session:
    """A message session: the queue to poll and the token for it (a credential, kept out of `repr`)."""

    id: str
    scale_set_id: int
    queue_url: str
    queue_token: str = field(repr=False)
    statistics: Statistics


def job_message_of(data: Mapping[str, Any]) -> JobMessage:
    """One item of a message's body as `types.go` names its fields."""
    runner_id = data.get("runnerId")
    return JobMessage(
        kind=str(data.get("messageType", "")),
        runner_request_id=int(data.get("runnerRequestId", 0)),
        job_id=str(data.get("jobId", "")),
        repository=str(data.get("repositoryName", "")),
        owner=str(data.get("ownerName", "")),
        workflow_run_id=int(data.get("workflowRunId", 0) or 0),
        labels=tuple(str(label) for label in data.get("requestLabels") or []),
        runner_id=int(runner_id) if runner_id else None,
        runner_name=data.get("runnerName") or None,
        result=data.get("result") or None,
        workflow_ref=_text(data.get("jobWorkflowRef")),
        display_name=_text(data.get("jobDisplayName")),
        queue_time=_moment(data.get("queueTime")),
    )


def _text(value: object, limit: int = 256) -> str | None:
    """A free-text field as GitHub sent it, kept to what the store holds."""
    return value[:limit] if isinstance(value, str) and value else None


def _moment(value: object) -> datetime | None:
    """A message's timestamp; None for GitHub's "no time" (`0001-01-01T00:00:00Z`) or anything unreadable."""
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None or moment.year < 2000:
        return None
    return moment.astimezone(UTC)


@dataclass(frozen=True)
class QueueMessage:
    """A batch from the session's queue: up to 50 job messages and the statistics when it was sent."""

    id: int
    statistics: Statistics
    jobs: tuple[JobMessage, ...]


def _message_of(data: Mapping[str, Any]) -> QueueMessage:
    if data.get("messageType") != "RunnerScaleSetJobMessages":
        raise ScaleSetError(f"unexpected message type {str(data.get('messageType'))[:64]!r}")
    body = data.get("body") or "[]"
    try:
        batch = json.loads(body)
    except json.JSONDecodeError:
        raise ScaleSetError("a message whose body is not JSON") from None
    if not isinstance(batch, list):
        raise ScaleSetError("a message whose body is not a list of job messages")
    jobs = tuple(job_message_of(item) for item in batch if isinstance(item, dict))
    return QueueMessage(int(data["messageId"]), Statistics.of(data.get("statistics")), jobs)


def _error(method: str, path: str, response: httpx.Response) -> ScaleSetError:
    """The service's error as ours: its type name and message (never a token: those are not echoed)."""
    detail = ""
    type_name = ""
    try:
        body = response.json()
        if isinstance(body, dict):
            detail = str(body.get("message") or "")[:300]
            type_name = str(body.get("typeName") or body.get("typeKey") or "")
    except ValueError:
        detail = response.text[:200]
    text = f"{method} {path}: HTTP {response.status_code}: {detail or response.reason_phrase}"
    status = response.status_code
    if status == 409 or SESSION_CONFLICT in type_name:
        return SessionConflict(text, status=status)
    if status == 404:
        return NotFound(text, status=status)
    return ScaleSetError(text, status=status)


def _endpoint(method: str, path: str) -> str:
    """A bounded metric label: ids and uuids folded."""
    parts = path.split("?", 1)[0].strip("/").split("/")
    folded = ["{id}" if part.isdigit() or (len(part) == 36 and part.count("-") == 4) else part for part in parts]
    return f"{method} /" + "/".join(folded)


class ActionsService:
    """One scope's connection to GitHub's Actions service, as an admin of its scale sets.

    `poll_timeout_s` bounds a message request: GitHub answers within its long-poll window (about 50 s), and
    anything longer means the connection is dead.
    """

    def __init__(
        self,
        github: GitHubClient,
        scope: ScopeConfig,
        *,
        timeout_s: float = 15.0,
        poll_timeout_s: float = LONG_POLL_S + 10.0,
        clock: Any = time.time,
    ) -> None:
        self._github = github
        self._scope = scope
        self._http = httpx.AsyncClient(timeout=timeout_s)
        self._poll_timeout_s = poll_timeout_s
        self._clock = clock
        self._url: str | None = None
        self._token: str | None = None
        self._expires_at = 0.0

    async def aclose(self) -> None:
        await self._http.aclose()

    # -- the admin connection ---------------------------------------------------------------------

    async def _admin(self) -> tuple[str, str]:
        """The service URL and a fresh admin token, exchanged anew a minute before the old one expires."""
        if self._url is None or self._token is None or self._clock() > self._expires_at - RENEW_BEFORE_S:
            registration = await self._github.registration_token(self._scope)
            path = "/actions/runner-registration"
            answer = await self._send(
                "POST",
                self._github_api(path),
                path,
                headers={"Authorization": f"RemoteAuth {registration}"},
                json={"url": self._github.web_url(self._scope), "runner_event": "register"},
            )
            if not answer.is_success:
                raise _error("POST", path, answer)
            data = answer.json()
            url, token = data.get("url"), data.get("token")
            if not isinstance(url, str) or not isinstance(token, str):
                raise ScaleSetError(f"POST {path}: no Actions service URL or token in the answer")
            self._url, self._token = url.rstrip("/") + "/", token
            self._expires_at = _expiry(token, default=self._clock() + 3600.0)
        return self._url, self._token

    def _github_api(self, path: str) -> str:
        return self._github.api_url.rstrip("/") + path

    async def _service(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str | int] | None = None,
        body: Any = None,
        expect: int = 200,
    ) -> httpx.Response:
        """A call with the admin token; a 401 (the token revoked early) renews it and tries once more."""
        for attempt in (1, 2):
            url, token = await self._admin()
            response = await self._send(
                method,
                url + path,
                path,
                params={**(params or {}), "api-version": API_VERSION},
                headers={"Authorization": f"Bearer {token}"},
                json=body,
            )
            if response.status_code == 401 and attempt == 1:
                self._expires_at = 0.0
                continue
            if response.status_code != expect:
                raise _error(method, path, response)
            return response
        raise AssertionError("unreachable")

    async def _send(
        self, method: str, url: str, path: str, *, timeout_s: float | None = None, **kwargs: Any
    ) -> httpx.Response:
        endpoint = _endpoint(method, path)
        started = time.perf_counter()
        status = "error"
        try:
            if timeout_s is not None:
                kwargs["timeout"] = timeout_s
            response = await self._http.request(method, url, **kwargs)
            status = str(response.status_code)
            return response
        except httpx.HTTPError as exc:
            raise ScaleSetError(f"{method} {path}: {type(exc).__name__}") from None
        finally:
            GITHUB_CALLS.labels(endpoint, status).inc()
            GITHUB_CALL_SECONDS.labels(endpoint).observe(time.perf_counter() - started)

    # -- scale sets -------------------------------------------------------------------------------

    async def runner_group_id(self, name: str) -> int:
        response = await self._service("GET", RUNNER_GROUPS, params={"groupName": name})
        groups = response.json().get("value") or []
        if len(groups) != 1:
            raise ScaleSetError(f"runner group {name!r} does not exist at {self._scope.key}; create it")
        return int(groups[0]["id"])

    async def find_scale_set(self, runner_group_id: int, name: str) -> ScaleSet | None:
        response = await self._service("GET", SCALE_SETS, params={"runnerGroupId": runner_group_id, "name": name})
        found = response.json().get("value") or []
        return ScaleSet.of(found[0]) if found else None

    async def create_scale_set(self, name: str, runner_group_id: int, labels: Sequence[str]) -> ScaleSet:
        response = await self._service("POST", SCALE_SETS, body=_scale_set_body(name, runner_group_id, labels))
        return ScaleSet.of(response.json())

    async def update_scale_set(
        self, scale_set_id: int, name: str, runner_group_id: int, labels: Sequence[str]
    ) -> ScaleSet:
        body = _scale_set_body(name, runner_group_id, labels)
        response = await self._service("PATCH", f"{SCALE_SETS}/{scale_set_id}", body=body)
        return ScaleSet.of(response.json())

    async def get_scale_set(self, scale_set_id: int) -> ScaleSet:
        return ScaleSet.of((await self._service("GET", f"{SCALE_SETS}/{scale_set_id}")).json())

    async def delete_scale_set(self, scale_set_id: int) -> None:
        await self._service("DELETE", f"{SCALE_SETS}/{scale_set_id}", expect=204)

    async def generate_jit_config(self, scale_set_id: int, name: str) -> JitConfig:
        path = f"{SCALE_SETS}/{scale_set_id}/generatejitconfig"
        data = (await self._service("POST", path, body={"name": name, "workFolder": "_work"})).json()
        runner = data.get("runner") or {}
        return JitConfig(int(runner["id"]), str(runner["name"]), str(data["encodedJITConfig"]))

    async def remove_runner(self, runner_id: int) -> None:
        await self._service("DELETE", f"{AGENTS}/{runner_id}", expect=204)

    # -- sessions and messages --------------------------------------------------------------------

    async def create_session(self, scale_set_id: int, owner: str) -> Session:
        response = await self._service("POST", f"{SCALE_SETS}/{scale_set_id}/sessions", body={"ownerName": owner})
        return _session_of(scale_set_id, response.json())

    async def refresh_session(self, session: Session) -> Session:
        path = f"{SCALE_SETS}/{session.scale_set_id}/sessions/{session.id}"
        return _session_of(session.scale_set_id, (await self._service("PATCH", path)).json())

    async def delete_session(self, session: Session) -> None:
        path = f"{SCALE_SETS}/{session.scale_set_id}/sessions/{session.id}"
        await self._service("DELETE", path, expect=204)

    async def get_message(self, session: Session, last_message_id: int, max_capacity: int) -> QueueMessage | None:
        """The next message after `last_message_id`, or None when the long poll ended with nothing."""
        params = {"lastMessageId": last_message_id} if last_message_id > 0 else {}
        response = await self._send(
            "GET",
            session.queue_url,
            "/message-queue",
            params=params,
            headers={
                "Authorization": f"Bearer {session.queue_token}",
                "Accept": f"application/json; api-version={API_VERSION}",
                MAX_CAPACITY_HEADER: str(max_capacity),
            },
            timeout_s=self._poll_timeout_s,
        )
        if response.status_code == 202:
            return None
        if response.status_code == 401:
            raise QueueTokenExpired("GET message queue: HTTP 401: the queue token expired", status=401)
        if response.status_code != 200:
            raise _error("GET", "message queue", response)
        return _message_of(response.json())

    async def delete_message(self, session: Session, message_id: int) -> None:
        """Acknowledge a message: until then the queue hands it out again."""
        url = httpx.URL(session.queue_url)
        target = url.copy_with(path=f"{url.path.rstrip('/')}/{message_id}")
        response = await self._send(
            "DELETE",
            str(target),
            "/message-queue/{id}",
            headers={"Authorization": f"Bearer {session.queue_token}", "Content-Type": "application/json"},
        )
        if response.status_code == 401:
            raise QueueTokenExpired("DELETE message: HTTP 401: the queue token expired", status=401)
        if response.status_code != 204:
            raise _error("DELETE", "message", response)

    async def acquire_jobs(self, session: Session, runner_request_ids: Sequence[int]) -> list[int]:
        """Ask for these available jobs (Enterprise Server assigns only what is acquired); those granted."""
        url, _ = await self._admin()
        path = f"{SCALE_SETS}/{session.scale_set_id}/acquirejobs"
        response = await self._send(
            "POST",
            url + path,
            path,
            params={"api-version": API_VERSION},
            headers={"Authorization": f"Bearer {session.queue_token}"},
            json=list(runner_request_ids),
        )
        if response.status_code == 401:
            raise QueueTokenExpired(f"POST {path}: HTTP 401: the queue token expired", status=401)
        if response.status_code != 200:
            raise _error("POST", path, response)
        return [int(value) for value in response.json().get("value") or []]


def _scale_set_body(name: str, runner_group_id: int, labels: Sequence[str]) -> dict[str, Any]:
    return {
        "name": name,
        "runnerGroupId": runner_group_id,
        "labels": [{"type": "System", "name": label} for label in labels],
        "RunnerSetting": {"ephemeral": True, "isElastic": True, "disableUpdate": True},
    }


def _session_of(scale_set_id: int, data: Mapping[str, Any]) -> Session:
    try:
        return Session(
            id=str(data["sessionId"]),
            scale_set_id=scale_set_id,
            queue_url=str(data["messageQueueUrl"]),
            queue_token=str(data["messageQueueAccessToken"]),
            statistics=Statistics.of(data.get("statistics")),
        )
    except KeyError as exc:
        raise ScaleSetError(f"a session answer without {exc.args[0]}") from None


def _expiry(token: str, *, default: float) -> float:
    """When a JWT expires (its `exp`, read without verifying: it is the service's to check, not ours)."""
    try:
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError:
        return default
    exp = claims.get("exp")
    return float(exp) if isinstance(exp, int | float) else default
