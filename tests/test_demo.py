"""`corral demo` as a newcomer runs it: jobs are served, the printed dashboard URL and token work, and when it
ends, by time or by Ctrl-C, nothing is left in the cloud or on GitHub and the exit status says so. The newcomer
is an OpenStack user: the shell names a clouds.yaml of their own, which the demo must leave alone."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import httpx
import pytest

from corral_sandbox.server import APP_CREDENTIAL_CLOUD_NAME, CLOUD_NAME, SECOND_CLOUD_NAME
from tests.hostile_shell import closed_port_url, hostile_variables

pytestmark = pytest.mark.e2e  # starts child processes

DEMO = [sys.executable, "-m", "corral.cli", "demo", "--port", "0", "--jobs-per-minute", "60"]


def start(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*DEMO, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True, env=env
    )


def openstack_users_shell(folder: Path) -> dict[str, str]:
    """This environment plus another cloud's clouds.yaml, secure.yaml and `OS_*` variables, with entries named
    like the sandbox's (the demo once served 0 of 20 jobs in such a shell, talking to the user's cloud)."""
    names = [CLOUD_NAME, SECOND_CLOUD_NAME, APP_CREDENTIAL_CLOUD_NAME]
    return {**os.environ, **hostile_variables(folder, names, closed_port_url())}


@pytest.fixture
def demos() -> Iterator[list[subprocess.Popen[str]]]:
    """Started demos; any still running when a test fails is killed rather than left behind."""
    processes: list[subprocess.Popen[str]] = []
    yield processes
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)


def read_until(stream: IO[str], pattern: str, seen: list[str]) -> re.Match[str]:
    """Read lines (keeping them in `seen`) until one matches; the demo prints progress every few seconds,
    and pytest-timeout bounds the whole test if it never does."""
    for line in stream:
        seen.append(line)
        match = re.search(pattern, line)
        if match:
            return match
    raise AssertionError(f"the demo ended before printing {pattern!r}:\n{''.join(seen)}")


def summary_figures(output: str) -> dict[str, int]:
    served = re.search(r"jobs served\s+(\d+) of (\d+) submitted", output)
    leaks = re.search(r"leaks found\s+(\d+)", output)
    created = re.search(r"runners created\s+(\d+)", output)
    assert served and leaks and created, output
    return {
        "served": int(served[1]),
        "submitted": int(served[2]),
        "leaks": int(leaks[1]),
        "runners_created": int(created[1]),
    }


@pytest.mark.timeout(120)
def test_a_timed_demo_serves_jobs_shows_a_working_dashboard_and_leaks_nothing(
    demos: list[subprocess.Popen[str]], tmp_path: Path
) -> None:
    demo = start("--duration", "15", env=openstack_users_shell(tmp_path))
    demos.append(demo)
    assert demo.stdout is not None
    seen: list[str] = []
    printed = read_until(demo.stdout, r"dashboard: (http://\S+/) \(sign in with this read token: (\S+)\)", seen)
    url, token = printed[1], printed[2]
    with httpx.Client(base_url=url, timeout=10) as browser_like:
        assert "<title>corral</title>" in browser_like.get("/").text
        assert browser_like.post("/dashboard/session", json={"token": token}).status_code == 204
        pools = browser_like.get("/api/v1/summary").json()["pools"]
    assert {pool["name"]: pool["default"] for pool in pools} == {"small": True, "large": False, "gpu": False}

    rest, _ = demo.communicate(timeout=100)
    output = "".join(seen) + rest
    assert demo.returncode == 0, output
    figures = summary_figures(output)
    assert figures["served"] > 0 and figures["served"] == figures["submitted"], output
    assert figures["runners_created"] >= figures["served"]
    assert figures["leaks"] == 0
    assert "median wait" in output


@pytest.mark.timeout(120)
def test_ctrl_c_ends_the_demo_cleanly_with_a_summary(demos: list[subprocess.Popen[str]]) -> None:
    demo = start()
    demos.append(demo)
    assert demo.stdout is not None
    seen: list[str] = []
    read_until(demo.stdout, r"running: jobs queued", seen)
    demo.send_signal(signal.SIGINT)

    rest, _ = demo.communicate(timeout=100)
    output = "".join(seen) + rest
    assert demo.returncode == 0, output
    assert "Traceback" not in output
    assert summary_figures(output)["leaks"] == 0
