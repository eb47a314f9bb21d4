"""The scale-set protocol as `actions/scaleset`'s Go client speaks it, in Python, for the sandbox's tests.

`ScaleSetClient` builds every request the way `client.go` and `session_client.go` do: the registration
token from the REST API, the exchange with `RemoteAuth`, Actions service paths joined onto the service URL
with `api-version=6.0-preview` added, the message poll with `lastMessageId` only once a message was seen,
`Accept: application/json; api-version=6.0-preview` and `X-ScaleSetMaxCapacity`, the delete at
`{queue path}/{messageId}`. `acquire` formats its URL as ARC's `AcquireJobs` does (`"%s/%s"`, so `//`).
Every answer body can be checked against the JSON Schema written from `types.go`
(`tests/fixtures/scaleset/actions-service.schema.json`).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
from jsonschema import Draft202012Validator

from corral_sandbox.server import Sandbox
from tests.waiting import wait_until

API_VERSION = "6.0-preview"
SCHEMA_PATH = Path(__file__).parent.parent / "fixtures" / "scaleset" / "actions-service.schema.json"
SCALE_SETS = "_apis/runtime/runnerscalesets"
AGENTS = "_apis/distributedtask/pools/0/agents"
FAST = {"long_poll_s": 0.1}
"""Settings every test starts from: GitHub holds a poll ~50 s, these tests do not wait that long for a 202."""


@cache
def _schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(SCHEMA_PATH.read_text())
    Draft202012Validator.check_schema(loaded)
    return loaded


def validate(definition: str, instance: Any) -> Any:
    """Check `instance` against `$defs/<definition>` of the vendored schema; returns it for chaining."""
    schema = {**_schema(), "$ref": f"#/$defs/{definition}"}
    Draft202012Validator(schema).validate(instance)
    return instance


def checked(response: httpx.Response, status: int, definition: str | None) -> Any:
    """The response's JSON after asserting its status and validating its body (None for an empty body)."""
    assert response.status_code == status, (response.status_code, response.text)
    if definition is None:
        assert not response.content
        return None
    return validate(definition, response.json())


def error(response: httpx.Response, status: int, type_fragment: str) -> dict[str, Any]:
    """An Actions service error: its status, and the exception the Go client would match on."""
    body: dict[str, Any] = checked(response, status, "actionsError")
    assert type_fragment in body["typeName"], body
    return body


@dataclass
class Session:
    id: str
    queue_url: str
    token: str
    last_message_id: int = 0
    seen: list[dict[str, Any]] = field(default_factory=list)
    """Every job message received so far, in order."""


class ScaleSetClient:
    """One manager's connection to the Actions service of one scope (`octo-org`, `octo-org/app`, ...)."""

    def __init__(self, sandbox: Sandbox, config_path: str = "octo-org", *, hosted_api: bool = False) -> None:
        self.sandbox = sandbox
        self.config_path = config_path
        self.config_url = f"{sandbox.info.github_url}/{config_path}"
        # The Go client sends a host that is not github.com to Enterprise Server's /api/v3.
        self.api = sandbox.info.github_url if hosted_api else sandbox.info.github_enterprise_url
        self.http = httpx.Client(timeout=30)
        self.service_url = ""
        self.admin_token = ""

    def close(self) -> None:
        self.http.close()

    # -- authentication ------------------------------------------------------------------------

    def registration_token(self) -> str:
        parts = self.config_path.split("/")
        if parts[0] == "enterprises":
            path = f"/enterprises/{parts[1]}"
        elif len(parts) == 2:
            path = f"/repos/{parts[0]}/{parts[1]}"
        else:
            path = f"/orgs/{parts[0]}"
        response = self.http.post(
            f"{self.api}{path}/actions/runners/registration-token",
            headers={"Authorization": f"Bearer {self.sandbox.info.pat}"},
        )
        assert response.status_code == 201, response.text
        token: str = response.json()["token"]
        return token

    def exchange(self, registration_token: str, url: str | None = None) -> httpx.Response:
        return self.http.post(
            f"{self.api}/actions/runner-registration",
            headers={"Authorization": f"RemoteAuth {registration_token}", "Content-Type": "application/json"},
            json={"url": url or self.config_url, "runner_event": "register"},
        )

    def connect(self) -> ScaleSetClient:
        connection = checked(self.exchange(self.registration_token()), 201, "adminConnection")
        self.service_url, self.admin_token = connection["url"], connection["token"]
        return self

    # -- the Actions service -------------------------------------------------------------------

    def url(self, path: str, params: dict[str, Any] | None = None, *, api_version: bool = True) -> str:
        """`newActionsServiceRequest`: the path joined onto the service URL, its query kept, api-version added."""
        split = urlsplit(path)
        query = dict(httpx.QueryParams(split.query))
        query.update({k: str(v) for k, v in (params or {}).items()})
        if api_version:
            query.setdefault("api-version", API_VERSION)
        joined = self.service_url.rstrip("/") + "/" + split.path.lstrip("/")
        return str(httpx.URL(joined, params=query))

    def call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, Any] | None = None,
        token: str | None = None,
        api_version: bool = True,
    ) -> httpx.Response:
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token or self.admin_token}"}
        content = json.dumps(body).encode() if body is not None else None
        return self.http.request(
            method, self.url(path, params, api_version=api_version), headers=headers, content=content
        )

    def create_scale_set(self, name: str, *, labels: list[str] | None = None, group_id: int = 1) -> dict[str, Any]:
        body = {
            "name": name,
            "runnerGroupId": group_id,
            "labels": [{"name": label, "type": "System"} for label in (labels or [name])],
            "RunnerSetting": {"ephemeral": True, "isElastic": True, "disableUpdate": True},
        }
        created: dict[str, Any] = checked(self.call("POST", SCALE_SETS, body=body), 200, "runnerScaleSet")
        return created

    def jit_config(self, scale_set_id: int, name: str) -> dict[str, Any]:
        response = self.call(
            "POST", f"{SCALE_SETS}/{scale_set_id}/generatejitconfig", body={"name": name, "workFolder": "_work"}
        )
        config: dict[str, Any] = checked(response, 200, "jitConfig")
        return config

    # -- sessions and the queue ----------------------------------------------------------------

    def open_session(self, scale_set_id: int, owner: str = "listener-1") -> Session:
        response = self.call("POST", f"{SCALE_SETS}/{scale_set_id}/sessions", body={"ownerName": owner})
        created = checked(response, 200, "session")
        return Session(created["sessionId"], created["messageQueueUrl"], created["messageQueueAccessToken"])

    def refresh_session(self, scale_set_id: int, session: Session) -> httpx.Response:
        response = self.call("PATCH", f"{SCALE_SETS}/{scale_set_id}/sessions/{session.id}")
        if response.status_code == 200:
            refreshed = validate("session", response.json())
            session.queue_url, session.token = refreshed["messageQueueUrl"], refreshed["messageQueueAccessToken"]
        return response

    def get_message(self, session: Session, capacity: int | None = 10) -> httpx.Response:
        """`getMessage`: lastMessageId only when above 0, api-version in Accept, capacity in a header."""
        params = {"lastMessageId": str(session.last_message_id)} if session.last_message_id > 0 else {}
        headers = {
            "Accept": f"application/json; api-version={API_VERSION}",
            "Authorization": f"Bearer {session.token}",
        }
        if capacity is not None:
            headers["X-ScaleSetMaxCapacity"] = str(capacity)
        return self.http.get(httpx.URL(session.queue_url).copy_merge_params(params), headers=headers)

    def delete_message(self, session: Session, message_id: int) -> httpx.Response:
        """`deleteMessage`: the id appended to the queue URL's path, its query kept."""
        split = urlsplit(session.queue_url)
        url = urlunsplit(split._replace(path=f"{split.path}/{message_id}"))
        return self.http.delete(
            url, headers={"Content-Type": "application/json", "Authorization": f"Bearer {session.token}"}
        )

    def acquire(self, scale_set_id: int, session: Session, request_ids: list[int]) -> httpx.Response:
        """ARC's `AcquireJobs`: `fmt.Sprintf("%s/%s/%d/acquirejobs?api-version=6.0-preview", ...)`."""
        url = f"{self.service_url}/{SCALE_SETS}/{scale_set_id}/acquirejobs?api-version={API_VERSION}"
        return self.http.post(
            url,
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {session.token}"},
            content=json.dumps(request_ids).encode(),
        )

    def receive(self, session: Session, *, capacity: int | None = 10, ack: bool = True) -> dict[str, Any] | None:
        """One poll as the reference listener makes it: the message (validated, body decoded into `jobs`) or
        None on 202; acknowledged first unless `ack` is False."""
        response = self.get_message(session, capacity)
        if response.status_code == 202:
            assert not response.content
            return None
        message: dict[str, Any] = checked(response, 200, "message")
        jobs = validate("jobMessageBatch", json.loads(message["body"])) if message["body"] else []
        message["jobs"] = jobs
        if ack:
            session.last_message_id = message["messageId"]
            assert self.delete_message(session, message["messageId"]).status_code == 204
            session.seen.extend(jobs)
        return message


def job_messages(session: Session, message_type: str) -> list[dict[str, Any]]:
    return [m for m in session.seen if m["messageType"] == message_type]


def boot_server(conn: Any, name: str, user_data: str) -> Any:
    """Boot a server through openstacksdk as corral does, its user data carrying a runner's JIT config."""
    image = conn.image.find_image("ubuntu-24.04-runner", ignore_missing=False)
    flavor = conn.compute.find_flavor("m1.small", ignore_missing=False)
    network = conn.network.find_network("private", ignore_missing=False)
    return conn.compute.create_server(
        name=name,
        image_id=image.id,
        flavor_id=flavor.id,
        networks=[{"uuid": network.id}],
        user_data=base64.b64encode(user_data.encode()).decode(),
    )


def start_runner(sandbox: Sandbox, config: dict[str, Any], server_id: str) -> None:
    """A guest that starts a scale set's runner (the world's bridge, without booting through the cloud);
    returns once the runner came online (and may already have taken a job)."""
    github = sandbox.world.github
    runner_id = config["runner"]["id"]
    sandbox.call(lambda: sandbox.world.server_active(server_id, config["encodedJITConfig"].encode()))

    def online() -> bool:
        runner = github.scheduler.runners.get(runner_id)
        return runner is None or runner.status == "online"

    wait_until(lambda: sandbox.call(online), what=f"runner {runner_id} online")
