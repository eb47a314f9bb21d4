"""How fast the sandbox's scale-set side routes a backlog: it must not be the bottleneck of a listener's test.

Starts an in-process sandbox, creates a scale set whose listener advertises a small capacity, queues a burst
of jobs for it (on the sandbox's loop, so HTTP is not what is measured), then drains the backlog with that
many runners while a listener polls and acknowledges. Prints the time to queue the burst, the drain time and
the messages seen. Figures are printed, never asserted.

    .venv/bin/python bench/scaleset.py [--jobs 2000] [--capacity 10]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from corral_sandbox.github.actions.settings import ActionsSettings
from corral_sandbox.server import Sandbox
from corral_sandbox.world import Timings
from tests.sandbox.scaleset_support import ScaleSetClient


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--capacity", type=int, default=10)
    args = parser.parse_args()
    with Sandbox(timings=Timings(boot_delay=0.0), actions=ActionsSettings(long_poll_s=0.2)) as sandbox:
        client = ScaleSetClient(sandbox).connect()
        scale_set = client.create_scale_set("linux")
        session = client.open_session(scale_set["id"])
        client.receive(session, capacity=args.capacity)
        github = sandbox.world.github

        def burst() -> float:
            started = time.perf_counter()
            for _ in range(args.jobs):
                github.submit_job("octo-org/app", ["linux"], 0.0)
            return time.perf_counter() - started

        queued_s = sandbox.call(burst, timeout=600)
        print(f"{args.jobs} jobs queued for a set of capacity {args.capacity}: {queued_s:.2f} s on the loop")

        control = httpx.Client(base_url=sandbox.info.control_url, timeout=60)

        def completed() -> int:
            done: int = control.get("/stats").json()["github"]["jobs"]["completed"]
            return done

        def start_runner(name: str) -> None:
            config = client.jit_config(scale_set["id"], name)
            sandbox.call(lambda: sandbox.world.server_active(name, config["encodedJITConfig"].encode()))

        started = time.perf_counter()
        runners = 0
        registered = 0
        while completed() < args.jobs:
            for _ in range(max(0, args.capacity - registered)):
                start_runner(f"runner-{runners}")
                runners += 1
            message = client.receive(session, capacity=args.capacity)
            if message is not None:
                registered = message["statistics"]["totalRegisteredRunners"]
        drained_s = time.perf_counter() - started
        print(f"drained by {runners} ephemeral runners in {drained_s:.1f} s; {len(session.seen)} job messages seen")


if __name__ == "__main__":
    main()
