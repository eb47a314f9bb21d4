"""The floor under corral's CPU per job: what the libraries corral must use cost for one job's I/O, alone.

Whatever a runner manager decides, one ephemeral runner for one job costs it, at the least: three
`workflow_job` deliveries served (uvicorn with httptools and uvloop, FastAPI, the HMAC check, the JSON
parsed), one JIT config asked of GitHub (githubkit on httpx) and one server created and deleted (openstacksdk's
authenticated adapter: keystoneauth on requests, the raw `POST /servers` and `DELETE` corral sends). This runs
exactly that, in a process of its own beside the sandbox, with no store, no decision and no log, at
`bench/reactive.py`'s steady rate, and prints its CPU per job: the figure corral's own `cpu_ms_per_job`
cannot go below while it uses these libraries (issue 29's goal 1 asks for 5 ms).

    .venv/bin/python bench/floor.py [--rate 20] [--seconds 40]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import orjson
import psutil
import uvicorn
from fastapi import FastAPI, Request, Response
from githubkit import GitHub, TokenAuthStrategy
from githubkit_schemas.latest.models import OrgsOrgActionsRunnersGenerateJitconfigPostResponse201

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.loadgen import delivery_headers
from bench.support import free_port, start_sandbox, stop
from corral.github.webhooks import signature_valid
from corral_sandbox.local import sandbox_connection
from corral_sandbox.server import SandboxInfo
from tests.webhook_fixtures import WEBHOOK_EXAMPLES

ORG = "octo-org"
LABELS = ["self-hosted", "small"]
IN_PROGRESS_AFTER_S = 0.2
COMPLETED_AFTER_S = 1.2
"""When a job's later deliveries follow its `queued` one (the steady phase's jobs run for a second)."""


def serve(info: SandboxInfo, port: int) -> None:
    """The measured process: a webhook endpoint that creates a runner's server for a queued job and deletes
    it when the job completes, with the least code these libraries allow."""
    secret = info.webhook_secret.encode()
    connection = sandbox_connection(info)
    compute = connection.compute
    endpoint = compute.get_endpoint()
    image = connection.image.find_image("ubuntu-24.04-runner", ignore_missing=False).id
    flavor = compute.find_flavor("m1.small", ignore_missing=False).id
    network = connection.network.find_network("private", ignore_missing=False).id
    threads = ThreadPoolExecutor(16)
    servers: dict[int, str] = {}
    done = {"created": 0, "deleted": 0}
    app = FastAPI()

    def create(job_id: int, encoded_jit: str) -> None:
        user_data = f"#!/bin/sh\nexec ./run.sh --jitconfig {encoded_jit}\n"
        body = {
            "name": f"floor-{job_id}",
            "imageRef": image,
            "flavorRef": flavor,
            "networks": [{"uuid": network}],
            "metadata": {"job": str(job_id)},
            "user_data": base64.b64encode(user_data.encode()).decode(),
        }
        response = compute.post("/servers", json={"server": body}, endpoint_override=endpoint, raise_exc=False)
        response.raise_for_status()
        servers[job_id] = response.json()["server"]["id"]
        done["created"] += 1

    def delete(job_id: int) -> None:
        compute.delete(f"/servers/{servers.pop(job_id)}", endpoint_override=endpoint, raise_exc=False)
        done["deleted"] += 1

    async def runner_for(github: GitHub[Any], job_id: int) -> None:
        response = await github.arequest(
            "POST",
            f"/orgs/{ORG}/actions/runners/generate-jitconfig",
            json={"name": f"floor-{job_id}", "runner_group_id": 1, "labels": LABELS, "work_folder": "_work"},
            response_model=OrgsOrgActionsRunnersGenerateJitconfigPostResponse201,
        )
        encoded = response.parsed_data.encoded_jit_config
        await asyncio.get_running_loop().run_in_executor(threads, create, job_id, encoded)

    async def main() -> None:
        async with GitHub(TokenAuthStrategy(info.pat), base_url=info.github_url) as github:
            tasks: set[asyncio.Task[None]] = set()

            @app.post("/webhook")
            async def webhook(request: Request) -> Response:
                body = await request.body()
                if not signature_valid(secret, body, request.headers.get("x-hub-signature-256")):
                    return Response(status_code=401)
                event = orjson.loads(body)
                job_id = event["workflow_job"]["id"]
                if event["action"] == "queued":
                    task = asyncio.create_task(runner_for(github, job_id))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                elif event["action"] == "completed":
                    asyncio.get_running_loop().run_in_executor(threads, delete, job_id)
                return Response(status_code=202)

            @app.get("/done")
            async def finished() -> dict[str, int]:
                return done

            config = uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, log_level="warning")
            await uvicorn.Server(config).serve()

    asyncio.run(main())


def deliveries(secret: str, rate: float, seconds: float) -> list[tuple[float, bytes, dict[str, str]]]:
    """(seconds from the start, body, headers) of every delivery: each job queued, in progress, completed."""
    examples = {
        action: json.loads((WEBHOOK_EXAMPLES / name).read_text())
        for action, name in [
            ("queued", "workflow_job.queued.payload.json"),
            ("in_progress", "workflow_job.in_progress.payload.json"),
            ("completed", "workflow_job.completed.success.with-organization.payload.json"),
        ]
    }
    planned = []
    for index in range(int(rate * seconds)):
        start = index / rate
        for action, after in [("queued", 0.0), ("in_progress", IN_PROGRESS_AFTER_S), ("completed", COMPLETED_AFTER_S)]:
            event = examples[action]
            event["workflow_job"]["id"] = 20_000_000 + index
            event["workflow_job"]["labels"] = LABELS
            body = json.dumps(event).encode()
            planned.append((start + after, body, delivery_headers(secret, body)))
    return sorted(planned, key=lambda delivery: delivery[0])


async def send(url: str, planned: list[tuple[float, bytes, dict[str, str]]]) -> None:
    """Each delivery at its time (never before), over keep-alive connections, as GitHub's sender would."""
    async with httpx.AsyncClient(timeout=30) as client:
        began = time.monotonic()
        pending = []
        for at, body, headers in planned:
            delay = began + at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            pending.append(asyncio.create_task(client.post(url, content=body, headers=headers)))
        for answer in await asyncio.gather(*pending):
            answer.raise_for_status()


def measure(args: argparse.Namespace) -> float:
    """Runs the floor at `args.rate` jobs a second for `args.seconds`; prints and returns its CPU ms per job."""
    with tempfile.TemporaryDirectory(prefix="corral-floor-") as folder:
        sandbox, info = start_sandbox(Path(folder) / "sandbox")
        try:
            control = httpx.Client(base_url=info.control_url, timeout=60)
            control.put("/rate-limit", json={"remaining": 10_000_000}).raise_for_status()
            port = free_port()
            child = psutil.Popen([sys.executable, __file__, "--serve", json.dumps(info.as_dict()), "--port", str(port)])
            base = f"http://127.0.0.1:{port}"
            try:
                deadline = time.monotonic() + 60
                while True:
                    try:
                        httpx.get(f"{base}/done").raise_for_status()
                        break
                    except httpx.TransportError:
                        if time.monotonic() > deadline:
                            raise SystemExit("the floor's server did not start") from None
                        time.sleep(0.2)
                planned = deliveries(info.webhook_secret, args.rate, args.seconds)
                jobs = len(planned) // 3
                times = child.cpu_times()
                asyncio.run(send(f"{base}/webhook", planned))
                deadline = time.monotonic() + 120
                while httpx.get(f"{base}/done").json()["deleted"] < jobs:
                    if time.monotonic() > deadline:
                        raise SystemExit("the floor's servers were not all deleted")
                    time.sleep(0.2)
                after = child.cpu_times()
            finally:
                child.terminate()
                child.wait(10)
        finally:
            stop(sandbox)
    cpu = (after.user + after.system) - (times.user + times.system)
    print(
        f"floor_jobs={jobs} floor_cpu_ms_per_job={cpu / jobs * 1000:.2f} "
        f"(the kernel's part: {(after.system - times.system) / jobs * 1000:.2f}; "
        "3 deliveries served, 1 JIT config, 1 create, 1 delete a job)"
    )
    return float(cpu / jobs * 1000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(SandboxInfo(**json.loads(args.serve)), args.port)
    else:
        measure(args)


if __name__ == "__main__":
    main()
