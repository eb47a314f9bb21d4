"""What one reconcile pass costs as pools and runners grow: API calls on each side, and CPU time.

The sandbox runs as its own process (`corral sandbox`), so the CPU time measured here is corral's alone.
For each scenario corral is started with P pools whose warm runners add up to R, brought to steady state
(every runner idle), and then one full pass is run and measured. Cloud and GitHub calls should not grow
with the number of runners beyond pagination (1 server listing and 2 quota readings per pass, Nova's and
Neutron's, 3 with volumes; 1 runner listing per scope).
Figures are printed, never asserted.

    .venv/bin/python bench/reconcile.py [--scenarios 1x10,10x10,100x100,10x1000,100x5000]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from corral.model import RunnerState
from corral_sandbox.local import LocalCorral, corral_config, pool_spec
from corral_sandbox.server import SandboxInfo

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.spy import sampled
from bench.support import start_sandbox, stop


def calls(control: httpx.Client) -> dict[str, int]:
    api = control.get("/stats").json()["api_calls"]
    return {side: sum(api[side].values()) for side in ("openstack", "github")}


def scenario(info: SandboxInfo, folder: Path, pools: int, runners: int, profile: bool = False) -> dict[str, Any]:
    """One scenario's figures; with `profile`, py-spy samples this process (corral runs in it) through the
    measured pass and prints where its CPU went, by function (`bench/spy.py`)."""
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
        before = calls(control)
        with sampled(os.getpid()) if profile else contextlib.nullcontext() as sampling:
            cpu = time.process_time()
            wall = time.perf_counter()
            corral.settle()
            cpu = time.process_time() - cpu
            wall = time.perf_counter() - wall
        if sampling is not None:
            print(f"{pools}x{runners}: where the pass's CPU went\n{sampling.report()}", flush=True)
        after = calls(control)
    finally:
        corral.stop()
    return {
        "pools": pools,
        "runners": pools * per_pool,
        "cloud_calls": after["openstack"] - before["openstack"],
        "github_calls": after["github"] - before["github"],
        "cpu_s": cpu,
        "wall_s": wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenarios", default="1x10,10x10,100x100,10x1000,100x5000", help="POOLSxRUNNERS,...")
    parser.add_argument("--profile", action="store_true", help="print where each measured pass's CPU went (py-spy)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        process, info = start_sandbox(folder / "sandbox")
        try:
            for item in args.scenarios.split(","):
                pools, runners = (int(part) for part in item.split("x"))
                result = scenario(info, folder, pools, runners, args.profile)
                print(
                    " ".join(
                        f"{key}={value:.3f}" if isinstance(value, float) else f"{key}={value}"
                        for key, value in result.items()
                    ),
                    flush=True,
                )
        finally:
            stop(process)


if __name__ == "__main__":
    main()
