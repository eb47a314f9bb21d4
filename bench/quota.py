"""Two pools sharing a small quota: are creates ever refused, and what does sharing cost the important pool?

A project with a quota of 10 instances serves a trace of 100 jobs, half for a pool of priority 10 (`high`)
and half for one of priority 1 (`low`, which also keeps warm runners). The same `high` jobs are then run
with the project to themselves. Printed, never asserted:

- creates Nova refused for quota (corral plans within the headroom, so these should be 0);
- the `high` pool's queued -> started p50/p90 shared and alone, and the boot time of a server (the issue asks
  that sharing cost the high pool no more than one boot);
- every job served.

    .venv/bin/python bench/quota.py [--jobs 100] [--boot 2.0] [--duration 3.0]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.support import start_sandbox, stop
from corral.model import Reason
from corral_sandbox.local import LocalCorral, corral_config, pool_spec

QUOTA = 10


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(share * len(ordered)), len(ordered) - 1)] if ordered else float("nan")


def run(folder: Path, args: argparse.Namespace, shared: bool) -> dict[str, Any]:
    process, info = start_sandbox(folder / f"sandbox-{shared}", boot_delay=args.boot)
    try:
        control = httpx.Client(base_url=info.control_url, timeout=60)
        control.put("/quota", json={"instances": QUOTA}).raise_for_status()
        pools = {"high": pool_spec(["high"], priority=10, max_runners=QUOTA)}
        if shared:
            pools["low"] = pool_spec(["low"], priority=1, min_idle=4, max_runners=QUOTA)
        document = corral_config(info, f"sqlite:///{folder}/corral-{shared}.db", pools, default_pool="high")
        document["reconcile_interval"] = "2s"
        corral = LocalCorral(info, folder / f"corral-{shared}.yaml", document).start()
        try:
            rng = random.Random(3)
            labels = ["high", "low"] if shared else ["high"]
            jobs = [
                {
                    "at": rng.uniform(0, 20),
                    "repo": "octo-org/app",
                    "labels": [labels[i % len(labels)]],
                    "duration": args.duration,
                }
                for i in range(args.jobs if shared else args.jobs // 2)
            ]
            control.post("/trace", json={"jobs": jobs}).raise_for_status()
            deadline = time.monotonic() + 900
            while control.get("/stats").json()["github"]["jobs"]["completed"] < len(jobs):
                if time.monotonic() > deadline:
                    raise SystemExit("the jobs did not complete in 15 minutes")
                time.sleep(0.5)
            views = control.get("/jobs").json()
            refused = sum(
                1
                for runner in corral.runners()
                for event in corral.events(runner.id)
                if event.reason is Reason.CLOUD_QUOTA
            )
        finally:
            corral.stop()
    finally:
        stop(process)
    waits = [job["started_at_s"] - job["queued_at_s"] for job in views if job["labels"] == ["high"]]
    return {
        "jobs": len(views),
        "refused_for_quota": refused,
        "high_p50_s": statistics.median(waits),
        "high_p90_s": percentile(waits, 0.9),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--boot", type=float, default=2.0, help="seconds a server takes to boot in the sandbox")
    parser.add_argument("--duration", type=float, default=3.0, help="seconds each job runs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        for shared in (False, True):
            result = run(folder, args, shared)
            print(
                f"project={'shared with a low-priority pool' if shared else 'to itself'} quota_instances={QUOTA} "
                f"boot_s={args.boot:.1f} jobs={result['jobs']} refused_for_quota={result['refused_for_quota']} "
                f"high_wait_p50_s={result['high_p50_s']:.2f} high_wait_p90_s={result['high_p90_s']:.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
