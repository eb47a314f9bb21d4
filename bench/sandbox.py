"""How big and how fast the sandbox is: it must never be the bottleneck of corral's own benchmarks.

Starts `corral sandbox` as its own process, fills it with servers (through Nova's API) and runners
(through GitHub's generate-jitconfig), then prints: time to answer a detailed list of 1,000 servers, a
page of 100 runners, and the sandbox process's resident memory. Figures are printed, never asserted.

    .venv/bin/python bench/sandbox.py [--servers 10000] [--runners 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.support import start_sandbox, stop

CONCURRENCY = 16


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def keystone_token(info: dict[str, Any]) -> str:
    cloud = yaml.safe_load(Path(info["clouds_yaml"]).read_text())["clouds"][info["cloud_name"]]["auth"]
    body = {
        "auth": {
            "identity": {
                "methods": ["password"],
                "password": {
                    "user": {"name": cloud["username"], "domain": {"name": "Default"}, "password": cloud["password"]}
                },
            },
            "scope": {"project": {"name": cloud["project_name"], "domain": {"name": "Default"}}},
        }
    }
    response = httpx.post(f"{cloud['auth_url']}/v3/auth/tokens", json=body)
    response.raise_for_status()
    return response.headers["X-Subject-Token"]


async def fill(url: str, headers: dict[str, str], bodies: list[dict[str, Any]]) -> float:
    """POST every body with bounded concurrency; returns requests per second."""
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    for body in bodies:
        queue.put_nowait(body)

    async def worker(client: httpx.AsyncClient) -> None:
        while not queue.empty():
            response = await client.post(url, json=queue.get_nowait(), headers=headers)
            response.raise_for_status()

    started = time.perf_counter()
    async with httpx.AsyncClient(timeout=60) as client:
        await asyncio.gather(*(worker(client) for _ in range(CONCURRENCY)))
    return len(bodies) / (time.perf_counter() - started)


def timed_get(client: httpx.Client, url: str, repeats: int = 10) -> tuple[float, int]:
    """Median milliseconds of `repeats` GETs, and the size of the last body in bytes."""
    durations = []
    size = 0
    for _ in range(repeats):
        started = time.perf_counter()
        response = client.get(url)
        response.raise_for_status()
        durations.append((time.perf_counter() - started) * 1000)
        size = len(response.content)
    return statistics.median(durations), size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--servers", type=int, default=10_000)
    parser.add_argument("--runners", type=int, default=10_000)
    args = parser.parse_args()
    workdir = Path(f"/tmp/corral-bench-sandbox-{time.time_ns()}")
    process, sandbox = start_sandbox(workdir)
    info = sandbox.as_dict()
    try:
        idle_rss = rss_mib(process.pid)
        token = keystone_token(info)
        nova = f"{info['openstack_url']}/compute/v2.1"
        os_headers = {"X-Auth-Token": token, "OpenStack-API-Version": "compute 2.96"}
        with httpx.Client(headers=os_headers, timeout=60) as client:
            image = client.get(f"{info['openstack_url']}/image/v2/images?name=ubuntu-24.04-runner").json()
            flavor = client.get(f"{nova}/flavors").json()["flavors"][0]["id"]
        image_id = image["images"][0]["id"]
        client_quota = {"instances": -1, "cores": -1, "ram": -1}
        httpx.put(f"{info['control_url']}/quota", json=client_quota).raise_for_status()
        servers = [
            {
                "server": {
                    "name": f"bench-{i}",
                    "imageRef": image_id,
                    "flavorRef": flavor,
                    "networks": "none",
                    "metadata": {"corral-installation": "bench", "corral-pool": f"pool-{i % 10}"},
                }
            }
            for i in range(args.servers)
        ]
        servers_per_s = asyncio.run(fill(f"{nova}/servers", os_headers, servers))
        # 10,000 JIT configs exceed a PAT's 5,000 calls an hour, as they would on GitHub.
        httpx.put(f"{info['control_url']}/rate-limit", json={"remaining": 1_000_000}).raise_for_status()
        gh_headers = {"Authorization": f"token {info['pat']}", "Accept": "application/vnd.github+json"}
        runners = [{"name": f"bench-{i}", "runner_group_id": 1, "labels": ["bench"]} for i in range(args.runners)]
        runners_per_s = asyncio.run(
            fill(f"{info['github_url']}/orgs/bench/actions/runners/generate-jitconfig", gh_headers, runners)
        )
        with httpx.Client(headers=os_headers, timeout=60) as client:
            detail_ms, detail_bytes = timed_get(client, f"{nova}/servers/detail?limit=1000")
        with httpx.Client(headers=gh_headers, timeout=60) as client:
            runners_ms, _ = timed_get(client, f"{info['github_url']}/orgs/bench/actions/runners?per_page=100")
        full_rss = rss_mib(process.pid)
    finally:
        stop(process)
    print(f"servers={args.servers} created_per_s={servers_per_s:.0f}")
    print(f"runners={args.runners} jitconfigs_per_s={runners_per_s:.0f}")
    print(f"detail_list_1000_ms={detail_ms:.1f} body_kib={detail_bytes / 1024:.0f}")
    print(f"runner_page_100_ms={runners_ms:.1f}")
    print(f"rss_idle_mib={idle_rss:.0f} rss_full_mib={full_rss:.0f}")


if __name__ == "__main__":
    main()
