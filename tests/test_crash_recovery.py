"""kill -9 at the worst moments, restart, and nothing leaks: `corral serve` as a real process."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
import yaml

from corral_sandbox.local import corral_config, pool_spec, sandbox_environment
from corral_sandbox.server import Sandbox
from tests.waiting import wait_until

STALL_S = 30.0
"""A starting `corral serve` that uses no CPU for this long is hung (a deadlock, a wait on what never answers)."""
START_LIMIT_S = 240.0
"""One still burning CPU this long is stuck in a loop (below pytest-timeout's 300 s, so the log is shown)."""


class StartWatch:
    """Whether a starting process still makes progress: its CPU time grew within the last `STALL_S`. How fast it
    starts is not what these tests assert, and on two cores under the suite's load a healthy start (imports,
    migrations, the first look and pass) took over 30 s twice in CI (2026-12-06): a start fails the test when
    it stops making progress, whatever the machine's speed, not when it is slow."""

    def __init__(self, pid: int) -> None:
        self._process = psutil.Process(pid)
        self._cpu_s = -1.0
        self._moved_at = time.monotonic()

    def stalled(self) -> bool:
        try:
            times = self._process.cpu_times()
        except psutil.NoSuchProcess:
            return False  # it exited: the caller sees that
        cpu_s, now = times.user + times.system, time.monotonic()
        if cpu_s > self._cpu_s:
            self._cpu_s, self._moved_at = cpu_s, now
        return now - self._moved_at > STALL_S


class CorralProcess:
    """`corral serve` in a child process, killable with SIGKILL like a crashed host."""

    def __init__(self, sandbox: Sandbox, config_path: Path, port: int) -> None:
        self.sandbox = sandbox
        self.config_path = config_path
        self.port = port
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = config_path.with_suffix(".log")

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    def start(self) -> None:
        env = sandbox_environment(self.sandbox.info.clouds_yaml)
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "corral.cli",
                "serve",
                "--config",
                str(self.config_path),
                "--listen",
                f"127.0.0.1:{self.port}",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=self.log_path.open("ab"),
        )
        process = self.process
        try:
            watch = StartWatch(process.pid)

            def started() -> bool:
                if self._ready() or process.poll() is not None:
                    return True
                if watch.stalled():
                    raise AssertionError(f"corral serve made no progress (no CPU) for {STALL_S:.0f}s while starting")
                return False

            wait_until(started, timeout=START_LIMIT_S, what="corral serve ready")
        except AssertionError as timed_out:
            raise AssertionError(f"{timed_out}\ncorral serve's log ends:\n{self.log()[-3000:]}") from None
        assert process.poll() is None, (
            f"corral serve exited ({process.returncode}); its log ends:\n{self.log()[-3000:]}"
        )

    def _ready(self) -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{self.port}/readyz").status_code == 200
        except httpx.TransportError:
            return False

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def corral_process(sandbox: Sandbox, tmp_path: Path) -> Iterator[Any]:
    processes: list[CorralProcess] = []

    def make(document: dict[str, Any]) -> CorralProcess:
        path = tmp_path / "corral.yaml"
        path.write_text(yaml.safe_dump(document))
        process = CorralProcess(sandbox, path, free_port())
        processes.append(process)
        return process

    yield make
    for process in processes:
        process.stop()


def leftovers(control: httpx.Client) -> dict[str, int]:
    stats = control.get("/stats").json()
    return {
        "servers": stats["cloud"]["servers"],
        "volumes": stats["cloud"]["volumes"],
        "registrations": stats["github"]["runners"]["registered"],
    }


NOTHING = {"servers": 0, "volumes": 0, "registrations": 0}


@pytest.mark.long
@pytest.mark.parametrize("moment", ["creation", "deletion"])
def test_kill_9_then_restart_leaks_nothing(
    sandbox: Sandbox, control: httpx.Client, corral_process: Any, tmp_path: Path, moment: str
) -> None:
    pool = pool_spec(["small"], min_idle=3, extra_volumes=[{"name": "cache", "size_gb": 5}], bootstrap_timeout="20s")
    document = corral_config(
        sandbox.info, f"sqlite:///{tmp_path / 'corral.db'}", {"small": pool}, reconcile_interval="1s"
    )
    slow = (
        "openstack POST /compute/v2.1/servers" if moment == "creation" else "openstack DELETE /compute/v2.1/servers/*"
    )
    if moment == "deletion":
        first = corral_process(document)
        first.start()
        wait_until(lambda: control.get("/stats").json()["github"]["runners"]["online"] == 3, what="three warm runners")
        first.stop()
        document["pools"]["small"]["min_idle"] = 0
    control.put("/faults", json={"endpoints": [{"match": slow, "latency_ms": 1500}]}).raise_for_status()
    victim = corral_process(document)
    victim.start()
    key = slow.split(" ", 1)[1]

    def in_flight() -> bool:
        calls: dict[str, int] = control.get("/stats").json()["api_calls"]["openstack"]
        return sum(n for endpoint, n in calls.items() if endpoint.startswith(key.replace("*", ""))) >= 2

    wait_until(in_flight, what=f"{moment} requests in flight")
    victim.kill()
    control.put("/faults", json={}).raise_for_status()
    if moment == "creation":
        created = lambda: control.get("/stats").json()["cloud"]["servers_created"] >= 2  # noqa: E731
        wait_until(created, what="servers requested by the killed process exist anyway")

    document["pools"]["small"]["min_idle"] = 0
    (tmp_path / "corral.yaml").write_text(yaml.safe_dump(document))
    survivor = corral_process(document)
    survivor.start()
    wait_until(lambda: leftovers(control) == NOTHING, timeout=40, what="no server, volume or registration left")


def test_sighup_reloads_the_config_and_a_bad_file_keeps_the_running_one(
    sandbox: Sandbox, control: httpx.Client, corral_process: Any, tmp_path: Path
) -> None:
    document = corral_config(sandbox.info, f"sqlite:///{tmp_path / 'corral.db'}", {"small": pool_spec(["small"])})
    process = corral_process(document)
    process.start()
    assert process.process is not None
    document["pools"]["small"]["min_idle"] = 2
    (tmp_path / "corral.yaml").write_text(yaml.safe_dump(document))
    process.process.send_signal(signal.SIGHUP)
    wait_until(lambda: control.get("/stats").json()["github"]["runners"]["online"] == 2, what="grown by SIGHUP")
    (tmp_path / "corral.yaml").write_text("pools: [this is not a config")
    process.process.send_signal(signal.SIGHUP)
    wait_until(lambda: "reload refused" in process.log(), what="the bad reload refused, and logged")
    document["pools"]["small"]["min_idle"] = 1
    (tmp_path / "corral.yaml").write_text(yaml.safe_dump(document))
    process.process.send_signal(signal.SIGHUP)
    wait_until(lambda: control.get("/stats").json()["github"]["runners"]["online"] == 1, what="shrunk by SIGHUP")
    assert process.process.poll() is None, "the bad reload in between neither stopped corral nor its reloads"


def test_kill_9_during_spill_over_to_a_second_cloud_leaks_nothing_in_either(
    sandbox: Sandbox, control: httpx.Client, corral_process: Any, tmp_path: Path
) -> None:
    """The first cloud refuses every create, so the pool's warm runners spill over to the second, whose creates
    are slow: corral is killed -9 with creates in flight there. The next life finds and deletes what the killed
    one made, in the cloud it made it in."""
    pool = pool_spec(["small"], min_idle=3, placements=[{"cloud": "east"}, {"cloud": "west"}])
    document = corral_config(
        sandbox.info, f"sqlite:///{tmp_path / 'corral.db'}", {"small": pool}, reconcile_interval="1s"
    )
    del document["cloud"]
    document["clouds"] = {"east": {"cloud": sandbox.info.cloud_name}, "west": {"cloud": sandbox.info.second_cloud_name}}
    faults = [
        {"match": "openstack POST /compute/v2.1/servers", "error_rate": 1.0, "status": 503},
        {"match": "openstack-two POST /compute/v2.1/servers", "latency_ms": 1500},
    ]
    control.put("/faults", json={"endpoints": faults}).raise_for_status()
    victim = corral_process(document)
    victim.start()

    def west_creates_in_flight() -> bool:
        calls: dict[str, int] = control.get("/stats").json()["api_calls"].get("openstack-two", {})
        return calls.get("POST /compute/v2.1/servers", 0) >= 2

    wait_until(west_creates_in_flight, what="creates in flight in the second cloud")
    victim.kill()
    control.put("/faults", json={}).raise_for_status()
    wait_until(
        lambda: control.get("/stats").json()["clouds"]["two"]["servers_created"] >= 2,
        what="servers the killed process asked the second cloud for exist anyway",
    )
    document["pools"]["small"]["min_idle"] = 0
    (tmp_path / "corral.yaml").write_text(yaml.safe_dump(document))
    survivor = corral_process(document)
    survivor.start()

    def left_in_either() -> dict[str, int]:
        stats = control.get("/stats").json()
        return {
            "east": stats["clouds"]["one"]["servers"],
            "west": stats["clouds"]["two"]["servers"],
            "registrations": stats["github"]["runners"]["registered"],
        }

    wait_until(
        lambda: left_in_either() == {"east": 0, "west": 0, "registrations": 0},
        timeout=40,
        what="no server left in either cloud, no registration left",
    )
