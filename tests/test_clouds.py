"""A pool placed in two clouds (the sandbox's two: each its own Keystone, quota and servers): runners go to
the first that has room and has not failed lately, spill over to the second while the first is full or
failing, and come back once it recovers; nothing is left behind in either."""

from __future__ import annotations

import random
from typing import Any

import httpx

from corral.local import LocalCorral, corral_config, pool_spec
from corral.sandbox.server import Sandbox
from tests.conftest import StartCorral
from tests.test_end_to_end import everything_done
from tests.test_resilience import runner_failures
from tests.waiting import wait_until


def two_clouds(sandbox: Sandbox, tmp_path_db: str, **pool: Any) -> dict[str, Any]:
    """A config with clouds `east` (the sandbox's first) and `west` (its second), and a pool placed in both."""
    document = corral_config(
        sandbox.info,
        tmp_path_db,
        {"small": pool_spec(["small"], placements=[{"cloud": "east"}, {"cloud": "west"}], **pool)},
    )
    del document["cloud"]
    document["clouds"] = {
        "east": {"cloud": sandbox.info.cloud_name, "quota_retry": "2s"},
        "west": {"cloud": sandbox.info.second_cloud_name, "quota_retry": "2s"},
    }
    return document


def servers_made(control: httpx.Client, cloud: str) -> int:
    return len(control.get("/servers", params={"cloud": cloud}).json())


def trace(control: httpx.Client, count: int, seed: int) -> None:
    rng = random.Random(seed)
    jobs = [
        {"at": rng.uniform(0, 3), "repo": "octo-org/app", "labels": ["small"], "duration": 0.3} for _ in range(count)
    ]
    control.post("/trace", json={"jobs": jobs}).raise_for_status()


def nothing_left_in_either(control: httpx.Client) -> bool:
    stats = control.get("/stats").json()
    clouds = stats["clouds"]
    return bool(
        clouds["one"]["servers"] == 0
        and clouds["two"]["servers"] == 0
        and stats["github"]["runners"]["registered"] == 0
    )


def clouds_of_runners(corral: LocalCorral) -> dict[str, int]:
    with corral.api() as api:
        listed = api.get("/api/v1/runners", params={"include_deleted": True}).json()
    counts: dict[str, int] = {}
    for runner in listed:
        counts[runner["cloud"]] = counts.get(runner["cloud"], 0) + 1
    return counts


def east_fits(corral: LocalCorral) -> int | None:
    """How many more of the pool's servers corral's last reading of the first cloud's quota has room for."""
    with corral.api() as api:
        (pool,) = api.get("/api/v1/pools").json()
    fits: int | None = pool["quota_fits"]
    return fits


def test_a_full_first_cloud_spills_a_hundred_jobs_over_to_the_second_and_takes_them_back_once_it_has_room(
    sandbox: Sandbox, control: httpx.Client, start_corral: StartCorral, tmp_path: Any
) -> None:
    control.put("/quota", params={"cloud": "one"}, json={"instances": 0}).raise_for_status()
    corral = start_corral(document=two_clouds(sandbox, f"sqlite:///{tmp_path / 'corral.db'}"))
    trace(control, 100, seed=7)
    wait_until(lambda: everything_done(control, 100), timeout=180, what="all 100 jobs served")
    assert (servers_made(control, "one"), servers_made(control, "two")) == (0, 100), "all from the second cloud"
    assert [m for m in runner_failures(corral) if "quota" in m.lower()] == [], "no create was sent to a full cloud"
    assert clouds_of_runners(corral) == {"west": 100}

    control.put("/quota", params={"cloud": "one"}, json={"instances": 30}).raise_for_status()
    wait_until(lambda: east_fits(corral) == 30, timeout=30, what="corral reading the first cloud's new quota")
    trace(control, 20, seed=8)
    wait_until(lambda: everything_done(control, 120), timeout=120, what="20 more jobs served")
    made = (servers_made(control, "one"), servers_made(control, "two"))
    assert made == (20, 100), "the first cloud serves again once it has room"
    wait_until(lambda: nothing_left_in_either(control), timeout=60, what="nothing left in either cloud")


def test_a_first_cloud_failing_every_create_sends_its_runners_to_the_second_until_it_recovers(
    sandbox: Sandbox, control: httpx.Client, start_corral: StartCorral, tmp_path: Any
) -> None:
    failing = {"match": "openstack POST /compute/v2.1/servers", "error_rate": 1.0, "status": 503}
    control.put("/faults", json={"endpoints": [failing]}).raise_for_status()
    corral = start_corral(document=two_clouds(sandbox, f"sqlite:///{tmp_path / 'corral.db'}"))
    trace(control, 30, seed=9)
    wait_until(lambda: everything_done(control, 30), timeout=120, what="all 30 jobs served")
    assert servers_made(control, "two") >= 30
    failed_in_east = [m for m in runner_failures(corral) if "503" in m]
    assert 1 <= len(failed_in_east) <= 3, f"the failing cloud was left alone after its first failures: {failed_in_east}"

    control.put("/faults", json={"endpoints": []}).raise_for_status()
    before = servers_made(control, "one")
    # A job a second for 15 s: those after the first cloud's backoff ran out go to it again.
    later = [{"at": float(i), "repo": "octo-org/app", "labels": ["small"], "duration": 0.1} for i in range(15)]
    control.post("/trace", json={"jobs": later}).raise_for_status()
    wait_until(lambda: everything_done(control, 45), timeout=90, what="15 more jobs served")
    assert servers_made(control, "one") > before, "the first cloud serves again once its backoff ran out"
    wait_until(lambda: nothing_left_in_either(control), timeout=60, what="nothing left in either cloud")
