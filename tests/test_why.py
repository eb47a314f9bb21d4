""" "Why is this job waiting?": every blocking reason driven in the sandbox and reported as its code and a
sentence naming what holds the job, by `GET /api/v1/jobs/{id}` and `corral why`; and a served job's timeline
from the delivery that announced it to its completion."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import pytest

from corral.cli import main
from corral.clock import utcnow
from corral.config import PoolConfig
from corral.explain import WaitCode, WaitFacts, explain
from corral.model import Job, JobState
from corral.policy import DemandTuning
from corral_sandbox.local import LocalCorral, pool_spec
from corral_sandbox.server import Sandbox
from tests.conftest import StartCorral
from tests.test_lifecycle import converge
from tests.test_no_job_left_behind import completed, queue_job, sandbox_job
from tests.waiting import wait_until

LONG_S = 120.0
"""A job that runs for the rest of the test, holding its runner."""


def story(corral: LocalCorral, job_id: int) -> dict[str, Any]:
    with corral.api() as api:
        answer = api.get(f"/api/v1/jobs/{job_id}")
        answer.raise_for_status()
        body: dict[str, Any] = answer.json()
        return body


def waiting(corral: LocalCorral, job_id: int) -> dict[str, Any] | None:
    found: dict[str, Any] | None = story(corral, job_id)["waiting"]
    return found


def blocked_reason(corral: LocalCorral, job_id: int, code: WaitCode, timeout: float = 30.0) -> dict[str, Any]:
    """Wait until the job's reported blocking reason is `code`, and return that very report: read again, it
    may already say something else (a backoff of a second can end between two reads on a busy machine)."""
    seen: list[dict[str, Any]] = []

    def reported() -> bool:
        reason = waiting(corral, job_id) or {}
        if reason.get("code") != code.value:
            return False
        seen.append(reason)
        return True

    converge(corral, reported, f"{code} reported", timeout)
    return seen[-1]


def blocked_by(corral: LocalCorral, job_id: int, code: WaitCode, timeout: float = 30.0) -> str:
    """Wait until the job's reported blocking reason is `code`; its sentence."""
    return str(blocked_reason(corral, job_id, code, timeout)["sentence"])


def running(control: httpx.Client, job_id: int) -> bool:
    return bool(sandbox_job(control, job_id)["status"] == "in_progress")


def test_a_job_no_pool_fits_names_the_nearest_pool_and_the_labels_it_lacks(
    sandbox: Sandbox, control: httpx.Client, start_corral: StartCorral
) -> None:
    corral = start_corral({"small": pool_spec(["small"]), "large": pool_spec(["large", "big"])}, default_pool="small")
    job_id = queue_job(control, ["large", "gpu"])
    sentence = blocked_by(corral, job_id, WaitCode.NO_POOL)
    assert "pool large" in sentence and "lacks gpu" in sentence


def test_a_drained_pool_and_a_full_pool_are_named(
    sandbox: Sandbox, control: httpx.Client, start_corral: StartCorral
) -> None:
    corral = start_corral(
        {"small": pool_spec(["small"], max_runners=1), "spare": pool_spec(["spare"])}, default_pool="small"
    )
    first = queue_job(control, ["small"], duration=LONG_S)
    wait_until(lambda: running(control, first), timeout=30, what="the pool's one runner busy")
    second = queue_job(control, ["small"])
    assert "pool small is at max_runners (1)" in blocked_by(corral, second, WaitCode.POOL_FULL)
    with corral.api() as api:
        api.post("/api/v1/pools/spare/drain").raise_for_status()
    drained = queue_job(control, ["spare"])
    assert "pool spare is drained" in blocked_by(corral, drained, WaitCode.POOL_DRAINED)


def test_a_repository_at_its_cap_is_named_while_another_repository_is_served(
    sandbox: Sandbox, control: httpx.Client, start_corral: StartCorral
) -> None:
    corral = start_corral({"shared": pool_spec(["shared"], max_runners_per_repo=1)}, default_pool="shared")
    first = queue_job(control, ["shared"], duration=LONG_S)
    wait_until(lambda: running(control, first), timeout=30, what="the repository's one runner busy")
    second = queue_job(control, ["shared"])
    sentence = blocked_by(corral, second, WaitCode.REPOSITORY_CAP)
    assert "repository octo-org/app holds 1" in sentence and "max_runners_per_repo 1" in sentence
    other = control.post("/jobs", json={"repo": "octo-org/site", "labels": ["shared"], "duration": 0}).json()["id"]
    wait_until(lambda: completed(control, other), timeout=30, what="another repository's job served meanwhile")
    assert waiting(corral, second) is not None and not completed(control, second)


def test_a_full_quota_names_the_resource(sandbox: Sandbox, control: httpx.Client, start_corral: StartCorral) -> None:
    control.put("/quota", json={"instances": 1}).raise_for_status()
    corral = start_corral({"small": pool_spec(["small"])}, default_pool="small")
    first = queue_job(control, ["small"], duration=LONG_S)
    wait_until(lambda: running(control, first), timeout=30, what="the quota's one server busy")
    second = queue_job(control, ["small"])
    assert "(instances)" in blocked_by(corral, second, WaitCode.QUOTA)


def test_a_pool_backing_off_after_cloud_errors_names_the_last_error(
    sandbox: Sandbox, control: httpx.Client, start_corral: StartCorral
) -> None:
    broken = {"endpoints": [{"match": "openstack POST /compute/v2.1/servers", "error_rate": 1.0, "status": 500}]}
    control.put("/faults", json=broken).raise_for_status()
    corral = start_corral({"small": pool_spec(["small"])}, default_pool="small")
    job_id = queue_job(control, ["small"])
    reason = blocked_reason(corral, job_id, WaitCode.CLOUD_BACKOFF)
    assert "backs off after failed creates until" in reason["sentence"] and "create failed" in reason["sentence"]
    assert reason["until"] is not None


def test_a_spent_github_rate_limit_says_until_when(
    sandbox: Sandbox, control: httpx.Client, start_corral: StartCorral
) -> None:
    corral = start_corral({"small": pool_spec(["small"])}, default_pool="small")
    control.put("/rate-limit", json={"remaining": 0, "reset_in": 600}).raise_for_status()
    job_id = queue_job(control, ["small"])
    assert "rate limit" in blocked_by(corral, job_id, WaitCode.GITHUB_RATE_LIMIT)


def test_a_secondary_rate_limit_pauses_github_calls_until_its_retry_after_then_the_job_is_served(
    sandbox: Sandbox, control: httpx.Client, start_corral: StartCorral
) -> None:
    """GitHub's secondary limits (over 100 requests at once; over 900 points a minute to one endpoint, which is
    180 JIT configs) answer 403 with a `Retry-After` while the hourly budget is far from spent. corral pauses the
    credential until then, as at the primary limit, rather than meet the limit again every pass; the job waits
    for that, says so, and is served after it."""
    corral = start_corral({"small": pool_spec(["small"])}, default_pool="small", reconcile_interval="1s")
    limited = {"secondary_rate_limit_rate": 1.0, "secondary_retry_after": 10}
    control.put("/faults", json={"world": limited}).raise_for_status()
    job_id = queue_job(control, ["small"])
    assert "rate limit" in blocked_by(corral, job_id, WaitCode.GITHUB_RATE_LIMIT)
    control.put("/faults", json={"world": {"secondary_rate_limit_rate": 0.0}}).raise_for_status()
    wait_until(lambda: completed(control, job_id), timeout=45, what="the job, served after the Retry-After")
    refused = control.get("/stats").json()["counters"]["github_secondary_rate_limits"]
    # The calls already on their way when the limit closed (a JIT config, a listing) meet it; no pass after.
    assert 1 <= refused <= 4, f"corral should wait for the Retry-After, not keep calling: {refused} refused calls"


def test_a_booting_runner_is_named_then_the_timeline_tells_the_whole_way(
    sandbox: Sandbox, control: httpx.Client, start_corral: StartCorral, capsys: pytest.CaptureFixture[str]
) -> None:
    # The server is ACTIVE after a second; its runner starts only when the test says so (`/runners/start`),
    # so the window in which it boots on an ACTIVE server stays open until corral has been seen naming it.
    control.put("/timings", json={"boot_delay": 1.0, "register_delay": 3600.0}).raise_for_status()
    corral = start_corral({"small": pool_spec(["small"])}, default_pool="small")
    job_id = queue_job(control, ["small"])
    sentence = blocked_by(corral, job_id, WaitCode.RUNNER_BOOTING)
    assert "waiting for its runner corral-small-" in sentence

    def booting_on_an_active_server() -> bool:
        """The wait names the ACTIVE server (the last look's word) and the timeline holds that step (the pass
        after it writes it): only then may the runner start, or its job could start before the step is noted."""
        told = story(corral, job_id)
        reason = told["waiting"]
        noted = any(entry["event"] == "server_active" for entry in told["timeline"])
        return reason is not None and "server ACTIVE" in reason["sentence"] and noted

    converge(corral, booting_on_an_active_server, "the runner booting in an ACTIVE server, the step noted")
    assert control.post("/runners/start").json() == {"started": 1}
    wait_until(lambda: completed(control, job_id), timeout=30, what="the job served")
    converge(corral, lambda: story(corral, job_id)["status"] == "completed", "corral knows it completed")
    told = story(corral, job_id)
    assert told["waiting"] is None
    events = [entry["event"] for entry in told["timeline"]]
    expected = [
        *("received", "matched", "runner_requested", "create_requested", "server_created", "server_active"),
        "started",
    ]
    assert [event for event in events if event in expected] == expected, events
    assert events[-1] in ("completed", "runner_deleted", "runner_deleting", "runner_finished")
    received = next(entry for entry in told["timeline"] if entry["event"] == "received")
    assert received["detail"].startswith("webhook delivery ")
    assert told["source"].startswith("webhook:")

    run_url = f"https://github.com/octo-org/app/actions/runs/{told['run_id']}"
    assert main(["why", run_url, "--url", corral.url, "--token", corral.token]) == 0
    printed = capsys.readouterr().out
    assert f"job {job_id} of octo-org/app [small]: completed, small" in printed
    assert "server_created" in printed


def test_why_refuses_what_is_not_a_job_and_answers_404_for_an_unknown_one(
    sandbox: Sandbox, start_corral: StartCorral
) -> None:
    corral = start_corral({"small": pool_spec(["small"])}, default_pool="small")
    with pytest.raises(SystemExit, match="neither a job id nor a GitHub Actions job or run URL"):
        main(["why", "https://github.com/octo-org/app/pulls/3", "--url", corral.url, "--token", corral.token])
    with pytest.raises(SystemExit, match=r"no job 999 is known to corral; for a scale-set pool.s job"):
        main(["why", "999", "--url", corral.url, "--token", corral.token])
    with corral.api() as api:
        assert api.get("/api/v1/jobs/0").status_code == 422
        assert api.get(f"/api/v1/jobs/{2**63}").status_code == 422


TUNING = DemandTuning(
    stale_after=timedelta(seconds=60),
    max_runners_per_job=3,
    max_hold=timedelta(seconds=600),
    busy_covers_job=timedelta(seconds=30),
    confirm_after=timedelta(seconds=5),
)


def pool_of(**overrides: Any) -> PoolConfig:
    spec = {"scope": {"org": "octo-org"}, "labels": ["small"], "image": "ubuntu", "flavor": "m1.small"}
    return PoolConfig.model_validate({**spec, **overrides})


NOW = utcnow()
"""The moment the judgement below is made at (fixed: the jobs are built when the tests are collected)."""


def queued(**overrides: Any) -> Job:
    fields: dict[str, Any] = {
        "id": 7,
        "repository": "octo-org/app",
        "labels": ("small",),
        "status": JobState.QUEUED,
        "pool": "small",
        "received_at": NOW,
    }
    fields.update(overrides)
    return Job(**fields)


@pytest.mark.parametrize(
    ("job", "code", "words"),
    [
        (queued(runners_diverted=3, diverted_at=NOW), WaitCode.HELD, "went to other jobs 3 times"),
        (queued(maybe_taken_at=NOW), WaitCode.PRESUMED_TAKEN, "probably taken by another"),
        (queued(received_at=NOW - timedelta(hours=1)), WaitCode.UNCONFIRMED, "whether it is still queued"),
        (queued(), WaitCode.NEXT_PASS, "next pass"),
        (queued(status=JobState.IN_PROGRESS), None, ""),
    ],
)
def test_what_only_corral_s_own_judgement_holds_back_is_explained(job: Job, code: WaitCode | None, words: str) -> None:
    """A job whose runners keep going elsewhere, one probably taken already, or one so old GitHub must first
    confirm it: reasons corral gives itself, hard to pin in a sandbox run, so checked on the facts."""
    reason = explain(WaitFacts(job=job, now=NOW, pools={"small": pool_of()}, tuning=TUNING))
    if code is None:
        assert reason is None
    else:
        assert reason is not None and reason.code is code and words in reason.sentence


def test_a_job_for_a_scale_set_is_said_to_wait_for_the_scale_set_not_for_a_pool() -> None:
    """Such a job's webhook records it without a pool (GitHub routes it to the scale set by name)."""
    pools = {"small": pool_of(), "ci": pool_of(labels=["ci"], intake="scale_set")}
    reason = explain(WaitFacts(job=queued(pool=None, labels=("ci",)), now=NOW, pools=pools, tuning=TUNING))
    assert reason is not None and reason.code is WaitCode.SCALE_SET and "pool ci is a scale set" in reason.sentence
    unmatched = explain(WaitFacts(job=queued(pool=None, labels=("gpu",)), now=NOW, pools=pools, tuning=TUNING))
    assert unmatched is not None and unmatched.code is WaitCode.NO_POOL and "pool small" in unmatched.sentence
