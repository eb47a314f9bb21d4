"""What intake, a pass and a job cost, counted: SQL statements corral sends its database, calls it makes to each
far end. The same counts `tests/test_costs.py` asserts exactly; here with reads per job too (they depend on
how many passes a job's webhooks woke, so the tests leave them out) and over more jobs.

Runs the sandbox and corral in this process (counts, unlike CPU time, do not mind sharing it). Passes are
driven by `LocalCorral.settle()` alone: the periodic look, missed-job scan and stale-job check are an hour apart.

    .venv/bin/python bench/costs.py [--jobs 40] [--runners 0,10,1000] [--no-postgresql]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from collections import Counter
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.counting import StatementCounter, calls_since, sandbox_calls
from corral.model import Delivery, JobState, JobUpdate, RunnerState
from corral.store.database import Store
from corral.store.intake import Intake
from corral_sandbox.local import LocalCorral, corral_config, pool_spec
from corral_sandbox.server import Sandbox
from corral_sandbox.world import Timings
from tests.seeding import start_with_idle_runners
from tests.store_urls import postgres_url, sqlite_url

QUIET = {"reconcile_interval": "1h", "missed_job_scan": "1h", "stale_job_check": "1h"}
LIVE = [state for state in RunnerState if state is not RunnerState.DELETED]


def shown(counts: Counter[str] | dict[str, int], per: int = 1) -> str:
    return " ".join(f"{kind.replace(' ', '_')}={count / per:g}" for kind, count in sorted(counts.items()))


def total(calls: dict[str, dict[str, int]], side: str) -> int:
    return sum(calls[side].values())


def intake(database: str, urls: AbstractContextManager[str]) -> None:
    """Statements per delivery for groups of N queued deliveries, recorded through the webhook's group commit."""
    with urls as url:
        store = Store(url)
        store.migrate()
        counter = StatementCounter(store.engine)
        first = 1
        for batch in (1, 10, 100, 500, 1000):
            deliveries = [
                Delivery(f"bench-{job}", "workflow_job", "queued", JobUpdate(job, "o/r", ("s",), JobState.QUEUED, "s"))
                for job in range(first, first + batch)
            ]
            first += batch

            async def arrive(group: list[Delivery] = deliveries) -> None:
                recorder = Intake(store, lambda _result: None)
                await asyncio.gather(*(recorder.record(delivery) for delivery in group))

            with counter.counting():
                asyncio.run(arrive())
            print(
                f"intake database={database} deliveries={batch} statements={counter.total} "
                f"per_delivery={counter.total / batch:.3f} ({shown(counter.kinds)})",
                flush=True,
            )
        store.close()


def start(sandbox: Sandbox, folder: Path, name: str, *, idle: int = 0, **pool: Any) -> LocalCorral:
    """corral with one pool, `small`, started once `idle` idle runners of it are in place (`tests.seeding`: what
    corral's creates would leave, without the minute a thousand of them take)."""
    document = corral_config(
        sandbox.info, f"sqlite:///{folder / name}.db", {"small": pool_spec(["small"], **pool)}, **QUIET
    )
    document["cloud"]["max_concurrent_creates"] = 32
    corral = LocalCorral(sandbox.info, folder / f"{name}.yaml", document)
    return start_with_idle_runners(corral, sandbox, "small", idle)


def settled(corral: LocalCorral, done: Any, limit: int = 1000) -> int:
    """Passes until `done()` holds; how many it took."""
    for looks in range(1, limit + 1):
        corral.settle(timeout=600)
        if done():
            return looks
    raise SystemExit(f"not settled after {limit} passes")


def passes(sandbox: Sandbox, control: httpx.Client, folder: Path, sizes: list[int]) -> None:
    """One look and the passes after it, over N idle runners (seeded; the first passes find them all idle)."""
    for size in sizes:
        control.post("/reset").raise_for_status()
        control.put("/rate-limit", json={"remaining": 10_000_000}).raise_for_status()
        corral = start(sandbox, folder, f"pass-{size}", idle=size, min_idle=size, max_runners=max(size, 1))
        try:
            settled(corral, lambda up=corral, want=size: len(up.runners(states=[RunnerState.IDLE])) == want)
            corral.settle()
            counter = StatementCounter(corral.service.store.engine)
            before = sandbox_calls(control)
            with counter.counting():
                corral.settle()
            calls = calls_since(control, before)
        finally:
            corral.stop()
        print(
            f"pass runners={size} statements={counter.total} cloud_calls={total(calls, 'openstack')} "
            f"github_calls={total(calls, 'github')} ({shown(counter.kinds)}; {shown(calls['openstack'])}; "
            f"{shown(calls['github'])})",
            flush=True,
        )


def jobs(sandbox: Sandbox, control: httpx.Client, folder: Path, count: int, *, burst: bool) -> None:
    """N jobs that take no time, one after another (each served and its runner deleted before the next) or
    all at once: cost per job. Reads depend on how many passes the jobs' webhooks and the looks woke, and a
    burst's writes on how runners and jobs meet (swaps, diversions), so the tests assert only the sequential
    writes and calls."""
    control.post("/reset").raise_for_status()
    corral = start(sandbox, folder, f"jobs-{'burst' if burst else 'sequential'}", max_runners=count if burst else 10)
    looks = 0
    request = {"repo": "octo-org/app", "labels": ["self-hosted", "small"], "duration": 0}

    def served(wanted: set[int]) -> bool:
        completed = {job["id"] for job in control.get("/jobs", params={"status": "completed"}).json()}
        return wanted <= completed and not corral.runners(states=LIVE)

    try:
        settled(corral, lambda: True)
        counter = StatementCounter(corral.service.store.engine)
        before = sandbox_calls(control)
        with counter.counting():
            rounds = [count] if burst else [1] * count
            for size in rounds:
                wanted = {control.post("/jobs", json=request).raise_for_status().json()["id"] for _ in range(size)}
                looks += settled(corral, lambda wanted=wanted: served(wanted))
        calls = calls_since(control, before)
        runners = corral.runners()
        moves = sum(
            1
            for runner in runners
            for event in corral.events(runner.id)
            if event.from_state not in (None, event.to_state)
        )
    finally:
        corral.stop()
    listings = {
        "GET /compute/v2.1/servers/detail",
        "GET /compute/v2.1/limits",
        "GET /network/v2.0/quotas/{project_id}/details",
        "GET /orgs/{org}/actions/runners",
    }
    work = {side: {key: n for key, n in calls[side].items() if key not in listings} for side in calls}
    reads = Counter({kind: n for kind, n in counter.kinds.items() if kind.startswith("SELECT")})
    writes = Counter({kind: n for kind, n in counter.kinds.items() if not kind.startswith("SELECT")})
    print(
        f"jobs={count} {'at once' if burst else 'one after another'}: runners={len(runners)} moves={moves} "
        f"looks={looks} per_job: cloud_calls={sum(work['openstack'].values()) / count:g} "
        f"github_calls={sum(work['github'].values()) / count:g} (besides the looks' listings) "
        f"writes={sum(writes.values()) / count:g} reads={sum(reads.values()) / count:g}",
        flush=True,
    )
    print(f"  per job: {shown(work['openstack'], count)} {shown(work['github'], count)}", flush=True)
    print(f"  writes per job: {shown(writes, count)}", flush=True)
    print(f"  reads per job: {shown(reads, count)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=40, help="jobs one after another, then as many at once")
    parser.add_argument("--runners", default="0,10,1000", help="idle runners for the pass figures, comma-separated")
    parser.add_argument("--no-postgresql", action="store_true", help="intake on SQLite only")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        intake("sqlite", sqlite_url(folder))
        if not args.no_postgresql:
            intake("postgresql", postgres_url())
        timings = Timings(boot_delay=0.05, register_delay=0.0, delete_delay=0.0)
        with (
            Sandbox(timings=timings) as sandbox,
            httpx.Client(base_url=sandbox.info.control_url, timeout=60) as control,
        ):
            passes(sandbox, control, folder, [int(size) for size in args.runners.split(",") if size])
            jobs(sandbox, control, folder, args.jobs, burst=False)
            jobs(sandbox, control, folder, args.jobs, burst=True)


if __name__ == "__main__":
    main()
