"""Faults at the far ends: capacity recovers, failed runners stop counting, nothing is left behind."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from corral.cloud.clouds import CloudSet
from corral.cloud.openstack import OpenStackProvider
from corral.engine.backoff import LogOnce
from corral.engine.checks import PoolChecker
from corral.metrics import REGISTRY
from corral_sandbox.local import LocalCorral, corral_config, pool_spec, sandbox_connection
from corral_sandbox.server import Sandbox
from tests.conftest import StartCorral
from tests.minimal_config import running
from tests.test_lifecycle import cloud_servers, converge, online_per_pool, pools_view


@pytest.fixture
def corral_for(start_corral: StartCorral) -> Callable[..., LocalCorral]:
    """A corral with one pool, `small`, shaped by the keyword arguments."""

    def start(**pool: Any) -> LocalCorral:
        return start_corral({"small": pool_spec(["small"], **pool)})

    return start


def runner_failures(corral: LocalCorral) -> list[str]:
    with corral.api() as api:
        runners = api.get("/api/v1/runners", params={"include_deleted": True}).json()
    return [runner["message"] or "" for runner in runners]


def events_of_failed(corral: LocalCorral) -> list[str]:
    with corral.api() as api:
        runners = api.get("/api/v1/runners", params={"include_deleted": True}).json()
        reasons = []
        for runner in runners:
            events = api.get(f"/api/v1/runners/{runner['id']}/events").json()
            reasons += [event["message"] or "" for event in events if event["to_state"] == "failed"]
    return reasons


def failed_events(corral: LocalCorral) -> list[tuple[str, str, str]]:
    """Every runner's move to `failed`, oldest runner first: (runner name, reason, message)."""
    failed = []
    with corral.api() as api:
        runners = api.get("/api/v1/runners", params={"include_deleted": True}).json()
        for runner in sorted(runners, key=lambda runner: runner["created_at"]):
            events = api.get(f"/api/v1/runners/{runner['id']}/events").json()
            failed += [(runner["name"], e["reason"], e["message"] or "") for e in events if e["to_state"] == "failed"]
    return failed


def test_boot_failures_are_deleted_and_capacity_recovers(
    sandbox: Sandbox, control: httpx.Client, corral_for: Any
) -> None:
    control.put("/faults", json={"world": {"boot_failure_rate": 1.0}}).raise_for_status()
    corral = corral_for(min_idle=2, max_runners=2)
    converge(corral, lambda: any("ERROR" in r for r in events_of_failed(corral)), "boot failures seen")
    control.put("/faults", json={}).raise_for_status()
    converge(corral, lambda: online_per_pool(sandbox) == {"small": 2}, "capacity back at max_runners", timeout=60)
    converge(corral, lambda: sorted(cloud_servers(sandbox)["small"]) == ["ACTIVE", "ACTIVE"], "ERROR servers gone")


def test_runners_that_never_register_are_removed_after_the_bootstrap_timeout(
    sandbox: Sandbox, control: httpx.Client, corral_for: Any
) -> None:
    control.put("/faults", json={"world": {"never_register_rate": 1.0}}).raise_for_status()
    corral = corral_for(min_idle=1, bootstrap_timeout="1s")
    converge(corral, lambda: any("bootstrap_timeout" in r for r in events_of_failed(corral)), "timeout seen")
    control.put("/faults", json={}).raise_for_status()
    converge(corral, lambda: online_per_pool(sandbox) == {"small": 1}, "a working runner replaces it", timeout=60)
    converge(corral, lambda: cloud_servers(sandbox) == {"small": ["ACTIVE"]}, "the silent server is deleted")


def test_a_burst_of_cloud_errors_is_survived(sandbox: Sandbox, control: httpx.Client, corral_for: Any) -> None:
    faults = {"endpoints": [{"match": "openstack * /compute/*", "error_rate": 1.0, "status": 503, "count": 12}]}
    control.put("/faults", json=faults).raise_for_status()
    corral = corral_for(min_idle=3)
    converge(corral, lambda: online_per_pool(sandbox) == {"small": 3}, "three runners despite 503s", timeout=90)
    assert control.get("/stats").json()["counters"]["openstack_injected_errors"] == 12


def create_calls(control: httpx.Client) -> int:
    return int(control.get("/stats").json()["api_calls"]["openstack"].get("POST /compute/v2.1/servers", 0))


def test_a_full_quota_it_can_see_makes_the_pool_wait_without_a_refused_create(
    sandbox: Sandbox, control: httpx.Client, corral_for: Any
) -> None:
    control.put("/quota", json={"instances": 1}).raise_for_status()
    corral = corral_for(min_idle=3)
    converge(corral, lambda: online_per_pool(sandbox) == {"small": 1}, "one runner fits the quota")
    converge(corral, lambda: pools_view(corral)["small"]["quota_short"] == ["instances"], "pool says it waits")
    view = pools_view(corral)["small"]
    assert view["ready"] and (view["quota_fits"], view["quota_limited_by"]) == (0, ["instances"])
    assert create_calls(control) == 1, "no create the quota would refuse was sent"
    control.put("/quota", json={"instances": 10}).raise_for_status()
    converge(corral, lambda: online_per_pool(sandbox) == {"small": 3}, "grown once the quota was raised")
    assert create_calls(control) == 3 and not any("quota" in reason for reason in runner_failures(corral))
    assert pools_view(corral)["small"]["quota_short"] == []


def test_a_full_port_quota_makes_the_pool_wait_without_a_refused_create(
    sandbox: Sandbox, control: httpx.Client, corral_for: Any
) -> None:
    """Each runner's server takes a port on its network: Neutron's port quota is planned for like Nova's."""
    control.put("/quota", json={"ports": 1}).raise_for_status()
    corral = corral_for(min_idle=3)
    converge(corral, lambda: online_per_pool(sandbox) == {"small": 1}, "one runner fits the port quota")
    converge(corral, lambda: pools_view(corral)["small"]["quota_short"] == ["ports"], "pool says it waits")
    assert pools_view(corral)["small"]["quota_limited_by"] == ["ports"]
    assert create_calls(control) == 1, "no create the port quota would refuse was sent"
    control.put("/quota", json={"ports": -1}).raise_for_status()
    converge(corral, lambda: online_per_pool(sandbox) == {"small": 3}, "grown once the quota was raised")
    assert not any("quota" in reason or "ports" in reason for reason in runner_failures(corral))


def test_a_quota_refusal_it_could_not_foresee_makes_the_pool_wait_then_recover(
    sandbox: Sandbox, control: httpx.Client, corral_for: Any
) -> None:
    """With the limits unreadable, corral cannot plan within them: Nova's refusals back the pool off."""
    unreadable = {"endpoints": [{"match": "openstack GET /compute/v2.1/limits", "error_rate": 1.0, "status": 403}]}
    control.put("/faults", json=unreadable).raise_for_status()
    control.put("/quota", json={"instances": 1}).raise_for_status()
    corral = corral_for(min_idle=3)
    converge(corral, lambda: online_per_pool(sandbox) == {"small": 1}, "one runner fits the quota")

    def waiting_on_quota() -> bool:
        view = pools_view(corral)["small"]
        return not view["ready"] and "paused" in (view["reason"] or "")

    converge(corral, waiting_on_quota, "pool says it waits")
    assert create_calls(control) < 10, f"no retry storm against a full quota ({create_calls(control)} create calls)"
    control.put("/quota", json={"instances": 10}).raise_for_status()
    converge(corral, lambda: online_per_pool(sandbox) == {"small": 3}, "recovered", timeout=90)
    assert all("quota" in reason for reason in runner_failures(corral) if reason), (
        "every failure was the quota, reported as such"
    )


def test_the_quota_headroom_is_shown_per_pool_and_as_a_metric(
    sandbox: Sandbox, control: httpx.Client, corral_for: Any
) -> None:
    """Each look reads the project's limits: the pools view says how many more of a pool's servers fit and what
    limits it, and `corral_quota_headroom` has what is left of each limited resource."""
    connection = sandbox_connection(sandbox.info)
    vcpus = int(connection.compute.find_flavor(pool_spec(["small"])["flavor"], ignore_missing=False).vcpus)
    connection.close()
    cores = 7 * vcpus + vcpus // 2  # room for 7 servers after the 2 warm ones if cores were all that counted
    control.put("/quota", json={"instances": 20, "cores": 2 * vcpus + cores, "ram": 1_000_000}).raise_for_status()
    corral = corral_for(min_idle=2)
    converge(corral, lambda: online_per_pool(sandbox) == {"small": 2}, "two warm runners")
    view = converge(corral, lambda: (found := pools_view(corral)["small"])["quota_fits"] is not None and found, "fits")
    assert (view["quota_fits"], view["quota_limited_by"]) == (7, ["cores"])
    assert REGISTRY.get_sample_value("corral_quota_headroom", {"cloud": "default", "resource": "cores"}) == cores
    assert REGISTRY.get_sample_value("corral_quota_headroom", {"cloud": "default", "resource": "instances"}) == 18
    assert REGISTRY.get_sample_value("corral_quota_headroom", {"cloud": "default", "resource": "volumes"}) is None, (
        "not asked"
    )


def test_a_revoked_installation_token_is_replaced(sandbox: Sandbox, control: httpx.Client, tmp_path: Path) -> None:
    document = corral_config(
        sandbox.info, f"sqlite:///{tmp_path / 'corral.db'}", {"small": pool_spec(["small"], min_idle=1)}
    )
    document["github"] = {
        "url": sandbox.info.github_url,
        "app_id": sandbox.info.app_id,
        "private_key_file": sandbox.info.private_key_path,
    }
    corral = LocalCorral(sandbox.info, tmp_path / "corral.yaml", document).start()
    try:
        converge(corral, lambda: online_per_pool(sandbox) == {"small": 1}, "a warm runner")
        # A fresh world: every installation token revoked, every server and registration gone.
        control.post("/reset").raise_for_status()
        converge(corral, lambda: online_per_pool(sandbox) == {"small": 1}, "a warm runner again, with a new token")
    finally:
        corral.stop()


REFUSED = {"match": "openstack POST /compute/v2.1/servers", "error_rate": 1.0, "status": 400}
"""Nova's 400 for a create: for a request it will never accept, or for a passing cause (a volume not yet
available to a block device mapping, a port still binding)."""


def refusals_said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if "failed (cloud_rejected)" in record.getMessage()]


def test_one_refused_create_has_the_pool_checked_again_at_once_and_its_creates_go_on(
    sandbox: Sandbox, control: httpx.Client, corral_for: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """One 400 parked the pool for `tuning.pool_recheck` (5 minutes), with /readyz answering 503: a queued job
    waited 303 s. Now the pool is checked again at once and, as the check finds nothing wrong, its creates go
    on with backoff as after a 503; the log says when the next create comes."""
    control.put("/faults", json={"endpoints": [{**REFUSED, "count": 1}]}).raise_for_status()
    corral = corral_for(min_idle=1)
    converge(corral, lambda: online_per_pool(sandbox) == {"small": 1}, "a runner, seconds after the refusal")
    assert pools_view(corral)["small"]["ready"]
    ((name, reason, message),) = failed_events(corral)
    assert (reason, message) == (
        "cloud_rejected",
        f"the cloud refused the server: create server {name}: HTTP 400: injected fault",
    )
    assert refusals_said(caplog) == [
        f"pool small: runner {name} failed (cloud_rejected), checking the pool again now; creating again in 1s: "
        f"{message}"
    ]


def test_the_same_refusal_twice_parks_the_pool_and_the_log_says_until_when(
    sandbox: Sandbox, control: httpx.Client, corral_for: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A create Nova refuses again the same way, with none accepted between, is the pool's request being wrong:
    the pool is parked (not ready) until the check after `tuning.pool_recheck`, and the log says the next
    create comes then, not at the end of the backoff (it said "creating again in 1s", and 300 s passed)."""
    control.put("/faults", json={"endpoints": [REFUSED]}).raise_for_status()
    corral = corral_for(min_idle=1)

    def parked() -> dict[str, Any] | None:
        view = pools_view(corral)["small"]
        return view if "refuses this pool's servers" in (view["reason"] or "") else None

    view = converge(corral, parked, "the pool parked after the same refusal twice")
    assert not view["ready"]
    first, second = failed_events(corral)
    refusal = f"create server {second[0]}: HTTP 400: injected fault"
    assert view["reason"] == f"the cloud refuses this pool's servers: {refusal}"
    assert second[2] == f"the cloud refused the server: {refusal}"
    assert create_calls(control) == 2, "no create between the second refusal and the next check"
    assert refusals_said(caplog) == [
        f"pool small: runner {first[0]} failed (cloud_rejected), checking the pool again now; creating again in 1s: "
        f"{first[2]}",
        f"pool small: runner {second[0]} failed (cloud_rejected), the same refusal twice: not ready until checked "
        f"again; creating again in 300s: {second[2]}",
    ]


def test_creates_refused_together_are_one_refusal_and_only_a_later_one_parks_the_pool(sandbox: Sandbox) -> None:
    """Eight creates sent together meet the same passing cause together: their refusals are one, answered by
    one check. A create sent after the first refusal came back and refused the same way parks the pool; ids
    in Nova's words (the volume or port a passing cause names) and the runner's name do not make it another."""
    now = [100.0]
    provider = OpenStackProvider(sandbox_connection(sandbox.info), "test")
    threads = ThreadPoolExecutor(1)
    log_once = LogOnce(logging.getLogger("test"))
    checker = PoolChecker(CloudSet({"default": provider}), threads, log_once, lambda: now[0], running())
    volume = "create server corral-small-{}: HTTP 400: Block Device Mapping is Invalid: volume {} is not available."

    def refusal(runner: str) -> str:
        return volume.format(runner, uuid.uuid4())

    try:
        assert checker.refused("small", refusal("a"), sent_at=99.0) == 0.0, "a first refusal: checked again"
        assert checker.due(["small"]) == ["small"], "at once"
        now[0] = 100.5
        assert checker.refused("small", refusal("b"), sent_at=99.0) == 0.0, "sent with the first: the same burst"
        third = refusal("c")
        assert checker.refused("small", third, sent_at=100.2) == 300.0, "sent after it: parked"
        assert checker.readiness("small") == (False, f"the cloud refuses this pool's servers: {third}")
        assert checker.due(["small"]) == [], "until the check pool_recheck later"
        checker.accepted("small")
        assert checker.refused("small", refusal("d"), sent_at=101.0) == 0.0, "a create accepted between: new"
    finally:
        threads.shutdown()
        provider.close()
