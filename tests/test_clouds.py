"""A pool placed in two clouds (the sandbox's two: each its own Keystone, quota and servers): runners go to
the first that has room and has not failed lately, spill over to the second while the first is full or
failing, and come back once it recovers; nothing is left behind in either."""

from __future__ import annotations

import functools
import random
import uuid
from typing import Any

import httpx
import pytest

from corral.cloud.openstack import OpenStackProvider
from corral.cloud.provider import META_INSTALLATION, META_POOL, META_RUNNER, ServerSpec
from corral.config import parse_config
from corral.metrics import REGISTRY
from corral.model import Reason, RunnerState
from corral_sandbox.cloud.seed import seeded_id
from corral_sandbox.local import LocalCorral, corral_config, pool_spec, sandbox_connection
from corral_sandbox.server import Sandbox
from corral_sandbox.world import SECOND_CLOUD
from tests.conftest import StartCorral
from tests.test_end_to_end import everything_done
from tests.test_lifecycle import converge, online_per_pool
from tests.test_resilience import failed_events, runner_failures
from tests.unit.test_config import document, pool, problems_of
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


def trace(control: httpx.Client, count: int, seed: int, over_s: float = 3.0) -> None:
    rng = random.Random(seed)
    jobs = [
        {"at": rng.uniform(0, over_s), "repo": "octo-org/app", "labels": ["small"], "duration": 0.3}
        for _ in range(count)
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
    headroom = {
        cloud: REGISTRY.get_sample_value("corral_quota_headroom", {"cloud": cloud, "resource": "instances"})
        for cloud in ("east", "west")
    }
    assert headroom == {"east": 0, "west": None}, "each cloud's headroom is a metric (the second's is unlimited)"
    with corral.api() as api:
        summary = api.get("/api/v1/summary").json()
    assert summary["quota_headroom_by_cloud"] == {"east": {"instances": 0}, "west": {}}, "and on the dashboard"

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
    trace(control, 30, seed=9, over_s=6.0)
    wait_until(lambda: everything_done(control, 30), timeout=120, what="all 30 jobs served")
    assert servers_made(control, "two") >= 30
    # Each failure backs the first cloud off for the pool (1 s, then 2, 4...), and once a backoff runs out it
    # gets one runner at a time until one comes online there: the runners sent before the first failure was
    # known, and one per backoff, fail; most jobs go straight to the second cloud.
    failed_in_east = [m for m in runner_failures(corral) if "503" in m]
    assert 1 <= len(failed_in_east) <= 15, f"the failing cloud got most of the jobs' runners: {len(failed_in_east)}"

    control.put("/faults", json={"endpoints": []}).raise_for_status()
    before = servers_made(control, "one")
    # A job a second for 15 s: those after the first cloud's backoff ran out go to it again.
    later = [{"at": float(i), "repo": "octo-org/app", "labels": ["small"], "duration": 0.1} for i in range(15)]
    control.post("/trace", json={"jobs": later}).raise_for_status()
    wait_until(lambda: everything_done(control, 45), timeout=90, what="15 more jobs served")
    assert servers_made(control, "one") > before, "the first cloud serves again once its backoff ran out"
    wait_until(lambda: nothing_left_in_either(control), timeout=60, what="nothing left in either cloud")


def test_a_first_cloud_whose_boots_fail_with_no_valid_host_sends_its_runners_to_the_second(
    sandbox: Sandbox, control: httpx.Client, start_corral: StartCorral, tmp_path: Any
) -> None:
    """Nova accepts every create in the first cloud, and every server there goes to ERROR with NoValidHost
    (its placement's image is one no host can boot): the failures back that cloud off for the pool, and the
    jobs are served from the second."""
    broken = str(uuid.uuid4())
    sandbox.call(lambda: sandbox.world.cloud.add_image("ubuntu-east-unbootable", image_id=broken))
    control.put("/faults", json={"world": {"failing_images": [broken]}}).raise_for_status()
    document = two_clouds(sandbox, f"sqlite:///{tmp_path / 'corral.db'}")
    document["pools"]["small"]["placements"][0]["image"] = "ubuntu-east-unbootable"
    corral = start_corral(document=document)

    def no_valid_host() -> int:
        return len([m for m in runner_failures(corral) if "no valid host" in m.lower()])

    # A server's ERROR is seen only once it has tried to boot: until then every job's runner goes to the
    # first cloud. A job at a time until one failed there; what the 20 jobs after cost is counted from then.
    served = 0
    while not no_valid_host():
        assert served < 5, "no job's runner was ever sent to the first cloud"
        control.post("/jobs", json={"repo": "octo-org/app", "labels": ["small"], "duration": 0.1}).raise_for_status()
        served += 1
        wait_until(functools.partial(everything_done, control, served), timeout=60, what="a job served")
    before = no_valid_host()
    trace(control, 20, seed=11, over_s=6.0)
    wait_until(lambda: everything_done(control, served + 20), timeout=120, what="all 20 jobs served")
    # Backoffs of 1, 2 and 4 s run out during the 6 s; each time one runner is tried there, and fails.
    failed = no_valid_host() - before
    assert failed <= 4, f"{failed} of the 20 jobs' runners were sent to the unbootable cloud"
    assert servers_made(control, "two") >= 20
    wait_until(lambda: nothing_left_in_either(control), timeout=60, what="nothing left in either cloud")


def test_a_later_placements_own_image_rolls_out_in_its_cloud(
    sandbox: Sandbox, control: httpx.Client, start_corral: StartCorral, tmp_path: Any
) -> None:
    """With the first cloud full, the pool's warm runners live in its second placement, whose `image` is a
    Glance filter of its own: a new upload in that cloud replaces them there, as a first placement's would."""
    control.put("/quota", params={"cloud": "one"}, json={"instances": 0}).raise_for_status()
    document = two_clouds(sandbox, f"sqlite:///{tmp_path / 'corral.db'}", min_idle=3, max_runners=6)
    document["pools"]["small"]["placements"][1]["image"] = {"properties": {"os_distro": "ubuntu"}, "tags": ["runner"]}
    document["tuning"] = {"pool_recheck": "1s"}
    corral = start_corral(document=document)
    old = seeded_id("image", "ubuntu-24.04-runner")

    def idle_images() -> list[str | None]:
        return [runner.image_id for runner in corral.runners(pool="small", states=[RunnerState.IDLE])]

    wait_until(lambda: idle_images() == [old] * 3, timeout=60, what="three warm runners in the second cloud")
    two = sandbox.world.clouds[SECOND_CLOUD]
    new = str(sandbox.call(lambda: two.add_image("ubuntu-west-new", {"os_distro": "ubuntu"}, ["runner"])).id)
    wait_until(lambda: idle_images() == [new] * 3, timeout=90, what="the warm runners on the second cloud's upload")
    replaced = [
        runner
        for runner in corral.runners(pool="small", states=[RunnerState.DELETING, RunnerState.DELETED])
        if any(event.reason is Reason.IMAGE_ROLLOUT for event in corral.events(runner.id))
    ]
    assert {runner.image_id for runner in replaced} == {old} and len(replaced) == 3
    assert clouds_of_runners(corral) == {"west": 6}, "every runner, old and new, in the second cloud"


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        (
            {"pools": {"small": pool(placements=[{"cloud": "east"}, {"cloud": "north"}])}},
            "pools.small.placements.1.cloud: 'north' names no cloud (known: ['east', 'west']); add it to `clouds`",
        ),
        ({"cloud": {"name": "prod"}}, "cloud: give either `cloud` (one cloud) or `clouds` (several by name), not both"),
        ({"clouds": {"East_1": {"cloud": "prod"}}}, "clouds.East_1: a cloud's name is shown in metrics"),
        ({"clouds": {"east": {"name": "prod"}}}, "clouds.east.name: unknown key"),
        ({"pools": {"small": pool(placements=[{"flavor": "m1.large"}])}}, "pools.small.placements.0.cloud: required"),
    ],
)
def test_a_clouds_map_that_cannot_work_is_refused_naming_the_key(overrides: dict[str, Any], problem: str) -> None:
    raw = document(clouds={"east": {"cloud": "east-prod"}, "west": {"cloud": "west-prod"}})
    raw.update(overrides)
    assert any(found.startswith(problem) for found in problems_of(raw)), problems_of(raw)


def test_placements_take_the_pools_settings_where_they_override_none() -> None:
    raw = document(
        clouds={"east": {"cloud": "east-prod"}, "west": {"cloud": "west-prod", "quota_retry": "5s"}},
        pools={"small": pool(networks=["private"], placements=[{"cloud": "west", "flavor": "gp.small"}])},
    )
    config = parse_config(raw)
    (west,) = config.placements("small")
    assert (west.cloud, west.flavor, west.image, west.networks) == ("west", "gp.small", "ubuntu", ("private",))
    assert config.cloud.name == "east-prod", "`cloud` is the first of `clouds`"
    assert config.cloud_settings()["west"].quota_retry == 5.0
    single = parse_config(document())
    assert [(p.cloud, p.flavor) for p in single.placements("small")] == [("default", "m1.small")]


def test_a_cloud_that_cannot_be_listed_holds_back_judgement_only_of_its_own_servers(
    sandbox: Sandbox, control: httpx.Client, start_corral: StartCorral, tmp_path: Any
) -> None:
    """The second cloud's listing fails on every look: a server nobody owns in the first cloud is still
    found and deleted, since the first cloud's listing says all it needs to."""
    unlisted = {"match": "openstack-two GET /compute/v2.1/servers*", "error_rate": 1.0, "status": 500}
    control.put("/faults", json={"endpoints": [unlisted]}).raise_for_status()
    start_corral(document=two_clouds(sandbox, f"sqlite:///{tmp_path / 'corral.db'}"))
    stray = ServerSpec(
        name="corral-small-0000000000",
        image="ubuntu-24.04-runner",
        flavor="m1.small",
        networks=("private",),
        metadata={META_INSTALLATION: "corral", META_POOL: "small", META_RUNNER: "0000000000"},
    )
    OpenStackProvider(sandbox_connection(sandbox.info), "corral").create_server(stray)
    wait_until(
        lambda: control.get("/stats").json()["clouds"]["one"]["servers_deleted"] == 1,
        timeout=30,
        what="the stray server in the first cloud deleted while the second cannot be listed",
    )


def active_in(control: httpx.Client, cloud: str) -> int:
    count: int = control.get("/stats").json()["clouds"][cloud]["servers_by_status"].get("ACTIVE", 0)
    return count


def test_clouds_added_and_removed_on_reload_converge_like_pools(
    sandbox: Sandbox, control: httpx.Client, start_corral: StartCorral, tmp_path: Any
) -> None:
    """A reload adds a cloud and moves the pool to it: the warm runners are replaced there and the old ones
    retired. Another reload moves the pool back and removes the cloud: once nothing of corral's is left in
    it, corral no longer calls it."""
    document = two_clouds(sandbox, f"sqlite:///{tmp_path / 'corral.db'}", min_idle=2, idle_grace="1h")
    document["clouds"].pop("west")
    document["pools"]["small"]["placements"] = [{"cloud": "east"}]
    corral = start_corral(document=document)
    wait_until(lambda: active_in(control, "one") == 2, timeout=30, what="two warm runners in the first cloud")

    document["clouds"]["west"] = {"cloud": sandbox.info.second_cloud_name}
    document["pools"]["small"]["placements"] = [{"cloud": "west"}]
    assert corral.reload(document) == []
    wait_until(
        lambda: (active_in(control, "one"), active_in(control, "two")) == (0, 2),
        timeout=60,
        what="the warm runners moved to the added cloud",
    )
    with corral.api() as api:
        retired = [
            runner
            for runner in api.get("/api/v1/runners", params={"include_deleted": True}).json()
            if runner["cloud"] == "east"
        ]
    assert len(retired) == 2 and {runner["reason"] for runner in retired} <= {"placement_changed", "gone"}

    del document["clouds"]["west"]
    document["pools"]["small"]["placements"] = [{"cloud": "east"}]
    assert corral.reload(document) == []
    wait_until(
        lambda: (active_in(control, "one"), control.get("/stats").json()["clouds"]["two"]["servers"]) == (2, 0),
        timeout=60,
        what="the warm runners back in the first cloud, the removed one empty",
    )

    def listings_of_west() -> int:
        calls: dict[str, int] = control.get("/stats").json()["api_calls"].get("openstack-two", {})
        return sum(count for endpoint, count in calls.items() if endpoint.startswith("GET /compute/v2.1/servers"))

    def a_look_leaves_west_alone() -> bool:
        before = listings_of_west()
        corral.settle()  # one look at every cloud corral still calls, and the passes after it
        return listings_of_west() == before

    wait_until(a_look_leaves_west_alone, timeout=30, what="the removed cloud, empty, no longer listed")


def test_a_reload_may_not_change_the_first_cloud_or_a_kept_clouds_settings(
    sandbox: Sandbox, start_corral: StartCorral, tmp_path: Any
) -> None:
    document = two_clouds(sandbox, f"sqlite:///{tmp_path / 'corral.db'}")
    corral = start_corral(document=document)
    document["clouds"]["west"]["region"] = "RegionThree"
    assert corral.reload(document) == [
        "clouds.west: its settings cannot change at run time; restart corral, or add it under a new name"
    ]
    del document["clouds"]["east"]
    document["pools"]["small"]["placements"] = [{"cloud": "west"}]
    assert corral.reload(document)[0].startswith("clouds: the first cloud (east) cannot change at run time")


def test_a_cloud_that_failed_gets_one_runner_at_a_time_until_one_comes_online_there(
    sandbox: Sandbox, control: httpx.Client, start_corral: StartCorral, tmp_path: Any
) -> None:
    """The first cloud answers every create slowly and with a 503. Once it has failed the pool, each time its
    backoff runs out it gets one runner, not the burst of jobs that arrived meanwhile: a burst would only
    fail again, each of its jobs waiting for the create to fail before another cloud takes it."""
    slow_failure = {
        "match": "openstack POST /compute/v2.1/servers",
        "error_rate": 1.0,
        "status": 503,
        "latency_ms": 1500,
    }
    control.put("/faults", json={"endpoints": [slow_failure]}).raise_for_status()
    corral = start_corral(document=two_clouds(sandbox, f"sqlite:///{tmp_path / 'corral.db'}"))

    def failed_in_east() -> int:
        return len([m for m in runner_failures(corral) if "503" in m])

    # First the first cloud fails the pool: a job at a time until one's runner was sent there (on a loaded
    # machine the first cloud's check may finish after the first job was placed in the second). It may
    # fail twice when its backoff runs out before that job's runner in the second cloud is online: what
    # the 20 jobs cost is counted after.
    served = 0
    while not failed_in_east():
        assert served < 5, "no job's runner was ever sent to the first cloud"
        control.post("/jobs", json={"repo": "octo-org/app", "labels": ["small"], "duration": 0.1}).raise_for_status()
        served += 1
        wait_until(
            functools.partial(everything_done, control, served), timeout=30, what="a job served by the second cloud"
        )
    before = failed_in_east()
    trace(control, 20, seed=11, over_s=8.0)
    wait_until(lambda: everything_done(control, served + 20), timeout=90, what="20 more jobs served")
    failed = failed_in_east() - before
    # Backoffs of 1, 2 and 4 s run out during the 8 s: a few trials, one runner each.
    assert 1 <= failed <= 4, f"{failed} runners sent to the failing cloud for 20 jobs"


def test_a_server_nova_put_in_error_for_quota_is_the_quota_and_the_runner_goes_to_the_next_cloud(
    sandbox: Sandbox, control: httpx.Client, start_corral: StartCorral, tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Nova counts a server once its conductor schedules it, so creates can race past its quota check; it then
    puts the surplus in ERROR with a quota fault (seen on Nova 34: 4 quick creates against a quota of 3). That
    server failed for quota, not as a boot: its runner fails `cloud_quota`, the first cloud backs off for the
    pool for its `quota_retry` (not the 1 s of a first failed boot), and the replacement goes to the second."""
    # East's limits unreadable: corral cannot plan within them, so its four creates race past the quota of 3.
    unreadable = {"match": "openstack GET /compute/v2.1/limits", "error_rate": 1.0, "status": 403}
    # West cannot be checked until east has the four: the two placements are checked at once, and when west's
    # check answers first (a loaded machine) the warm runners rightly go there, and east never gets four.
    unchecked = {"match": "openstack-two GET /image/*", "error_rate": 1.0, "status": 403}
    control.put("/faults", json={"endpoints": [unreadable, unchecked]}).raise_for_status()
    control.put("/quota", params={"cloud": "one"}, json={"instances": 3}).raise_for_status()
    control.put("/timings", json={"schedule_delay": 3600}).raise_for_status()  # scheduled by the test, below
    document = two_clouds(sandbox, f"sqlite:///{tmp_path / 'corral.db'}", min_idle=4, max_runners=4)
    document["clouds"]["east"]["quota_retry"] = "10m"
    corral = start_corral(document=document)
    converge(corral, lambda: servers_made(control, "one") == 4, "four creates accepted by the first cloud")
    control.put("/faults", json={"endpoints": [unreadable]}).raise_for_status()
    assert corral.reload(document) == []  # every placement checked again, west too, before it returns

    def schedule() -> None:
        for cloud in sandbox.world.clouds.values():
            cloud.schedule_pending()

    sandbox.call(schedule)  # Nova's conductor: three fit, the fourth goes to ERROR
    converge(
        corral,
        lambda: sandbox.call(schedule) is None and online_per_pool(sandbox) == {"small": 4},
        "four runners online, the last in the second cloud",
    )
    assert (servers_made(control, "one"), servers_made(control, "two")) == (4, 1)
    ((name, reason, message),) = failed_events(corral)
    assert reason == Reason.CLOUD_QUOTA.value
    assert message == (
        "quota exceeded: server in ERROR: Quota exceeded for instances: Requested 1, but already used 3 of 3 instances"
    )
    said = [record.getMessage() for record in caplog.records if "failed (cloud_quota)" in record.getMessage()]
    assert said == [
        f"pool small: runner {name} failed (cloud_quota), its runners go to west instead of east, "
        f"trying east again in 600s: {message}"
    ], "the first cloud waits its quota_retry for the pool"
