"""Processes the benchmarks run: the sandbox and `corral serve`, each on its own, as in production.

Separate processes keep each side's CPU (and Python's lock) to itself, so what a benchmark measures is
corral, not corral competing with the world it talks to.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

from corral_sandbox.local import sandbox_environment
from corral_sandbox.server import SandboxInfo


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


def create_token(config: Path, name: str = "bench", scope: str = "admin") -> str:
    """An API token made the way an operator makes one: `corral token create` on the config's database."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "corral.cli",
            "token",
            "--config",
            str(config),
            "create",
            "--name",
            name,
            "--scope",
            scope,
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def start_corral(info: SandboxInfo, document: dict[str, Any], folder: Path) -> tuple[CorralProcess, str, str]:
    """`corral serve` with `document` as its config, ready (every pool checked); returns the process, its URL
    and an admin token. Its log goes to `corral.log` in `folder`."""
    config = folder / "corral.yaml"
    config.write_text(yaml.safe_dump(document))
    token = create_token(config)
    corral = CorralProcess(config, free_port(), info.clouds_yaml, folder / "corral.log", log_level="WARNING")
    corral.start()
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{corral.url}/readyz").status_code == 200:
                break
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline or corral.exit_code is not None:
            raise SystemExit(f"corral serve did not become ready; see {corral.log_path}")
        time.sleep(0.1)
    httpx.put(f"{info.control_url}/webhook", json={"url": f"{corral.url}/webhook"}).raise_for_status()
    return corral, corral.url, token


def stop(process: subprocess.Popen[Any]) -> None:
    process.terminate()
    process.wait(timeout=60)


class HarnessError(RuntimeError):
    """The benchmark itself could not go on (a process would not start): not a finding about corral."""


class CorralExited(HarnessError):
    """corral serve ended before it answered; `code` is its exit status."""

    def __init__(self, code: int, log_path: Path) -> None:
        super().__init__(f"corral serve exited with status {code} while starting; see {log_path}")
        self.code = code


class CorralProcess:
    """`corral serve` on a fixed port, which a benchmark can kill -9 and start again on the same database
    and port (so the sandbox's webhook URL stays valid), its log appended to one file across lives."""

    def __init__(self, config: Path, port: int, clouds_yaml: str, log_path: Path, log_level: str = "INFO") -> None:
        self.config = config
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log_path
        self._env = sandbox_environment(clouds_yaml)
        self._log_level = log_level
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.starts = 0

    def start(self) -> float:
        """Start a new life; returns when it was started (epoch seconds)."""
        if self._log is None:
            self._log = self.log_path.open("ab")
        self.starts += 1
        started = time.time()
        self._log.write(f"=== corral serve, life {self.starts}, started at {started:.3f}\n".encode())
        self._log.flush()
        self._process = subprocess.Popen(
            [
                *(sys.executable, "-m", "corral.cli", "serve", "--config", str(self.config)),
                *("--listen", f"127.0.0.1:{self.port}", "--log-level", self._log_level),
            ],
            env=self._env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        return started

    @property
    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    @property
    def exit_code(self) -> int | None:
        """None while running (or never started); the exit status once it has ended."""
        return None if self._process is None else self._process.poll()

    def serving(self) -> bool:
        try:
            return httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    def wait_serving(self, timeout: float = 90.0) -> float:
        """Wait until its API answers; returns when (epoch seconds)."""
        deadline = time.monotonic() + timeout
        while not self.serving():
            code = self.exit_code
            if code is not None:
                raise CorralExited(code, self.log_path)
            if time.monotonic() > deadline:
                raise HarnessError(f"corral serve did not answer within {timeout:.0f}s; see {self.log_path}")
            time.sleep(0.05)
        return time.time()

    def kill(self) -> float:
        """SIGKILL: no shutdown code runs, as when the machine or the OOM killer takes the process."""
        assert self._process is not None
        killed = time.time()
        self._process.send_signal(signal.SIGKILL)
        self._process.wait(timeout=30)
        return killed

    def terminate(self, timeout: float = 60.0) -> float:
        """SIGTERM, a clean stop (its log stays open for the next life); returns when it was sent (epoch
        seconds), once the process has exited."""
        assert self._process is not None
        stopped = time.time()
        self._process.terminate()
        self._process.wait(timeout=timeout)
        return stopped

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=30)
        if self._log is not None:
            self._log.close()
            self._log = None


def metric_total(exposition: str, sample: str) -> float:
    """The sum, over every label set, of one sample (`corral_reconcile_pass_seconds_count`) in a `/metrics`
    page, read with prometheus-client's own parser."""
    return sum(
        found.value
        for family in text_string_to_metric_families(exposition)
        for found in family.samples
        if found.name == sample
    )
