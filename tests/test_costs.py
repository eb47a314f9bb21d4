"""Count, don't time: what intake, a pass and a job cost, in SQL statements and calls to each far end.

Counts do not depend on the machine or its load, so each is asserted exactly: a change that adds a statement
per job, or a listing per pass, fails here on any machine, and the new figure goes in with a word on why.
`bench/costs.py` prints the same counts. Passes are driven by `LocalCorral.settle()` alone: the periodic look,
the missed-job scan and the stale-job check are set an hour apart, so nothing runs that the test did not ask for.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.counting import StatementCounter, calls_since, sandbox_calls
from corral.cloud.openstack import OpenStackProvider
from corral.config import parse_config
from corral.github.client import GitHubClient
from corral.metrics import REGISTRY
from corral.model import Delivery, DeliveryOutcome, IntakeResult, JobState, JobUpdate, Reason, RunnerState
from corral.store.database import Store
from corral.store.intake import Intake
from corral_sandbox.local import LocalCorral, corral_config, pool_spec
from corral_sandbox.server import Sandbox
from tests.minimal_config import minimal_config
from tests.seeding import start_with_idle_runners
from tests.store_urls import postgres_store_heard, postgres_url, sqlite_url
from tests.waiting import wait_until

QUIET = {"reconcile_interval": "1h", "missed_job_scan": "1h", "stale_job_check": "1h"}
"""No look, scan or check but the ones a test asks for."""
LIVE = [state for state in RunnerState if state is not RunnerState.DELETED]

LOOK_CALLS = {
    "openstack": {
        "GET /compute/v2.1/servers/detail": 1,  # every owned server, one page
        "GET /compute/v2.1/limits": 1,  # Nova's quota headroom
        "GET /network/v2.0/quotas/{project_id}/details": 1,  # Neutron's (ports)
    },
    "github": {"GET /orgs/{org}/actions/runners": 1},  # the scope's registrations, one page of 100
}
"""One look at both far ends with up to 100 runners: the whole cost of a pass with nothing to do."""


def delivery(job_id: int, status: JobState, runner_name: str | None = None) -> Delivery:
    job = JobUpdate(job_id, "octo/app", ("small",), status, "small", runner_name=runner_name)
    return Delivery(id=f"{status.value}-{job_id}", event="workflow_job", action=status.value, job=job)


def record(
    store: Store,
    deliveries: list[Delivery],
    runner_pool: Callable[[str], str | None] = lambda _: None,
    held_elsewhere: Callable[[str], bool] = lambda _: False,
) -> list[DeliveryOutcome]:
    """Deliveries arriving together, recorded through the webhook endpoint's own group commit."""

    async def arrive() -> list[DeliveryOutcome]:
        heard: list[IntakeResult] = []
        intake = Intake(store, heard.append, runner_pool=runner_pool, held_elsewhere=held_elsewhere)
        return list(await asyncio.gather(*(intake.record(item) for item in deliveries)))

    return asyncio.run(arrive())


@pytest.mark.parametrize("batch", [1, 10, 500, 1000])
def test_webhook_intake_costs_two_statements_per_group_of_up_to_500(store: Store, batch: int) -> None:
    counter = StatementCounter(store.engine)
    queued = [delivery(job_id, JobState.QUEUED) for job_id in range(1, batch + 1)]
    groups = -(-batch // 500)  # `tuning.intake_group`: 500 deliveries per transaction at most
    with counter.counting():
        assert record(store, queued) == [DeliveryOutcome.RECORDED] * batch
    # Per group: the deliveries, each known id left out (INSERT deliveries ... ON CONFLICT DO NOTHING
    # RETURNING id: which were new, in one statement), the jobs they carry (INSERT jobs ... ON CONFLICT DO
    # UPDATE, one executemany). Until 2026-12-06 a SELECT deliveries came first: three a group.
    expected = {"INSERT deliveries": groups, "INSERT jobs": groups}
    assert dict(counter.kinds) == expected, counter.texts

    taken = [delivery(job_id, JobState.IN_PROGRESS, f"runner-{job_id}") for job_id in range(1, batch + 1)]
    with counter.counting():
        assert record(store, taken) == [DeliveryOutcome.RECORDED] * batch
    # The same two, and the pools of the runners the jobs name (SELECT runners), to wake them too: names
    # corral did not give (another manager's, or of a pool no longer in the config) are looked up...
    assert dict(counter.kinds) == {**expected, "SELECT runners": groups}, counter.texts
    finished = [delivery(job_id, JobState.COMPLETED, f"corral-small-{job_id:010x}") for job_id in range(1, batch + 1)]
    with counter.counting():
        assert record(store, finished, minimal_config().pool_of_runner) == [DeliveryOutcome.RECORDED] * batch
    # ...and corral's own are read from their names (`<name_prefix>-<pool>-<id>`): no query.
    assert dict(counter.kinds) == expected, counter.texts

    with counter.counting():
        assert record(store, queued) == [DeliveryOutcome.DUPLICATE] * batch
    # A redelivery costs only the insert that finds it known.
    assert dict(counter.kinds) == {"INSERT deliveries": groups}, counter.texts


def test_webhooks_for_pools_other_replicas_hold_wake_them_in_the_intakes_own_transaction() -> None:
    """With replicas on PostgreSQL, a group of webhooks for pools another replica holds tells that replica in
    the transaction that records them: one statement more (every pool's NOTIFY at once), no transaction more,
    and the owners hear of it at the commit (until 2026-12-06 each group was followed by a transaction of its
    own that sent the NOTIFY, and each pool cost a statement)."""
    pools = ("small", "large", "gpu")
    queued = [
        Delivery(id=f"queued-{job_id}", event="workflow_job", action="queued", job=job)
        for job_id in range(1, 31)
        for job in [JobUpdate(job_id, "octo/app", ("x",), JobState.QUEUED, pools[job_id % 3])]
    ]
    with postgres_store_heard() as (store, listener):
        counter = StatementCounter(store.engine)
        with counter.counting():
            outcomes = record(store, queued, held_elsewhere=lambda pool: pool != "small")
        assert outcomes == [DeliveryOutcome.RECORDED] * len(queued)
        notified = [notice.payload for notice in listener.notifies(timeout=5, stop_after=2)]
    notifies = [statement for statement in counter.texts if "pg_notify" in statement]
    assert (counter.total, len(notifies)) == (3, 1), counter.texts
    assert counter.kinds["INSERT deliveries"] == counter.kinds["INSERT jobs"] == 1, counter.texts
    # The pool held here is woken by its own worker, not by a message to every replica.
    assert sorted(notified) == ["gpu", "large"]


def quiet_corral(
    sandbox: Sandbox, tmp_path: Path, database_url: str | None = None, *, idle: int = 0, **pool: Any
) -> LocalCorral:
    """corral with one pool, `small`, started once `idle` idle runners of it are in place (`tests.seeding`), and
    ready."""
    url = database_url or f"sqlite:///{tmp_path / 'corral.db'}"
    document = corral_config(sandbox.info, url, {"small": pool_spec(["small"], **pool)}, **QUIET)
    document["cloud"]["max_concurrent_creates"] = 32
    corral = LocalCorral(sandbox.info, tmp_path / "corral.yaml", document)
    start_with_idle_runners(corral, sandbox, "small", idle)

    def ready() -> bool:
        """Every pool checked (a network listing) and its status row written: start-up's work, not a pass's."""
        corral.settle()
        with corral.api() as api:
            return api.get("/readyz").status_code == 200

    wait_until(ready, timeout=60, what="corral ready")
    corral.settle()
    return corral


def runners_judged(pool: str) -> float:
    """`corral_runners_judged_total` of `pool` so far, in this process (the tests' corral runs in it)."""
    return REGISTRY.get_sample_value("corral_runners_judged_total", {"pool": pool}) or 0.0


def measured_pass(corral: LocalCorral, control: httpx.Client) -> tuple[StatementCounter, dict[str, dict[str, int]]]:
    """One look and the pass after it, with the statements and calls they cost."""
    counter = StatementCounter(corral.service.store.engine)
    before = sandbox_calls(control)
    with counter.counting():
        corral.settle()
    return counter, calls_since(control, before)


TIMED = ("replicas", "pool_leases")
"""Tables only the lease keeper writes, on its own timer (a third of `lease_time`): not a pass's work."""


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_a_pass_with_nothing_to_do_costs_one_look_and_seven_statements(
    sandbox: Sandbox, control: httpx.Client, tmp_path: Path, database: str
) -> None:
    with sqlite_url(tmp_path) if database == "sqlite" else postgres_url() as url:
        corral = quiet_corral(sandbox, tmp_path, url)
        try:
            counter, calls = measured_pass(corral, control)
        finally:
            corral.stop()
    assert calls == LOOK_CALLS
    # Before the look, the scopes live runners are in (SELECT DISTINCT runners.scope); after it, the pools
    # that have workers (SELECT DISTINCT runners.pool) and the job gauges (SELECT jobs ... GROUP BY status).
    # Then two passes of the pool, two statements each: its live runners with the jobs naming them (SELECT
    # runners JOIN jobs) and its queued jobs, first page (SELECT jobs). Two passes, because `settle()` waits
    # for a pass that starts after it asked, and the look's own wake had already started one.
    expected = {"SELECT runners": 4, "SELECT jobs": 3}
    if database == "postgresql":
        # Replicas may share the database: after each look, every pool's status row (an operator's drain on
        # another replica, other replicas' quota waits).
        expected["SELECT pool_status"] = 1
    work = {kind: count for kind, count in counter.kinds.items() if kind.split()[-1] not in TIMED}
    assert work == expected, counter.texts


@pytest.mark.parametrize(
    ("runners", "pages"),
    [
        # 10 runners: one page of servers and of registrations.
        (10, {"servers": 1, "registrations": 1}),
        # 1,000: Nova's page holds 1,000 servers, so a second (empty) page ends the listing; GitHub's holds
        # 100 (10 pages).
        (1000, {"servers": 2, "registrations": 10}),
    ],
    ids=["10", "1000"],
)
def test_a_pass_over_idle_runners_grows_only_by_pages(
    sandbox: Sandbox,
    control: httpx.Client,
    tmp_path: Path,
    runners: int,
    pages: dict[str, int],
) -> None:
    control.put("/rate-limit", json={"remaining": 10_000_000}).raise_for_status()
    corral = quiet_corral(sandbox, tmp_path, idle=runners, min_idle=runners, max_runners=runners)
    try:
        # The seeded fleet is what corral's own creates would have left: it keeps it as it is.
        assert len(corral.runners(states=[RunnerState.IDLE])) == runners
        assert len(corral.runners()) == runners
        # Every server, as in a full listing: what a look after `changes-since` lists depends on when the
        # servers last changed (tests/unit/test_server_listing.py has its exact figures).
        provider = corral.service.cloud.provider(corral.service.config.default_cloud)
        assert isinstance(provider, OpenStackProvider)
        provider.listing.incremental = False
        judged_before = runners_judged("small")
        counter, calls = measured_pass(corral, control)
        judged = runners_judged("small") - judged_before
    finally:
        corral.stop()
    # The runners were judged to stay on the look before, and this look saw nothing of them change (the full
    # listing's servers are equal to those listed before, the registrations' pages answered 304): no runner is
    # judged again (`judge.Staying`), and one statement reads them all (`store.known_runners`).
    assert judged == 0
    assert calls == {
        "openstack": {
            **LOOK_CALLS["openstack"],
            "GET /compute/v2.1/servers/detail": pages["servers"],
        },
        "github": {"GET /orgs/{org}/actions/runners": pages["registrations"]},
    }
    # One runner read more than an empty pool, after the look: which listed servers have live runners (orphans
    # are the others), every live runner's id in one statement, however many servers were listed. Which
    # registrations belong to runners already deleted is asked only of offline ones, and these idle runners are
    # all online.
    assert dict(counter.kinds) == {"SELECT runners": 5, "SELECT jobs": 3}, counter.texts


def test_one_job_end_to_end_costs_four_calls_and_two_writes_per_move(
    sandbox: Sandbox, control: httpx.Client, tmp_path: Path
) -> None:
    corral = quiet_corral(sandbox, tmp_path)
    try:
        before = sandbox_calls(control)
        counter = StatementCounter(corral.service.store.engine)
        with counter.counting():
            job = control.post(
                "/jobs", json={"repo": "octo-org/app", "labels": ["self-hosted", "small"], "duration": 0}
            )
            job_id = job.raise_for_status().json()["id"]
            looks = 0

            def served() -> bool:
                nonlocal looks
                corral.settle()
                looks += 1
                done = control.get(f"/jobs/{job_id}").json()["status"] == "completed"
                return done and not corral.runners(states=LIVE)

            wait_until(served, timeout=60, what="the job served and its runner deleted")
        calls = calls_since(control, before)
        (runner,) = corral.runners()
        events = corral.events(runner.id)
    finally:
        corral.stop()
    assert calls == {
        "openstack": {
            "POST /compute/v2.1/servers": 1,  # the runner's server
            "DELETE /compute/v2.1/servers/{server_id}": 1,  # deleted once its job is done
            **{endpoint: looks for endpoint in LOOK_CALLS["openstack"]},
        },
        "github": {
            "GET /orgs/{org}/actions/runner-groups": 1,  # the org's default group, read once per corral
            "POST /orgs/{org}/actions/runners/generate-jitconfig": 1,  # the runner's JIT config
            "GET /orgs/{org}/actions/runners": looks,
        },
    }
    path = [(event.to_state, event.reason) for event in events]
    # The job takes no time, so which of these moves a runner makes depends on what each look and pass see
    # first (the server active, the registration online, the job's in_progress webhook): each is right, and
    # each must cost the same as any other move.
    seen_or_not = {
        (RunnerState.BOOTING, Reason.SERVER_ACTIVE),
        (RunnerState.IDLE, Reason.CAME_ONLINE),
        (RunnerState.BUSY, Reason.TOOK_JOB),
    }
    # Its end is heard from the job's completed webhook (job_done) or seen by a look first: its server shut down
    # (runner_exited) or, on a loaded machine, its registration already gone before that (deregistered).
    ended = {
        (RunnerState.FINISHED, Reason.RUNNER_EXITED): (RunnerState.FINISHED, Reason.JOB_DONE),
        (RunnerState.FINISHED, Reason.DEREGISTERED): (RunnerState.FINISHED, Reason.JOB_DONE),
    }
    assert [ended.get(move, move) for move in path if move not in seen_or_not] == [
        (RunnerState.PENDING, Reason.DEMAND),
        (RunnerState.CREATING, Reason.CREATE_REQUESTED),
        (RunnerState.BOOTING, Reason.SERVER_CREATED),
        (RunnerState.FINISHED, Reason.JOB_DONE),
        (RunnerState.DELETING, Reason.CLEANUP),
        (RunnerState.DELETED, Reason.GONE),
    ]
    moves = sum(1 for event in events if event.from_state not in (None, event.to_state))
    writes = {kind: count for kind, count in counter.kinds.items() if not kind.startswith("SELECT")}
    assert writes == {
        "INSERT deliveries": 3,  # the job's queued, in_progress and completed webhooks, one group each
        "INSERT jobs": 3,  # each one's job update (an upsert)
        "INSERT runners": 1,  # the intent, written before the create...
        "UPDATE jobs": 1,  # ...counted on the job it was started for...
        # ...with its event; then each move's event, and the boot's step the look saw (server ACTIVE), if it
        # saw one: an event alone, no move
        "INSERT runner_events": len(events),
        "UPDATE runners": moves,  # each move: one guarded UPDATE ... RETURNING
    }, (path, counter.texts)


class ImportSearches:
    """Counts the module searches (`find_spec` on `sys.meta_path`) made while it is installed: an import of a
    module already loaded makes none, a failed one searches every path entry, each time it is tried."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        self.names.append(name)

    def __enter__(self) -> ImportSearches:
        sys.meta_path.insert(0, self)  # a finder that never finds: it only counts
        return self

    def __exit__(self, *exc: object) -> None:
        sys.meta_path.remove(self)


def test_a_github_call_searches_for_no_module(sandbox: Sandbox, tmp_path: Path) -> None:
    """httpcore asks `import sniffio` which async library runs it, for every lock and event it makes (several
    per request); without sniffio installed each ask was a failed import that searched the whole sys.path
    (33 us against 0.7 us, 15% of a GitHub call's CPU). Twenty calls after the first search for nothing."""
    document = corral_config(sandbox.info, f"sqlite:///{tmp_path / 'corral.db'}", {"small": pool_spec(["small"])})
    config = parse_config(document)
    scope = config.pools["small"].scope

    async def main() -> list[str]:
        github = GitHubClient(config.github)
        await github.list_runners(scope)  # the first call imports what it needs once
        with ImportSearches() as searches:
            for _ in range(20):
                await github.list_runners(scope)
        await github.aclose()
        return searches.names

    assert asyncio.run(main()) == []


def test_a_look_at_registrations_that_did_not_change_costs_no_rate_limit(
    sandbox: Sandbox, control: httpx.Client, tmp_path: Path
) -> None:
    """Each page of a runner listing is asked again with the ETag GitHub gave it: an unchanged page comes back
    304, which GitHub does not count against the rate limit. 250 runners are three pages; listed again, three
    304s and not one request counted; one more runner registered, and every page is read again (each says how
    many runners there are)."""
    document = corral_config(sandbox.info, f"sqlite:///{tmp_path / 'corral.db'}", {"small": pool_spec(["small"])})
    config = parse_config(document)
    scope = config.pools["small"].scope

    def remaining() -> float | None:
        return REGISTRY.get_sample_value("corral_github_rate_limit_remaining", {"resource": "core"})

    async def main() -> list[tuple[int, float | None, dict[str, int]]]:
        github = GitHubClient(config.github)
        for n in range(250):
            await github.generate_jit_config(scope, f"seeded-{n:03d}", ["small"], "Default")
        looks = []
        for register_one_more in (False, False, True):
            if register_one_more:
                await github.generate_jit_config(scope, "one-more", ["small"], "Default")
            before = sandbox_calls(control)
            runners = await github.list_runners(scope)
            looks.append((len(runners), remaining(), calls_since(control, before)["github"]))
        await github.aclose()
        return looks

    (first, left_first, calls_first), (second, left_second, calls_second), (third, left_third, calls_third) = (
        asyncio.run(main())
    )
    listing = {"GET /orgs/{org}/actions/runners": 3}
    assert (first, second, third) == (250, 250, 251)
    assert calls_first == calls_second == calls_third == listing
    assert left_first is not None and left_second == left_first, "three 304s cost nothing"
    # Each page carries the listing's `total_count`, as GitHub's do: one more runner changes every page.
    assert left_third == left_first - 4, "the new registration, and the three pages read again"
