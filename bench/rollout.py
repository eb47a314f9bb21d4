"""Image rollouts on a pool of 10 warm runners: how long they take, what they cost, and what a canary and a
rollback do while jobs keep coming.

Three runs against an in-process sandbox (servers boot in `--boot` s, are deleted in 1 s), each with a fresh
world and corral:

- `plain`: a new upload matching the pool's image filter; seconds until the 10 warm runners are all on it,
  and the most servers that existed at once (the pool's 10 plus `max_surge` 2 at most is the promise).
- `canary`: the same with `rollout.canary: 20%` and `canary_jobs: 5`, and a job a second; seconds until
  the image is promoted, how many of the runners started before then got it, and seconds until no free
  (idle or starting) runner is left on the old image: while the stream runs, a few of the warm runners are
  always busy or booting, so "all warm runners idle on the new image" would only time the stream's end.
- `rollback`: an upload no host can boot (NoValidHost); seconds until corral rolls back, boots failed on it,
  and the jobs of the stream all served meanwhile.

Printed, never asserted. Corral and the sandbox share this process: times include that.

    .venv/bin/python -m bench.rollout [--boot 2.0]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from corral.clock import utcnow
from corral.model import STARTING_STATES, RunnerState
from corral_sandbox.local import LocalCorral, corral_config, pool_spec
from corral_sandbox.server import Sandbox
from corral_sandbox.world import Timings
from tests.test_images import most_servers_at_once

WARM = 10
PROPERTIES = {"os_distro": "ubuntu"}
FILTER = {"properties": PROPERTIES, "tags": ["runner"]}


def wait_for(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(0.2)
    raise SystemExit(f"gave up after {timeout:.0f}s waiting for {what}")


def idle_images(corral: LocalCorral) -> list[str | None]:
    return [runner.image_id for runner in corral.runners(pool="linux", states=[RunnerState.IDLE])]


def free_on_other_images(corral: LocalCorral, image_id: str) -> list[str]:
    """Idle or starting runners whose server was made from another image than `image_id`."""
    free = corral.runners(pool="linux", states=[*STARTING_STATES, RunnerState.IDLE])
    return [runner.id for runner in free if runner.image_id is not None and runner.image_id != image_id]


def rollout_of(corral: LocalCorral) -> dict[str, Any] | None:
    with corral.api() as api:
        (pool,) = api.get("/api/v1/pools").json()
    rollout: dict[str, Any] | None = pool["rollout"]
    return rollout


def run(folder: Path, boot_s: float, scenario: str) -> str:
    with Sandbox(timings=Timings(boot_delay=boot_s, delete_delay=1.0), workdir=folder / scenario) as sandbox:
        control = httpx.Client(base_url=sandbox.info.control_url, timeout=30)
        rollout: dict[str, Any] = {"max_surge": 2, "min_boots": 3}
        if scenario == "canary":
            rollout |= {"canary": "20%", "canary_jobs": 5}
        pool = pool_spec(["linux"], image=FILTER, min_idle=WARM, max_runners=20, rollout=rollout)
        document = corral_config(
            sandbox.info, f"sqlite:///{folder / scenario}.db", {"linux": pool}, tuning={"pool_recheck": "1s"}
        )
        corral = LocalCorral(sandbox.info, folder / f"{scenario}.yaml", document).start()
        try:
            wait_for(lambda: len(idle_images(corral)) == WARM, 120, "the warm runners")
            since = max(life["created_s"] for life in control.get("/servers").json())
            image_id = str(uuid.uuid4())
            if scenario == "rollback":
                control.put("/faults", json={"world": {"failing_images": [image_id]}}).raise_for_status()
            stream = [{"at": float(i), "repo": "octo-org/app", "labels": ["linux"], "duration": 1.0} for i in range(90)]
            if scenario != "plain":
                control.post("/trace", json={"jobs": stream}).raise_for_status()
            cloud = sandbox.world.cloud
            started, uploaded = time.monotonic(), utcnow()
            sandbox.call(lambda: cloud.add_image(f"ubuntu-{scenario}", PROPERTIES, ["runner"], image_id))
            if scenario == "rollback":
                rolled = wait_for(lambda: (r := rollout_of(corral)) and r["rolled_back"] and r, 120, "a rollback")
                rolled_s = time.monotonic() - started
                wait_for(lambda: control.get("/stats").json()["github"]["jobs"]["completed"] >= 90, 300, "the jobs")
                return (
                    f"scenario=rollback boot_s={boot_s:.1f} rolled_back_after_s={rolled_s:.1f} "
                    f"failed_boots={rolled['failed']} jobs_served=90/90"
                )
            promoted_s = None
            canaries = created = 0
            if scenario == "canary":
                wait_for(lambda: (r := rollout_of(corral)) and r["phase"] == "canary", 60, "the canary")
                wait_for(lambda: rollout_of(corral) is None, 300, "the canary promoted")
                promoted_s = time.monotonic() - started
                made = [r.image_id for r in corral.runners(pool="linux") if r.created_at >= uploaded and r.image_id]
                canaries, created = made.count(image_id), len(made)
            if scenario == "plain":
                wait_for(lambda: idle_images(corral).count(image_id) >= WARM, 300, "the warm runners on the new image")
            else:
                wait_for(lambda: not free_on_other_images(corral, image_id), 300, "no free runner on the old image")
            all_new_s = time.monotonic() - started
            most = most_servers_at_once(control.get("/servers").json(), since)
            line = f"scenario={scenario} boot_s={boot_s:.1f}"
            if scenario == "plain":
                return (
                    f"{line} warm_on_new_image_after_s={all_new_s:.1f} most_servers_at_once={most} "
                    f"(pool {WARM} + max_surge 2)"
                )
            return (
                f"{line} promoted_after_s={promoted_s:.1f} canaries_before_promotion={canaries} of {created} "
                f"old_image_free_runners_gone_after_s={all_new_s:.1f}"
            )
        finally:
            corral.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--boot", type=float, default=2.0, help="seconds a server takes to boot in the sandbox")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        for scenario in ("plain", "canary", "rollback"):
            print(run(Path(name), args.boot, scenario), flush=True)


if __name__ == "__main__":
    main()
