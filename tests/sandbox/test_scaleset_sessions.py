"""Message sessions and the queue: one session per scale set, long polls, acknowledgements, token refresh.

Pinned from session_client.go (create, refresh on 401, delete; the poll's query and headers), listener.go (the
409 on a second session, acknowledge before handling), client.go (the message's shape) and what GitHub answers
an evicted session (actions/scaleset #123: refresh 404; ARC #4285: delete 400).
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from corral_sandbox.server import Sandbox
from tests.sandbox.scaleset_support import FAST, SCALE_SETS, ScaleSetClient, Session, checked, error
from tests.waiting import wait_until

REPO = "octo-org/app"


@pytest.fixture
def client(sandbox: Sandbox, control: httpx.Client) -> ScaleSetClient:
    control.put("/scalesets/settings", json=FAST).raise_for_status()
    return ScaleSetClient(sandbox).connect()


def submit(control: httpx.Client, labels: list[str], duration: float = 60) -> int:
    response = control.post("/jobs", json={"repo": REPO, "labels": labels, "duration": duration})
    response.raise_for_status()
    job_id: int = response.json()["id"]
    return job_id


def test_a_scale_set_has_one_session_until_it_is_deleted(client: ScaleSetClient) -> None:
    scale_set = client.create_scale_set("linux")
    sessions = f"{SCALE_SETS}/{scale_set['id']}/sessions"
    body = {"sessionId": "00000000-0000-0000-0000-000000000000", "ownerName": "host-a"}
    first = checked(client.call("POST", sessions, body=body), 200, "session")
    assert first["ownerName"] == "host-a"
    assert first["runnerScaleSet"]["id"] == scale_set["id"]
    assert first["messageQueueUrl"] == f"{client.sandbox.info.github_url}/_actions/broker/scalesets/message"
    assert set(first["statistics"].values()) == {0}

    conflict = error(client.call("POST", sessions, body={"ownerName": "host-b"}), 409, "SessionConflictException")
    assert conflict["typeName"] == (
        "GitHub.Actions.Runtime.WebApi.RunnerScaleSetSessionConflictException, GitHub.Actions.Runtime.WebApi"
    )
    assert conflict["message"] == "The runner scale set linux already has an active session for owner host-a."

    deleted = client.call("DELETE", f"{sessions}/{first['sessionId']}")
    assert (deleted.status_code, deleted.content) == (204, b"")
    expired = error(client.call("DELETE", f"{sessions}/{first['sessionId']}"), 400, "SessionExpiredException")
    assert expired["message"] == f"The session identifier {first['sessionId']} is not valid."
    second = checked(client.call("POST", sessions, body={"ownerName": "host-b"}), 200, "session")
    assert second["sessionId"] != first["sessionId"]
    error(client.call("POST", sessions, body={}), 400, "ArgumentException")
    error(client.call("POST", f"{SCALE_SETS}/999/sessions", body=body), 404, "RunnerScaleSetNotFoundException")


def test_a_session_left_by_a_crashed_owner_blocks_until_it_expires(
    client: ScaleSetClient, control: httpx.Client
) -> None:
    control.put("/scalesets/settings", json={"session_expiry_s": 0.3}).raise_for_status()
    scale_set = client.create_scale_set("linux")
    stale = client.open_session(scale_set["id"], owner="crashed-host")
    sessions = f"{SCALE_SETS}/{scale_set['id']}/sessions"
    error(client.call("POST", sessions, body={"ownerName": "restarted"}), 409, "SessionConflictException")
    # A session its owner keeps polling does not expire (these polls outlast the expiry time).
    for _ in range(5):
        assert client.receive(stale) is None
        error(client.call("POST", sessions, body={"ownerName": "restarted"}), 409, "SessionConflictException")

    def take_over() -> httpx.Response | None:
        response = client.call("POST", sessions, body={"ownerName": "restarted"})
        return response if response.status_code == 200 else None

    taken_over = wait_until(take_over, what="the abandoned session to expire")
    assert checked(taken_over, 200, "session")["ownerName"] == "restarted"
    error(client.get_message(stale), 401, "VssUnauthorizedException")
    error(client.refresh_session(scale_set["id"], stale), 404, "RunnerAdminException")


def test_a_poll_is_held_then_answers_202_or_200_as_soon_as_a_job_arrives(
    client: ScaleSetClient, control: httpx.Client
) -> None:
    scale_set = client.create_scale_set("linux")
    session = client.open_session(scale_set["id"])
    started = time.monotonic()
    empty = client.get_message(session)
    assert (empty.status_code, empty.content) == (202, b"")
    assert time.monotonic() - started >= FAST["long_poll_s"] * 0.9

    control.put("/scalesets/settings", json={"long_poll_s": 20}).raise_for_status()
    with ThreadPoolExecutor(1) as pool:
        polling = pool.submit(client.get_message, session)
        wait_until(lambda: control.get("/scalesets").json()[0]["session"]["idle_s"] == 0.0, what="the poll to be held")
        started = time.monotonic()
        job_id = submit(control, ["linux"])
        answered = polling.result(timeout=10)
    assert time.monotonic() - started < 10
    message = checked(answered, 200, "message")
    jobs = json.loads(message["body"])
    assert [(j["messageType"], j["runnerRequestId"]) for j in jobs] == [
        ("JobAssigned", control.get(f"/jobs/{job_id}").json()["scale_set"]["runner_request_id"])
    ]
    assert message["statistics"]["totalAssignedJobs"] == 1


def test_an_unacknowledged_message_comes_again_with_the_same_id(client: ScaleSetClient, control: httpx.Client) -> None:
    scale_set = client.create_scale_set("linux")
    session = client.open_session(scale_set["id"])
    submit(control, ["linux"])
    first = client.receive(session, ack=False)
    assert first is not None
    # lastMessageId does not acknowledge: only the delete does
    session.last_message_id = first["messageId"]
    again = client.receive(session, ack=False)
    assert again is not None
    assert (again["messageId"], again["body"], again["statistics"]) == (
        first["messageId"],
        first["body"],
        first["statistics"],
    )
    other = client.delete_message(session, first["messageId"] + 1000)
    assert other.status_code == 204
    assert client.receive(session, ack=False) == again
    assert client.delete_message(session, first["messageId"]).status_code == 204
    assert client.receive(session) is None


def test_a_lost_acknowledgement_answers_204_and_the_message_comes_again(
    client: ScaleSetClient, control: httpx.Client
) -> None:
    scale_set = client.create_scale_set("linux")
    session = client.open_session(scale_set["id"])
    submit(control, ["linux"])
    control.put("/faults", json={"world": {"scaleset_ack_drop_rate": 1.0}}).raise_for_status()
    first = client.receive(session)
    assert first is not None
    again = client.receive(session)
    assert again is not None and again["messageId"] == first["messageId"]
    assert control.get("/stats").json()["counters"]["scaleset_acks_dropped"] == 2
    control.put("/faults", json={"world": {}}).raise_for_status()
    assert client.receive(session) is not None
    assert client.receive(session) is None


def test_a_message_carries_at_most_50_job_messages(client: ScaleSetClient, control: httpx.Client) -> None:
    scale_set = client.create_scale_set("linux")
    session = client.open_session(scale_set["id"])
    jobs = [{"repo": REPO, "labels": ["linux"], "duration": 60} for _ in range(60)]
    control.post("/trace", json={"jobs": jobs}).raise_for_status()
    wait_until(lambda: len(control.get("/jobs").json()) == 60, what="60 jobs queued")
    first, second = client.receive(session), client.receive(session)
    assert first is not None and second is not None
    assert (len(first["jobs"]), len(second["jobs"])) == (50, 10)
    assert second["messageId"] > first["messageId"]
    assert len({j["runnerRequestId"] for j in session.seen}) == 60
    assert second["statistics"]["totalAssignedJobs"] == 60


def test_an_expired_queue_token_gets_401_until_the_session_is_refreshed(
    client: ScaleSetClient, control: httpx.Client
) -> None:
    scale_set = client.create_scale_set("linux")
    session = client.open_session(scale_set["id"])
    submit(control, ["linux"])
    assert control.post(f"/scalesets/{scale_set['id']}/session/expire-token").json() == {"expired": 1}
    error(client.get_message(session), 401, "VssUnauthorizedException")
    error(client.delete_message(session, 1), 401, "VssUnauthorizedException")
    error(client.acquire(scale_set["id"], session, [1]), 401, "VssUnauthorizedException")
    old_token = session.token
    assert client.refresh_session(scale_set["id"], session).status_code == 200
    assert session.token != old_token
    message = client.receive(session)
    assert message is not None and message["jobs"][0]["messageType"] == "JobAssigned"
    # the refresh retired the older token
    error(client.get_message(Session(session.id, session.queue_url, old_token)), 401, "VssUnauthorizedException")

    control.put("/scalesets/settings", json={"queue_token_ttl_s": 0.2}).raise_for_status()
    assert client.refresh_session(scale_set["id"], session).status_code == 200
    wait_until(lambda: client.get_message(session).status_code == 401, what="the short-lived queue token to expire")


def test_an_evicted_session_gets_401_then_404_on_refresh_and_a_new_one_opens(
    client: ScaleSetClient, control: httpx.Client
) -> None:
    scale_set = client.create_scale_set("linux")
    session = client.open_session(scale_set["id"], owner="host-a")
    control.put("/scalesets/settings", json={"long_poll_s": 20}).raise_for_status()
    with ThreadPoolExecutor(1) as pool:
        polling = pool.submit(client.get_message, session)
        wait_until(lambda: control.get("/scalesets").json()[0]["session"]["idle_s"] == 0.0, what="a held poll")
        assert control.post(f"/scalesets/{scale_set['id']}/session/kill").json() == {"killed": True}
        error(polling.result(timeout=10), 401, "VssUnauthorizedException")
    error(client.get_message(session), 401, "VssUnauthorizedException")
    refused = error(client.refresh_session(scale_set["id"], session), 404, "RunnerAdminException")
    assert refused["message"] == "runner referenced a session ID that doesn't exist in redis"
    error(client.call("DELETE", f"{SCALE_SETS}/{scale_set['id']}/sessions/{session.id}"), 400, "SessionExpired")
    assert control.post(f"/scalesets/{scale_set['id']}/session/kill").status_code == 404
    client.open_session(scale_set["id"], owner="host-b")


def test_the_poll_checks_its_parameters(client: ScaleSetClient) -> None:
    scale_set = client.create_scale_set("linux")
    session = client.open_session(scale_set["id"])
    for capacity in ("-1", "many"):
        response = client.http.get(
            session.queue_url,
            headers={"Authorization": f"Bearer {session.token}", "X-ScaleSetMaxCapacity": capacity},
        )
        error(response, 400, "ArgumentException")
    error(
        client.http.get(
            session.queue_url, params={"lastMessageId": "x"}, headers={"Authorization": f"Bearer {session.token}"}
        ),
        400,
        "ArgumentException",
    )
    assert client.get_message(session, capacity=None).status_code == 202
    error(client.http.get(session.queue_url), 401, "VssUnauthorizedException")
