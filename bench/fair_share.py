"""One repository's matrix against everyone else's jobs on one pool: does `max_runners_per_repo` keep the
others served?

A pool of `--max-runners` runners gets a 200-job matrix from one repository at once, then, a moment later,
20 jobs from four other repositories. Run twice: without a cap (GitHub hands each runner the oldest job, so
the matrix takes the pool) and with `max_runners_per_repo: 5`. Printed, never asserted:

- the other repositories' queued -> started p50/p90, beside one boot plus one job's duration (the issue asks
  that the others' median stay within that);
- the matrix's p50 and the most of its jobs that ran at once;
- every job served.

    .venv/bin/python bench/fair_share.py [--matrix 200] [--others 20] [--boot 2.0] [--duration 5.0]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.quota import percentile
from bench.support import start_sandbox, stop
from corral_sandbox.local import LocalCorral, corral_config, pool_spec

MATRIX_REPO = "octo-org/matrix"


def most_at_once(jobs: list[dict[str, Any]]) -> int:
    edges = sorted([(job["started_at_s"], 1) for job in jobs] + [(job["completed_at_s"], -1) for job in jobs])
    running = most = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    return most


def run(folder: Path, args: argparse.Namespace, cap: int | None) -> dict[str, Any]:
    process, info = start_sandbox(folder / f"sandbox-{cap}", boot_delay=args.boot)
    try:
        control = httpx.Client(base_url=info.control_url, timeout=60)
        overrides: dict[str, Any] = {"max_runners": args.max_runners}
        if cap is not None:
            overrides["max_runners_per_repo"] = cap
        pools = {"shared": pool_spec(["shared"], **overrides)}
        document = corral_config(info, f"sqlite:///{folder}/corral-{cap}.db", pools, default_pool="shared")
        corral = LocalCorral(info, folder / f"corral-{cap}.yaml", document).start()
        try:
            matrix = [{"at": 0.0, "repo": MATRIX_REPO, "labels": ["shared"], "duration": args.duration}] * args.matrix
            others = [
                {"at": 1.0 + i * 0.2, "repo": f"octo-org/app-{i % 4}", "labels": ["shared"], "duration": args.duration}
                for i in range(args.others)
            ]
            control.post("/trace", json={"jobs": matrix + others}).raise_for_status()
            deadline = time.monotonic() + 1800
            while control.get("/stats").json()["github"]["jobs"]["completed"] < len(matrix) + len(others):
                if time.monotonic() > deadline:
                    raise SystemExit("the jobs did not complete in 30 minutes")
                time.sleep(0.5)
            views = control.get("/jobs").json()
        finally:
            corral.stop()
    finally:
        stop(process)
    mine = [job for job in views if job["repo"] == MATRIX_REPO]
    theirs = [job for job in views if job["repo"] != MATRIX_REPO]

    def waits(jobs: list[dict[str, Any]]) -> list[float]:
        return [job["started_at_s"] - job["queued_at_s"] for job in jobs]

    return {
        "jobs": len(views),
        "others_p50_s": statistics.median(waits(theirs)),
        "others_p90_s": percentile(waits(theirs), 0.9),
        "matrix_p50_s": statistics.median(waits(mine)),
        "matrix_at_once": most_at_once(mine),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--matrix", type=int, default=200)
    parser.add_argument("--others", type=int, default=20)
    parser.add_argument("--max-runners", type=int, default=20)
    parser.add_argument("--cap", type=int, default=5)
    parser.add_argument("--boot", type=float, default=2.0, help="seconds a server takes to boot in the sandbox")
    parser.add_argument("--duration", type=float, default=5.0, help="seconds each job runs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        for cap in (None, args.cap):
            result = run(folder, args, cap)
            print(
                f"max_runners_per_repo={cap or 'none'} max_runners={args.max_runners} jobs={result['jobs']} "
                f"boot_plus_job_s={args.boot + args.duration:.1f} others_wait_p50_s={result['others_p50_s']:.2f} "
                f"others_wait_p90_s={result['others_p90_s']:.2f} matrix_wait_p50_s={result['matrix_p50_s']:.2f} "
                f"matrix_jobs_at_once={result['matrix_at_once']}",
                flush=True,
            )


if __name__ == "__main__":
    main()
