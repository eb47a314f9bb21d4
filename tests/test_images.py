"""A pool's image as a Glance filter, and image rollouts: a new upload (or a new `image`) replaces the pool's idle
runners a few at a time, never a busy one, against the sandbox's Glance and Nova."""

from __future__ import annotations

import functools
import re
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from corral.cloud.openstack import OpenStackProvider
from corral.cloud.provider import ServerSpec
from corral.config import ConfigError, parse_config
from corral.engine.rollouts import Rollouts
from corral.engine.running import Running
from corral.images import ImageFilter
from corral.model import Reason, Runner, RunnerState
from corral.policy import Outdated, Replacement, plan_replacements, retirement_order
from corral_sandbox.cloud.seed import seeded_id
from corral_sandbox.local import LocalCorral, corral_config, pool_spec, sandbox_connection
from corral_sandbox.server import Sandbox
from corral_sandbox.world import SECOND_CLOUD
from tests.conftest import StartCorral
from tests.test_clouds import clouds_of_runners, east_fits, servers_made, two_clouds
from tests.unit.test_config import document, pool
from tests.waiting import wait_until

ORG = "octo-org"
UBUNTU = ImageFilter(properties=(("os_distro", "ubuntu"),), tags=("runner",))


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'corral.db'}"


@pytest.fixture
def provider(sandbox: Sandbox) -> Any:
    cloud = OpenStackProvider(sandbox_connection(sandbox.info), "images-test")
    yield cloud
    cloud.close()


def upload(sandbox: Sandbox, name: str, properties: dict[str, str], tags: list[str]) -> str:
    """An image uploaded now, as an image pipeline would: the newest in the sandbox's Glance."""
    return str(sandbox.call(lambda: sandbox.world.cloud.add_image(name, properties, tags)).id)


def seeded_image(sandbox: Sandbox, name: str) -> str:
    return next(image.id for image in sandbox.world.cloud.images.values() if image.name == name)


def test_an_image_filter_means_the_newest_active_image_that_matches(sandbox: Sandbox, provider: Any) -> None:
    spec = ServerSpec(name="check", image=UBUNTU, flavor="m1.small", networks=("private",))
    assert provider.check_pool(spec) == []
    assert provider.image_id(spec) == seeded_image(sandbox, "ubuntu-24.04-runner")

    newer = upload(sandbox, "ubuntu-24.04-runner-20261202", {"os_distro": "ubuntu"}, ["runner"])
    upload(sandbox, "ubuntu-untagged", {"os_distro": "ubuntu"}, [])  # newest, but lacks the tag
    upload(sandbox, "debian-runner", {"os_distro": "debian"}, ["runner"])  # newest, other distribution
    assert provider.image_id(spec) != newer, "a resolved image is kept until the pool's next check"
    assert provider.check_pool(spec) == []
    assert provider.image_id(spec) == newer

    server = provider.create_server(ServerSpec(name="by-filter", image=UBUNTU, flavor="m1.small", metadata={}))
    assert server.image_id == newer
    assert sandbox.world.cloud.servers[server.id].image_id == newer, "Nova was asked for the newest upload"


def test_a_filter_nothing_matches_makes_the_pool_not_ready_with_the_filter_named(provider: Any) -> None:
    nothing = ImageFilter(properties=(("os_distro", "plan9"),), tags=("runner",))
    problems = provider.check_pool(ServerSpec(name="check", image=nothing, flavor="m1.small"))
    assert problems == ["no image is newest active image with os_distro=plan9, tag runner"]


@pytest.mark.parametrize(
    ("image", "words"),
    [
        ({}, "pools.small.image: a filter needs properties or tags"),
        ({"properties": {"os_distro": "ubuntu"}, "tag": ["runner"]}, "pools.small.image.tag: unknown key"),
        ({"properties": {"os_distro": ["ubuntu"]}}, "pools.small.image.properties.os_distro"),
        ("", "pools.small.image"),
    ],
)
def test_an_image_that_cannot_work_is_refused_naming_the_key(image: Any, words: str) -> None:
    document = {"github": {"token": "ghp_x"}, "pools": {"small": {**pool_spec(["small"]), "image": image}}}
    with pytest.raises(ConfigError) as refused:
        parse_config(document)
    assert words in str(refused.value), str(refused.value)


def image_pool(**overrides: Any) -> dict[str, Any]:
    image = {"properties": {"os_distro": "ubuntu"}, "tags": ["runner"]}
    return pool_spec(
        ["linux"], **{"image": image, "min_idle": 10, "max_runners": 20, "rollout": {"max_surge": 2}, **overrides}
    )


def most_servers_at_once(history: list[dict[str, Any]], since: float) -> int:
    """The most servers that existed at one moment from `since` on (a server exists from its create until
    Nova has deleted it), replayed exactly from the sandbox's record of every server's life."""
    moments = sorted({since, *(life["created_s"] for life in history if life["created_s"] >= since)})
    return max(
        sum(1 for life in history if life["created_s"] <= moment and (life["gone_s"] or float("inf")) > moment)
        for moment in moments
    )


def idle_images(corral: LocalCorral) -> list[str | None]:
    return [runner.image_id for runner in corral.runners(pool="linux", states=[RunnerState.IDLE])]


def test_a_new_upload_replaces_idle_runners_max_surge_at_a_time_and_leaves_busy_ones(
    sandbox: Sandbox, start_corral: StartCorral, database_url: str, control: httpx.Client
) -> None:
    tuning = {"pool_recheck": "1s"}
    corral = start_corral(document=corral_config(sandbox.info, database_url, {"linux": image_pool()}, tuning=tuning))
    old = seeded_image(sandbox, "ubuntu-24.04-runner")
    wait_until(lambda: idle_images(corral) == [old] * 10, timeout=60, what="ten warm runners on the seeded image")
    job = control.post("/jobs", json={"repo": f"{ORG}/app", "labels": ["linux"], "duration": 600}).json()
    busy = wait_until(
        lambda: next(iter(corral.runners(pool="linux", states=[RunnerState.BUSY])), None), what="a runner busy"
    )
    wait_until(lambda: len(idle_images(corral)) == 10, timeout=60, what="ten warm runners again beside the busy one")

    # Nova takes a while to delete a server: the replaced runner's server counts until it is gone.
    control.put("/timings", json={"delete_delay": 1.5}).raise_for_status()
    history_from = max(life["created_s"] for life in control.get("/servers").json())
    new = upload(sandbox, "ubuntu-24.04-runner-20261202", {"os_distro": "ubuntu"}, ["runner"])
    wait_until(lambda: idle_images(corral) == [new] * 10, timeout=90, what="ten warm runners on the new upload")

    history = control.get("/servers").json()
    assert most_servers_at_once(history, history_from) <= 11 + 2, "at most max_surge servers above the pool's own"
    still_busy = corral.runners(pool="linux", states=[RunnerState.BUSY])
    assert [runner.id for runner in still_busy] == [busy.id], "the busy runner was left to finish its job"
    assert still_busy[0].image_id == old
    assert control.get(f"/jobs/{job['id']}").json()["status"] == "in_progress"

    def replaced() -> list[Runner]:
        deleted = corral.runners(pool="linux", states=[RunnerState.DELETING, RunnerState.DELETED])
        return [r for r in deleted if any(event.reason is Reason.IMAGE_ROLLOUT for event in corral.events(r.id))]

    assert {runner.image_id for runner in replaced()} == {old}, "only runners on the old image were replaced"
    wait_until(lambda: len(replaced()) == 10, what="the ten old runners replaced")
    with corral.api() as api:
        assert pools_by_name(api)["linux"]["rollout"] is None, "the new image came online: it is in service"
    started = corral.runners(pool="linux")
    assert sum(runner.image_id == new for runner in started) == 10, "no replacement was started twice"


def test_a_replacement_is_made_in_the_cloud_of_the_runner_it_replaces_not_the_pools_first(
    sandbox: Sandbox, control: httpx.Client, start_corral: StartCorral, database_url: str
) -> None:
    """The first cloud was full when the pool's warm runners started, so they are in the second. It has room
    again when a new upload in the second outdates them: their replacements are made there, on its new
    image, not in the first cloud (which would move the pool, on the first cloud's image)."""
    control.put("/quota", params={"cloud": "one"}, json={"instances": 0}).raise_for_status()
    image = {"properties": {"os_distro": "ubuntu"}, "tags": ["runner"]}
    document = two_clouds(sandbox, database_url, min_idle=3, max_runners=6, image=image)
    document["tuning"] = {"pool_recheck": "1s"}
    corral = start_corral(document=document)
    old = seeded_id("image", "ubuntu-24.04-runner")

    def idle_where() -> list[tuple[str | None, str | None]]:
        return sorted((r.cloud, r.image_id) for r in corral.runners(pool="small", states=[RunnerState.IDLE]))

    wait_until(lambda: idle_where() == [("west", old)] * 3, timeout=60, what="three warm runners in the second cloud")
    control.put("/quota", params={"cloud": "one"}, json={"instances": 30}).raise_for_status()
    wait_until(lambda: east_fits(corral) == 30, timeout=30, what="corral reading the first cloud's new quota")
    west = sandbox.world.clouds[SECOND_CLOUD]
    new = str(sandbox.call(lambda: west.add_image("ubuntu-west-new", {"os_distro": "ubuntu"}, ["runner"])).id)
    wait_until(lambda: idle_where() == [("west", new)] * 3, timeout=90, what="three warm runners on the new upload")
    assert servers_made(control, "one") == 0, "no replacement was made in the first cloud"
    assert clouds_of_runners(corral) == {"west": 6}, "the three replaced and their three replacements"


def test_changing_a_pools_image_rolls_its_idle_runners_over(
    sandbox: Sandbox, start_corral: StartCorral, database_url: str
) -> None:
    pools = {"linux": pool_spec(["linux"], min_idle=3, max_runners=6)}
    document = corral_config(sandbox.info, database_url, pools)
    corral = start_corral(document=document)
    wait_until(
        lambda: idle_images(corral) == [seeded_image(sandbox, "ubuntu-24.04-runner")] * 3, timeout=60, what="warm"
    )
    document["pools"]["linux"]["image"] = "cirros"
    corral.reload(document)
    cirros = seeded_image(sandbox, "cirros")
    wait_until(lambda: idle_images(corral) == [cirros] * 3, timeout=60, what="three warm runners on cirros")
    with corral.api() as api:
        listed = api.get("/api/v1/runners", params={"state": "idle"}).json()
    assert [runner["image_id"] for runner in listed] == [cirros] * 3, "the API says which image each runner has"


def test_a_new_image_whose_runners_fail_to_boot_is_rolled_back_and_the_pool_keeps_serving(
    sandbox: Sandbox, start_corral: StartCorral, database_url: str, control: httpx.Client
) -> None:
    rollout = {"max_surge": 2, "min_boots": 2, "max_failure_rate": 0.5}
    pools = {"linux": image_pool(min_idle=4, max_runners=10, rollout=rollout)}
    corral = start_corral(document=corral_config(sandbox.info, database_url, pools, tuning={"pool_recheck": "1s"}))
    old = seeded_image(sandbox, "ubuntu-24.04-runner")
    wait_until(lambda: idle_images(corral) == [old] * 4, timeout=60, what="four warm runners on the seeded image")

    broken = str(uuid.uuid4())
    control.put("/faults", json={"world": {"failing_images": [broken]}}).raise_for_status()
    sandbox.call(lambda: sandbox.world.cloud.add_image("ubuntu-broken", {"os_distro": "ubuntu"}, ["runner"], broken))

    def rollout_view() -> dict[str, Any] | None:
        with corral.api() as api:
            view: dict[str, Any] | None = pools_by_name(api)["linux"]["rollout"]
            return view

    rolled = wait_until(
        lambda: (view := rollout_view()) is not None and view["rolled_back"] and view, timeout=60, what="a rollback"
    )
    assert (rolled["from_image"], rolled["to_image"], rolled["online"]) == (old, broken, 0)
    assert rolled["failed"] >= 2
    with corral.api() as api:
        metrics = api.get("/metrics").text
    assert re.search(r'^corral_image_rollbacks_total\{pool="linux"\} [1-9]', metrics, re.MULTILINE), "counted"

    # The pool keeps serving from the old image: its warm runners stay, a job runs, its replacement boots.
    job = control.post("/jobs", json={"repo": f"{ORG}/app", "labels": ["linux"], "duration": 0}).json()
    done = wait_until(
        lambda: (view := control.get(f"/jobs/{job['id']}").json())["status"] == "completed" and view, what="the job"
    )

    def warm_again() -> bool:
        idle = corral.runners(pool="linux", states=[RunnerState.IDLE])
        fresh = [runner for runner in idle if runner.name != done["runner_name"]]
        return len(fresh) == 4 and {runner.image_id for runner in fresh} == {old}

    wait_until(warm_again, timeout=60, what="four warm runners on the old image, the job's runner replaced")
    on_broken = [runner for runner in corral.runners(pool="linux") if runner.image_id == broken]
    assert len(on_broken) == rolled["failed"], "no runner was started on the broken image after the rollback"


def test_a_canary_image_gets_its_share_of_new_runners_and_is_promoted_once_its_jobs_succeed(
    sandbox: Sandbox, start_corral: StartCorral, database_url: str, control: httpx.Client
) -> None:
    """With `rollout.canary: 25%`, a new upload first gets one in four of the pool's new runners and no idle
    runner is replaced, also across a restart; once `canary_jobs` jobs succeeded on it (lowered by a reload
    from 1000, so that it cannot happen before the restart), it is promoted and the warm runners move to it."""
    rollout = {"max_surge": 2, "canary": "25%", "canary_jobs": 1000}
    pools = {"linux": image_pool(min_idle=4, max_runners=10, rollout=rollout)}
    document = corral_config(sandbox.info, database_url, pools, tuning={"pool_recheck": "1s"})
    corral = start_corral(document=document)
    old = seeded_image(sandbox, "ubuntu-24.04-runner")
    wait_until(lambda: idle_images(corral) == [old] * 4, timeout=60, what="four warm runners on the seeded image")
    before = {runner.id for runner in corral.runners(pool="linux")}
    new = upload(sandbox, "ubuntu-24.04-runner-canary", {"os_distro": "ubuntu"}, ["runner"])

    def rollout_view() -> dict[str, Any] | None:
        with corral.api() as api:
            view: dict[str, Any] | None = pools_by_name(api)["linux"]["rollout"]
            return view

    def canary_with(succeeded: int) -> dict[str, Any] | None:
        view = rollout_view()
        return view if view is not None and view["phase"] == "canary" and view["jobs_succeeded"] >= succeeded else None

    wait_until(lambda: canary_with(0), what="a canary")
    jobs = [{"at": i * 1.0, "repo": f"{ORG}/app", "labels": ["linux"], "duration": 0.5} for i in range(40)]
    control.post("/trace", json={"jobs": jobs}).raise_for_status()

    def replaced_for_the_image() -> list[Runner]:
        return [
            runner
            for runner in corral.runners(pool="linux")
            if any(event.reason is Reason.IMAGE_ROLLOUT for event in corral.events(runner.id))
        ]

    wait_until(lambda: canary_with(3), timeout=60, what="a canary with three jobs succeeded on it")
    assert replaced_for_the_image() == [], "no idle runner is replaced while the new image is a canary"
    made = [r.image_id for r in corral.runners(pool="linux") if r.id not in before and r.image_id is not None]
    canaries = made.count(new)
    assert 1 <= canaries <= len(made) / 4 + 1, f"{canaries} of {len(made)} new runners on the canary image"
    assert set(made) <= {old, new}

    # A restart carries the canary on: the new image is not taken for the one in service.
    canaries_before = (rollout_view() or {}).get("canaries", 0)
    corral.stop()
    corral = start_corral(document=document)
    view = wait_until(lambda: canary_with(3), timeout=20, what="the canary carried on")
    assert view["canaries"] >= canaries_before, view
    assert replaced_for_the_image() == [], "no idle runner is replaced while the new image is a canary"

    document["pools"]["linux"]["rollout"]["canary_jobs"] = 3
    assert corral.reload(document) == []
    wait_until(lambda: rollout_view() is None, timeout=60, what="the canary promoted and in service")
    with corral.api() as api:
        metrics = api.get("/metrics").text
    assert re.search(r'^corral_image_promotions_total\{pool="linux"\} 1\.0$', metrics, re.MULTILINE), "counted"
    wait_until(lambda: idle_images(corral) == [new] * 4, timeout=120, what="the warm runners on the promoted image")


def test_a_canary_gets_its_share_of_new_runners_from_the_first_one_on() -> None:
    """10%: the first new runner is a canary at once (a canary that waited for ten creates would prove
    nothing on a quiet pool), then one in ten."""
    config = parse_config(document(pools={"small": pool(rollout={"canary": "10%"})}))
    rollouts = Rollouts(Running(config))
    assert rollouts.image("small", "old-image") == "old-image"
    assert rollouts.image("small", "new-image") == "old-image", "a canary is not the image in service"
    images = [rollouts.image_for_new_runner("small") for _ in range(30)]
    assert [i for i, image in enumerate(images) if image == "new-image"] == [0, 10, 20]
    assert set(images) == {"old-image", "new-image"}


def test_a_pass_that_creates_for_demand_still_replaces_max_surge_outdated_runners() -> None:
    """Under a job a second nearly every pass creates for demand: such a pass replaces too, within what
    `max_runners` leaves after its creates (a rollout that waited for a pass creating nothing would wait for
    the stream to end)."""
    outdated = [Outdated(f"old-{i}", "one") for i in range(10)]
    plan = functools.partial(plan_replacements, outdated, max_surge=2, in_flight=0, min_idle=10, usable=["one"])
    assert plan(room=10, creating=3) == [Replacement("old-0", "one"), Replacement("old-1", "one")]
    assert plan(room=4, creating=3) == [Replacement("old-0", "one")], "max_runners leaves room for one"
    assert plan(room=3, creating=3) == []


def test_a_replacement_goes_to_the_cloud_of_the_runner_it_replaces() -> None:
    """The runners whose replacement boots or is online get none; the next two in order do, each in its own
    cloud (`two`), not the pool's first; a cloud the pool no longer places in gets none of them."""
    outdated = [
        Outdated("one-a", "one", replacement="booting"),
        Outdated("two-a", "two"),
        Outdated("one-b", "one", replacement="online"),
        Outdated("two-b", "two"),
        Outdated("one-c", "one"),
    ]
    plan = functools.partial(plan_replacements, outdated, max_surge=3, in_flight=1, min_idle=5, room=10, creating=0)
    assert plan(usable=["one", "two"]) == [Replacement("two-a", "two"), Replacement("two-b", "two")]
    assert plan(usable=["one"]) == [Replacement("two-a", None), Replacement("two-b", None)], "where any would go"


def test_surplus_retires_first_the_runner_whose_replacement_is_online() -> None:
    """A replacement online is the surplus: its own runner goes first (in its cloud), one whose replacement
    still boots last."""
    outdated = [
        Outdated("one-a", "one", replacement="booting"),
        Outdated("one-b", "one"),
        Outdated("two-a", "two", replacement="online"),
        Outdated("two-b", "two"),
    ]
    assert [runner.runner_id for runner in retirement_order(outdated)] == ["two-a", "one-b", "two-b", "one-a"]


def pools_by_name(api: httpx.Client) -> dict[str, dict[str, Any]]:
    return {pool["name"]: pool for pool in api.get("/api/v1/pools").json()}
