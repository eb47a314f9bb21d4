"""Processes the benchmarks run: the sandbox and `corral serve`, each on its own, as in production.

Separate processes keep each side's CPU (and Python's lock) to itself, so what a benchmark measures is
corral, not corral competing with the world it talks to.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from corral.sandbox.server import SandboxInfo


def start_sandbox(workdir: Path, boot_delay: float = 0.0) -> tuple[subprocess.Popen[str], SandboxInfo]:
    process = subprocess.Popen(
        [sys.executable, "-m", "corral.cli", "sandbox", "--boot-delay", str(boot_delay), "--workdir", str(workdir)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    return process, SandboxInfo(**json.loads(process.stdout.readline()))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_corral(info: SandboxInfo, document: dict[str, Any], folder: Path) -> tuple[subprocess.Popen[bytes], str, str]:
    """`corral serve` with `document` as its config; returns the process, its URL and an admin token."""
    config = folder / "corral.yaml"
    config.write_text(yaml.safe_dump(document))
    token = subprocess.run(
        [
            sys.executable,
            "-m",
            "corral.cli",
            "token",
            "--config",
            str(config),
            "create",
            "--name",
            "bench",
            "--scope",
            "admin",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "corral.cli",
            "serve",
            "--config",
            str(config),
            "--listen",
            f"127.0.0.1:{port}",
            "--log-level",
            "WARNING",
        ],
        env={**os.environ, "OS_CLIENT_CONFIG_FILE": info.clouds_yaml},
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/readyz").status_code == 200:
                break
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline or process.poll() is not None:
            raise SystemExit("corral serve did not become ready")
        time.sleep(0.1)
    httpx.put(f"{info.control_url}/webhook", json={"url": f"{url}/webhook"}).raise_for_status()
    return process, url, token


def stop(process: subprocess.Popen[Any]) -> None:
    process.terminate()
    process.wait(timeout=60)
