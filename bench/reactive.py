"""From a queued job to a create request: latency, runners and GitHub calls per job, webhook intake rate.

Runs `corral serve` and `corral sandbox` (zero boot delay) as separate processes. Two phases:
a burst of 500 jobs at once, then a steady 20 jobs/s for a minute. Latency is measured from the webhook's
arrival (the job row's `received_at`) to the create-server request (the runner's `creating` event), both
written by corral with one clock. Then the intake alone: signed webhooks posted as fast as corral records
them, on SQLite and on PostgreSQL. Figures are printed, never asserted.

    .venv/bin/python bench/reactive.py [--burst 500] [--rate 20] [--seconds 60] [--intake 3000]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import json
import statistics
import sys
import tempfile
import time
import uuid
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import Connection, select

from corral.local import corral_config, pool_spec
from corral.model import RunnerState
from corral.store import Store
from corral.store.schema import JOBS, RUNNER_EVENTS, RUNNERS

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.support import start_corral, start_sandbox, stop
from tests.store_urls import postgres_url

LABELS = [["self-hosted", "small"], ["self-hosted", "large"], ["self-hosted"]]


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(share * len(ordered)), len(ordered) - 1)] if ordered else float("nan")


def _creating_times(connection: Connection) -> tuple[dict[int, Any], list[tuple[int | None, Any]]]:
    received = {job_id: at for job_id, at in connection.execute(select(JOBS.c.id, JOBS.c.received_at))}
    creating = connection.execute(
        select(RUNNERS.c.job_id, RUNNER_EVENTS.c.at)
        .join(RUNNER_EVENTS, RUNNER_EVENTS.c.runner_id == RUNNERS.c.id)
        .where(RUNNER_EVENTS.c.to_state == RunnerState.CREATING.value, RUNNERS.c.job_id.is_not(None))
    )
    return received, [(job_id, at) for job_id, at in creating]


def latencies_ms(store: Store) -> list[float]:
    """Per job: webhook arrival -> first create request of a runner started on its behalf."""
    received, creating = store.run_blocking(_creating_times)
    first: dict[int, Any] = {}
    for job_id, at in creating:
        if job_id is None:
            continue
        if job_id not in first or at < first[job_id]:
            first[job_id] = at
    return [(first[job_id] - received[job_id]).total_seconds() * 1000 for job_id in first if job_id in received]


def wait_for(predicate: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit("benchmark did not converge in time")
        time.sleep(0.2)


def end_to_end(args: argparse.Namespace, folder: Path) -> None:
    sandbox, info = start_sandbox(folder / "sandbox-e2e")
    try:
        control = httpx.Client(base_url=info.control_url, timeout=60)
        control.put("/rate-limit", json={"remaining": 10_000_000}).raise_for_status()
        pools = {"small": pool_spec(["small"], max_runners=2000), "large": pool_spec(["large"], max_runners=2000)}
        database = folder / "e2e.db"
        document = corral_config(info, f"sqlite:///{database}", pools, default_pool="small")
        document["cloud"]["max_concurrent_creates"] = 32
        corral, _, _ = start_corral(info, document, folder)
        try:
            burst = [
                {"at": 0.0, "repo": "octo-org/app", "labels": LABELS[i % 3], "duration": 1.0} for i in range(args.burst)
            ]
            steady = [
                {"at": 1.0 + i / args.rate, "repo": "octo-org/app", "labels": LABELS[i % 3], "duration": 1.0}
                for i in range(int(args.rate * args.seconds))
            ]
            control.post("/trace", json={"jobs": burst + steady}).raise_for_status()
            total = len(burst) + len(steady)
            wait_for(lambda: control.get("/stats").json()["github"]["jobs"]["completed"] == total, args.seconds + 300)
            stats = control.get("/stats").json()
        finally:
            stop(corral)
        store = Store(f"sqlite:///{database}")
        values = latencies_ms(store)
        store.close()
    finally:
        stop(sandbox)
    github_calls = sum(stats["api_calls"]["github"].values())
    print(f"jobs={total} with_latency={len(values)} servers_created={stats['cloud']['servers_created']}")
    print(
        f"p50_ms={statistics.median(values):.1f} p99_ms={percentile(values, 0.99):.1f} "
        f"runners_per_job={stats['cloud']['servers_created'] / total:.3f} "
        f"github_calls_per_job={github_calls / total:.2f}"
    )


async def blast(url: str, secret: str, count: int, concurrency: int) -> float:
    template = {
        "action": "queued",
        "workflow_job": {
            "id": 0,
            "run_id": 1,
            "labels": ["self-hosted", "small"],
            "created_at": "2026-11-30T00:00:00Z",
        },
        "repository": {"full_name": "octo-org/app"},
    }
    bodies = []
    for i in range(count):
        template["workflow_job"]["id"] = 10_000_000 + i  # type: ignore[index]
        body = json.dumps(template).encode()
        signature = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
        bodies.append((body, signature))
    queue: asyncio.Queue[tuple[bytes, str]] = asyncio.Queue()
    for item in bodies:
        queue.put_nowait(item)

    async def worker(client: httpx.AsyncClient) -> None:
        while not queue.empty():
            body, signature = queue.get_nowait()
            headers = {
                "X-GitHub-Event": "workflow_job",
                "X-GitHub-Delivery": str(uuid.uuid4()),
                "X-Hub-Signature-256": signature,
                "Content-Type": "application/json",
            }
            response = await client.post(url, content=body, headers=headers)
            assert response.status_code == 202, response.text

    started = time.perf_counter()
    async with httpx.AsyncClient(timeout=60) as client:
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
    return count / (time.perf_counter() - started)


def intake(args: argparse.Namespace, database: str, folder: Path, url_context: Any) -> None:
    sandbox, info = start_sandbox(folder / f"sandbox-{database}")
    try:
        with url_context as database_url:
            # A drained pool: corral records and decides but creates nothing, so this measures intake.
            document = corral_config(info, database_url, {"small": pool_spec(["small"], max_runners=1)})
            document["reconcile_interval"] = "1h"
            corral, url, token = start_corral(info, document, folder / database)
            try:
                headers = {"Authorization": f"Bearer {token}"}
                httpx.post(f"{url}/api/v1/pools/small/drain", headers=headers).raise_for_status()
                rate = asyncio.run(blast(f"{url}/webhook", info.webhook_secret, args.intake, 16))
            finally:
                stop(corral)
    finally:
        stop(sandbox)
    print(f"database={database} webhooks={args.intake} webhooks_per_s={rate:.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--burst", type=int, default=500)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--intake", type=int, default=3000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        for sub in ("sqlite", "postgresql"):
            (folder / sub).mkdir()
        end_to_end(args, folder)
        intake(args, "sqlite", folder, nullcontext(f"sqlite:///{folder}/intake.db"))
        intake(args, "postgresql", folder, postgres_url())


if __name__ == "__main__":
    main()
