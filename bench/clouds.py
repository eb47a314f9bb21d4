"""A pool placed in two clouds, the first of them healthy, full, failing every create, or booting nothing:
what spilling over to the second costs the jobs.

Each run serves a trace of `--jobs` jobs over 20 s (3 s each) against an in-process sandbox whose servers
boot in `--boot` s, with the pool's placements `[east, west]` (the sandbox's two clouds). Printed, never
asserted, per run: the jobs' queued -> started p50/p90, the servers each cloud made, and the runners the first
cloud failed.

    .venv/bin/python -m bench.clouds [--jobs 100] [--boot 2.0]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from corral.model import RunnerState
from corral_sandbox.local import LocalCorral, corral_config, pool_spec
from corral_sandbox.server import Sandbox
from corral_sandbox.world import Timings

FIRST_CLOUD = ("healthy", "full", "failing", "unbootable")


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(share * len(ordered)), len(ordered) - 1)] if ordered else float("nan")


def prepare(sandbox: Sandbox, control: httpx.Client, first: str) -> dict[str, Any]:
    """Break the first cloud as `first` says; the placements to use."""
    placements: list[dict[str, Any]] = [{"cloud": "east"}, {"cloud": "west"}]
    if first == "full":
        control.put("/quota", params={"cloud": "one"}, json={"instances": 0}).raise_for_status()
    elif first == "failing":
        fault = {"match": "openstack POST /compute/v2.1/servers", "error_rate": 1.0, "status": 503}
        control.put("/faults", json={"endpoints": [fault]}).raise_for_status()
    elif first == "unbootable":
        broken = str(uuid.uuid4())
        sandbox.call(lambda: sandbox.world.cloud.add_image("unbootable", image_id=broken))
        control.put("/faults", json={"world": {"failing_images": [broken]}}).raise_for_status()
        placements[0]["image"] = "unbootable"
    return {"small": pool_spec(["small"], max_runners=40, placements=placements)}


def run(folder: Path, args: argparse.Namespace, first: str) -> str:
    with Sandbox(timings=Timings(boot_delay=args.boot), workdir=folder / first) as sandbox:
        control = httpx.Client(base_url=sandbox.info.control_url, timeout=30)
        document = corral_config(sandbox.info, f"sqlite:///{folder / first}.db", prepare(sandbox, control, first))
        del document["cloud"]
        document["clouds"] = {
            "east": {"cloud": sandbox.info.cloud_name, "quota_retry": "2s"},
            "west": {"cloud": sandbox.info.second_cloud_name, "quota_retry": "2s"},
        }
        corral = LocalCorral(sandbox.info, folder / f"{first}.yaml", document).start()
        try:
            with corral.api() as api:  # the pool checked, as on a corral that has been running

                def ready() -> bool:
                    return all(pool["ready"] for pool in api.get("/api/v1/pools").json())

                while not ready():
                    time.sleep(0.2)
            rng = random.Random(4)
            jobs = [
                {"at": rng.uniform(0, 20), "repo": "octo-org/app", "labels": ["small"], "duration": 3.0}
                for _ in range(args.jobs)
            ]
            control.post("/trace", json={"jobs": jobs}).raise_for_status()
            deadline = time.monotonic() + 600
            while control.get("/stats").json()["github"]["jobs"]["completed"] < args.jobs:
                if time.monotonic() > deadline:
                    raise SystemExit("the jobs did not complete in 10 minutes")
                time.sleep(0.5)
            views = control.get("/jobs").json()
            made = {cloud: len(control.get("/servers", params={"cloud": cloud}).json()) for cloud in ("one", "two")}
            failed = sum(
                1
                for runner in corral.runners(pool="small")
                if runner.cloud == "east"
                and any(event.to_state is RunnerState.FAILED for event in corral.events(runner.id))
            )
        finally:
            corral.stop()
    waits = [job["started_at_s"] - job["queued_at_s"] for job in views]
    return (
        f"first_cloud={first} jobs={len(views)} wait_p50_s={statistics.median(waits):.2f} "
        f"wait_p90_s={percentile(waits, 0.9):.2f} servers_first={made['one']} servers_second={made['two']} "
        f"runners_failed_in_first={failed}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--boot", type=float, default=2.0, help="seconds a server takes to boot in the sandbox")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        for first in FIRST_CLOUD:
            print(run(Path(name), args, first), flush=True)


if __name__ == "__main__":
    main()
