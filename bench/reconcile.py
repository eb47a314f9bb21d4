"""What one reconcile pass costs as pools and runners grow: API calls on each side, and CPU time.

The sandbox runs as its own process (`corral sandbox`), so the CPU time measured here is corral's alone.
For each scenario corral is started with P pools whose warm runners add up to R, brought to steady state
(every runner idle, and nothing changed at the far ends for longer than the server listing's overlap, so a
look's `changes-since` returns what changed, not the last seconds of the bring-up), and then full passes are
run and measured. Cloud and GitHub calls should not grow with the number of runners beyond pagination (1
server listing and 2 quota readings per pass, Nova's and Neutron's, 3 with volumes; 1 runner listing per
scope, answered 304 while nothing changed); `servers_listed` is what the listings returned per pass.
Figures are printed, never asserted.

    .venv/bin/python bench/reconcile.py [--scenarios 1x10,10x10,100x100,10x1000,100x5000]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from corral.cloud.server_listing import OVERLAP_S
from corral.metrics import REGISTRY
from corral.model import RunnerState
from corral_sandbox.local import LocalCorral, corral_config, pool_spec
from corral_sandbox.server import SandboxInfo

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.spy import sampled
from bench.support import start_sandbox, stop


def calls(control: httpx.Client) -> dict[str, float]:
    """Calls the sandbox answered on each side, and the servers corral's listings returned (corral runs in this
    process: its metrics are this process's)."""
    api = control.get("/stats").json()["api_calls"]
    listed = sum(
        REGISTRY.get_sample_value("corral_cloud_servers_listed_total", {"kind": kind}) or 0.0
        for kind in ("full", "changes")
    )
    return {"openstack": sum(api["openstack"].values()), "github": sum(api["github"].values()), "listed": listed}


def scenario(
    info: SandboxInfo, folder: Path, pools: int, runners: int, passes: int = 3, profile: bool = False
) -> dict[str, Any]:
    """One scenario's figures: calls per pass, and the median of `passes` full passes' CPU (one pass alone
    varies by a third from run to run); with `profile`, py-spy samples this process (corral runs in it) through
    the measured passes and prints where their CPU went, by function (`bench/spy.py`)."""
    control = httpx.Client(base_url=info.control_url, timeout=120)
    control.post("/reset").raise_for_status()
    control.put("/rate-limit", json={"remaining": 10_000_000}).raise_for_status()
    per_pool = max(runners // pools, 1)
    specs = {f"p{i}": pool_spec([f"p{i}"], min_idle=per_pool, max_runners=per_pool) for i in range(pools)}
    # A folder of its own per run: a scenario named twice in --scenarios gets a new database, not the first's.
    own = Path(tempfile.mkdtemp(dir=folder, prefix=f"{pools}x{runners}-"))
    document = corral_config(info, f"sqlite:///{own}/corral.db", specs, default_pool="p0")
    document["reconcile_interval"] = "1h"
    document["cloud"]["max_concurrent_creates"] = 32
    corral = LocalCorral(info, own / "corral.yaml", document).start()
    try:
        deadline = time.monotonic() + 900
        while len(corral.runners(states=[RunnerState.IDLE])) < pools * per_pool:
            if time.monotonic() > deadline:
                raise SystemExit(f"{pools}x{runners}: runners did not all come up")
            corral.settle(timeout=600)
        # Steady state: the newest change Nova reported is older than the overlap the next `changes-since`
        # re-reads (a bench waits; no test does).
        time.sleep(OVERLAP_S + 1)
        corral.settle()
        before = calls(control)
        cpus, walls = [], []
        with sampled(os.getpid()) if profile else contextlib.nullcontext() as sampling:
            for _ in range(passes):
                cpu = time.process_time()
                wall = time.perf_counter()
                corral.settle()
                cpus.append(time.process_time() - cpu)
                walls.append(time.perf_counter() - wall)
        if sampling is not None:
            print(f"{pools}x{runners}: where the passes' CPU went\n{sampling.report()}", flush=True)
        after = calls(control)
    finally:
        corral.stop()
    return {
        "pools": pools,
        "runners": pools * per_pool,
        "cloud_calls": (after["openstack"] - before["openstack"]) / passes,
        "github_calls": (after["github"] - before["github"]) / passes,
        "servers_listed": (after["listed"] - before["listed"]) / passes,
        "cpu_s": statistics.median(cpus),
        "wall_s": statistics.median(walls),
        "cpu_s_each": "/".join(f"{cpu:.3f}" for cpu in cpus),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenarios", default="1x10,10x10,100x100,10x1000,100x5000", help="POOLSxRUNNERS,...")
    parser.add_argument("--passes", type=int, default=3, help="full passes measured per scenario (median printed)")
    parser.add_argument("--profile", action="store_true", help="print where each measured pass's CPU went (py-spy)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        process, info = start_sandbox(folder / "sandbox")
        try:
            for item in args.scenarios.split(","):
                pools, runners = (int(part) for part in item.split("x"))
                result = scenario(info, folder, pools, runners, args.passes, args.profile)
                print(
                    " ".join(
                        f"{key}={value:.3f}".rstrip("0").rstrip(".") if isinstance(value, float) else f"{key}={value}"
                        for key, value in result.items()
                    ),
                    flush=True,
                )
        finally:
            stop(process)


if __name__ == "__main__":
    main()
