"""Cache volumes (`cache_volumes`, issue 31): a pool keeps a few Cinder volumes and hands one to each new server,
so its runners start with what earlier jobs left there (container images, a tool cache).

Against the sandbox's Nova and Cinder, through openstacksdk: a server boots with an existing volume mapped
(`source_type: volume`, kept when the server goes), Cinder shows it `in-use` and `available` again once Nova
has deleted the server, and the pool's next server gets it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import openstack.connection
import pytest

from corral.model import RunnerState
from corral_sandbox.local import corral_config, pool_spec
from corral_sandbox.server import Sandbox
from tests.conftest import StartCorral
from tests.waiting import wait_until

ORG = "octo-org"
CACHE = {"size_gb": 5, "max": 2, "mount": "/var/lib/ci-cache"}


def cache_volumes(os_conn: openstack.connection.Connection) -> dict[str, Any]:
    """The cache volumes Cinder has, by id (corral marks them with its installation, pool and `corral-cache`)."""
    return {volume.id: volume for volume in os_conn.block_storage.volumes() if "corral-cache" in volume.metadata}


def submit(control: httpx.Client, count: int) -> list[int]:
    request = {"repo": f"{ORG}/app", "labels": ["self-hosted", "small"], "duration": 0.3}
    return [int(control.post("/jobs", json=request).raise_for_status().json()["id"]) for _ in range(count)]


def test_two_cache_volumes_serve_thirty_jobs_and_go_once_the_setting_does(
    start_corral: StartCorral,
    control: httpx.Client,
    os_conn: openstack.connection.Connection,
    sandbox: Sandbox,
    tmp_path: Path,
) -> None:
    database = f"sqlite:///{tmp_path / 'corral.db'}"
    pools = {"small": pool_spec(["small"], cache_volumes=CACHE, max_runners=4)}
    corral = start_corral(document=corral_config(sandbox.info, database, pools))
    kept: dict[str, Any] = {}
    for _ in range(15):  # two jobs at a time, thirty in all
        jobs = submit(control, 2)

        def served(jobs: list[int] = jobs) -> bool:
            finished = all(control.get(f"/jobs/{job}").json()["status"] == "completed" for job in jobs)
            gone = not corral.runners(pool="small", states=[s for s in RunnerState if s is not RunnerState.DELETED])
            with corral.api() as api:
                (pool,) = api.get("/api/v1/pools").raise_for_status().json()
            return finished and gone and pool["cache_volumes"]["free"] == 2

        wait_until(served, timeout=60, what="both jobs done, their runners gone and both volumes free again")
        listed = cache_volumes(os_conn)
        assert len(listed) == 2 and all(volume.status == "available" for volume in listed.values())
        assert not kept or set(listed) == set(kept), "the same two volumes, kept between jobs"
        kept = listed
    stats = control.get("/stats").json()["cloud"]
    assert stats["volumes_created"] == 2 and stats["volumes_deleted"] == 0
    starts = sorted(runner.cache or "" for runner in corral.runners(pool="small"))
    assert starts == ["cold"] * 2 + ["warm"] * 28, "the first two made the volumes; every later runner got one"
    volume = next(iter(kept.values()))
    assert (
        volume.size == 5 and volume.metadata["corral-pool"] == "small" and volume.name.startswith("corral-cache-small-")
    )
    with corral.api() as api:
        (pool,) = api.get("/api/v1/pools").raise_for_status().json()
    assert pool["cache_volumes"] == {
        "max": 2,
        "creating": 0,
        "held": 0,
        "free": 2,
        "deleting": 0,
        "started_warm": 28,
        "started_cold": 2,
        "started_without": 0,
        "warm_share": 28 / 30,
    }

    without = {"small": pool_spec(["small"], max_runners=4)}
    assert corral.reload(corral_config(sandbox.info, database, without)) == []

    def removed() -> bool:
        with corral.api() as api:
            (pool,) = api.get("/api/v1/pools").raise_for_status().json()
        return not cache_volumes(os_conn) and pool["cache_volumes"] is None

    wait_until(removed, timeout=60, what="the pool's cache volumes deleted, and forgotten")
    assert control.get("/stats").json()["cloud"]["volumes_deleted"] == 2


def test_a_volume_nova_left_attached_to_a_deleted_server_is_detached_and_used_again(
    start_corral: StartCorral,
    control: httpx.Client,
    os_conn: openstack.connection.Connection,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every server delete leaves the pool's one volume `in-use`, attached to the gone server (Nova's detach
    call to Cinder failed): corral detaches it (Cinder's `os-detach`) once its runner is gone, and the next
    runner gets it, warm."""
    control.put("/faults", json={"world": {"stuck_attachment_rate": 1.0}}).raise_for_status()
    corral = start_corral({"small": pool_spec(["small"], cache_volumes={"size_gb": 5, "max": 1})})
    for _ in range(3):
        (job,) = submit(control, 1)

        def served(job: int = job) -> bool:
            with corral.api() as api:
                (pool,) = api.get("/api/v1/pools").raise_for_status().json()
            done = control.get(f"/jobs/{job}").json()["status"] == "completed"
            return bool(done and pool["cache_volumes"]["free"] == 1)

        wait_until(served, timeout=60, what="the job done and its stuck volume detached and free again")
    (volume,) = cache_volumes(os_conn).values()
    assert volume.status == "available" and not volume.attachments
    assert control.get("/stats").json()["cloud"]["volumes_created"] == 1
    assert sorted(runner.cache or "" for runner in corral.runners(pool="small")) == ["cold", "warm", "warm"]
    detaches = [record for record in caplog.records if "is still attached to server" in record.getMessage()]
    assert len(detaches) == 3, "each of the three servers left it attached"
