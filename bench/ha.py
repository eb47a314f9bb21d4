"""Replicas on PostgreSQL: how long a killed replica's pools go unserved, and webhook intake across three.

Three `corral serve` processes share one fresh database on the local PostgreSQL and the sandbox (zero boot
delay), each under its stable name (HOST:PORT). Printed, never asserted:

- failover: `--kills` times, the owner of a pool (each pool in turn) is killed with SIGKILL; webhooks go to
  another replica, and at once one job is queued on each pool the killed replica held. Failover time is from
  the kill to the first server the sandbox saw created for the pool named in turn (the new owner's first
  create; the job can be served no sooner). The killed replica is then started again and the run waits until
  every pool is back with its owner by `spread` before the next kill. p50 and max, for each `--lease-times`
  (corral's default 15 s, and its minimum 3 s). Beside it, `corral_lease_failover_seconds` as the replicas
  observed it (from the lease's expiry to another replica acquiring it, mean per kill): the rest of the
  failover time is the lease running out after the kill, and the first pass after the takeover.
- intake: signed `workflow_job` deliveries (bench/reactive.py's, ~8 KB) posted by 16 keep-alive connections
  as fast as corral answers 202, round-robin over the three replicas (delivery i to replica i mod 3, each
  its share of the connections), on a drained pool so that intake is what is measured; the same with one
  replica on PostgreSQL beside it, in the same run and on the same cores. All run on this machine: three
  replicas share its cores with each other, the sandbox, PostgreSQL and the load generator.

    .venv/bin/python bench/ha.py [--kills 10] [--lease-times 15 3] [--intake 3000] [--only failover|intake]
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.loadgen import post_round_robin
from bench.reactive import cpu_s, signed_deliveries
from bench.support import CorralProcess, create_token, free_port, metric_total, start_sandbox, stop
from corral.engine.leases import HOUSEKEEPING, spread
from corral.files import write_private
from corral_sandbox.local import corral_config, pool_spec
from corral_sandbox.server import SandboxInfo
from tests.store_urls import postgres_url

POOLS = ("small", "large", "gpu")
REPLICAS = 3
CONNECTIONS = 16


class HarnessError(RuntimeError):
    """The benchmark could not go on (a replica would not start, a pool never came back)."""


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise HarnessError(f"gave up waiting for {what} after {timeout:.0f} s")
        time.sleep(0.05)
    return value


@dataclass
class Group:
    """Replicas sharing one database, the sandbox they serve, and an admin token."""

    info: SandboxInfo
    control: httpx.Client
    processes: list[CorralProcess]
    token: str

    def name(self, process: CorralProcess) -> str:
        return f"{socket.gethostname()}:{process.port}"

    def get(self, process: CorralProcess, path: str) -> httpx.Response:
        return httpx.get(process.url + path, headers={"Authorization": f"Bearer {self.token}"}, timeout=10)

    def holders(self, via: CorralProcess) -> dict[str, str]:
        """Pool -> replica holding its lease, as a live replica's API says."""
        try:
            rows = self.get(via, "/api/v1/replicas").json()
        except httpx.TransportError:
            return {}
        return {pool: row["name"] for row in rows for pool in row["pools"]}

    def settled(self, via: CorralProcess) -> bool:
        """Every pool (and housekeeping) held by its owner by `spread` among all replicas."""
        names = [self.name(process) for process in self.processes]
        expected = spread((*POOLS, HOUSEKEEPING), names)
        return self.holders(via) == expected

    def failover_sum_count(self) -> tuple[float, int]:
        """`corral_lease_failover_seconds` summed over the live replicas."""
        total, count = 0.0, 0
        for process in self.processes:
            if process.exit_code is not None:
                continue
            try:
                text = self.get(process, "/metrics").text
            except httpx.TransportError:
                continue
            total += metric_total(text, "corral_lease_failover_seconds_sum")
            count += int(metric_total(text, "corral_lease_failover_seconds_count"))
        return total, count

    def send_webhooks_to(self, process: CorralProcess) -> None:
        self.control.put("/webhook", json={"url": f"{process.url}/webhook"}).raise_for_status()


@contextmanager
def replicas(folder: Path, count: int, settings: dict[str, Any], pools: dict[str, Any]) -> Iterator[Group]:
    """The sandbox, a fresh database and `count` replicas on it, all serving; stopped afterwards."""
    sandbox, info = start_sandbox(folder / "sandbox")
    processes: list[CorralProcess] = []
    try:
        control = httpx.Client(base_url=info.control_url, timeout=60)
        control.put("/rate-limit", json={"remaining": 10_000_000, "reset_in": 3600}).raise_for_status()
        with postgres_url() as database_url:
            config = folder / "corral.yaml"
            document = corral_config(info, database_url, pools, default_pool=next(iter(pools)), **settings)
            write_private(config, yaml.safe_dump(document))
            token = create_token(config, "ha")
            processes.extend(
                CorralProcess(config, free_port(), info.clouds_yaml, folder / f"replica-{i}.log", log_level="INFO")
                for i in range(count)
            )
            for process in processes:
                process.start()
            for process in processes:
                process.wait_serving()
            group = Group(info, control, processes, token)
            group.send_webhooks_to(processes[0])
            try:
                yield group
            finally:
                for process in processes:
                    process.stop()
        control.close()
    finally:
        stop(sandbox)


def first_create_after(control: httpx.Client, pool: str, after_s: float) -> float | None:
    created = [
        float(life["created_s"])
        for life in control.get("/servers").json()
        if life["metadata"].get("corral-pool") == pool and float(life["created_s"]) >= after_s
    ]
    return min(created, default=None)


def failover(kills: int, lease_s: float, folder: Path, say: Callable[[str], None]) -> None:
    folder.mkdir(parents=True)
    pools = {name: pool_spec([name], max_runners=4) for name in POOLS}
    times: list[float] = []
    observed: list[float] = []
    with replicas(folder, REPLICAS, {"lease_time": f"{lease_s:g}s"}, pools) as group:
        wait_for(lambda: group.settled(group.processes[0]), 60, "every pool leased")
        for index in range(kills):
            took, metric = one_failover(group, index, lease_s, say, f"kill {index + 1}/{kills}")
            times.append(took)
            if metric is not None:
                observed.append(metric)
    mean = statistics.fmean(observed) if observed else float("nan")
    print(
        f"failover lease_time={lease_s:g}s kills={kills} kill_to_first_create_p50_s={statistics.median(times):.1f} "
        f"max_s={max(times):.1f} lease_failover_metric_mean_s={mean:.1f}"
    )


def one_failover(
    group: Group, index: int, lease_s: float, say: Callable[[str], None], label: str
) -> tuple[float, float | None]:
    """Kill the owner of the index-th pool, time the pool's first create after, restart it and let the pools
    settle; returns the seconds to that create and `corral_lease_failover_seconds` for the takeover (mean)."""
    pool = POOLS[index % len(POOLS)]
    holders = group.holders(group.processes[0])
    victim = next(p for p in group.processes if group.name(p) == holders[pool])
    others = [p for p in group.processes if p is not victim]
    group.send_webhooks_to(others[index % len(others)])
    held = sorted(name for name, holder in holders.items() if holder == group.name(victim) and name in POOLS)
    metric_before = group.failover_sum_count()
    killed = victim.kill()
    for name in held:
        job = {"repo": "octo-org/app", "labels": ["self-hosted", name], "duration": 0.0}
        group.control.post("/jobs", json=job).raise_for_status()
    created = wait_for(
        lambda: first_create_after(group.control, pool, killed), lease_s * 4 + 30, f"pool {pool} taken over"
    )
    new_owner = wait_for(lambda: group.holders(others[0]).get(pool), 30, "the new owner named")
    metric_after = group.failover_sum_count()
    taken = metric_after[1] - metric_before[1]
    metric = (metric_after[0] - metric_before[0]) / taken if taken else None
    say(
        f"ha: lease {lease_s:g} s, {label}: {group.name(victim)} held {'+'.join(held)}; pool {pool} "
        f"created on again {created - killed:.1f} s after the kill (by {new_owner})"
    )
    victim.start()
    victim.wait_serving()
    wait_for(lambda: group.settled(others[0]), 120, "every pool back with its owner by `spread`")
    return created - killed, metric


def intake(count: int, replica_count: int, folder: Path) -> None:
    folder.mkdir(parents=True)
    # A drained pool: corral records and decides but creates nothing, so this measures intake.
    pools = {"small": pool_spec(["small"], max_runners=1)}
    with replicas(folder, replica_count, {"reconcile_interval": "1h"}, pools) as group:
        admin = {"Authorization": f"Bearer {group.token}"}
        url = group.processes[0].url
        httpx.post(f"{url}/api/v1/pools/small/drain", headers=admin, timeout=30).raise_for_status()
        requests = signed_deliveries(group.info.webhook_secret, count)
        processes = [psutil.Process(process.pid) for process in group.processes]
        cpu_before = sum(cpu_s(process) for process in processes)
        started = time.perf_counter()
        urls = [f"{process.url}/webhook" for process in group.processes]
        statuses = asyncio.run(post_round_robin(urls, requests, CONNECTIONS))
        took = time.perf_counter() - started
        cpu = sum(cpu_s(process) for process in processes) - cpu_before
    if statuses != {202: count}:
        raise HarnessError(f"intake answers: {dict(statuses)}")
    print(
        f"intake database=postgresql replicas={replica_count} webhooks={count} webhooks_per_s={count / took:.0f} "
        f"cpu_ms_per_webhook={cpu / count * 1000:.3f} (all replicas)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--lease-times", type=float, nargs="+", default=[15.0, 3.0])
    parser.add_argument("--intake", type=int, default=3000)
    parser.add_argument("--only", choices=["failover", "intake"], help="run one part")
    args = parser.parse_args()

    def say(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    try:
        with tempfile.TemporaryDirectory(prefix="corral-ha-") as name:
            folder = Path(name)
            if args.only in (None, "failover"):
                for lease_s in args.lease_times:
                    failover(args.kills, lease_s, folder / f"failover-{lease_s:g}", say)
            if args.only in (None, "intake"):
                intake(args.intake, 1, folder / "intake-1")
                intake(args.intake, REPLICAS, folder / "intake-3")
    except HarnessError as exc:
        print(f"ha: harness error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
