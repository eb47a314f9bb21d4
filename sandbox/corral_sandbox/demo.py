"""`corral demo`: the sandbox and a real corral in one process, a job trace, a live view, and a leak check.

The demo is the shortest honest answer to "does it work?": the same Service that `corral serve` runs
(SQLite in a temporary directory, three pools, webhooks over HTTP) against the sandbox's OpenStack and
GitHub, fed jobs with Poisson arrivals and mixed labels while a few servers fail to boot. When it ends
(after `--duration`, or on Ctrl-C) it lets the jobs finish, drains every pool through the REST API the way
an operator would, and counts what is left in the cloud and on GitHub. Anything left is a leak, and the
exit status says so, as it does a job that went unserved: that is what makes the demo usable as a smoke
test too. The sandbox's OpenStack is reached through its own `clouds.yaml` only (`local.sandbox_cloud_config`),
whatever `OS_*` variables the shell holds.
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

import httpx

from corral.store import tokens
from corral_sandbox.local import LocalCorral, corral_config, pool_spec
from corral_sandbox.server import Sandbox
from corral_sandbox.world import Timings

ORG = "octo-org"
REPOS = [f"{ORG}/app", f"{ORG}/api", f"{ORG}/web", f"{ORG}/docs"]
TICK_S = 0.5
"""How often the demo submits the next arrivals and redraws the live view."""
FINISH_TIMEOUT_S = 90.0
"""At the end, how long jobs already queued may take to finish before they are cancelled."""
WARM_UP_TIMEOUT_S = 30.0
"""How long the demo waits for the warm runners before it starts the trace regardless."""
DRAIN_TIMEOUT_S = 60.0
"""How long the drained pools may take to leave nothing behind; whatever is left then is a leak."""
PLAIN_STATUS_EVERY_S = 5.0
"""Without a terminal (a pipe, a CI log) the live view becomes one line this often."""


@dataclass(frozen=True)
class JobKind:
    """One kind of job in the trace: how often it comes, its `runs-on` labels, and how long it runs."""

    weight: float
    labels: tuple[str, ...]
    duration_s: tuple[float, float]


JOB_KINDS = (
    JobKind(0.35, ("self-hosted",), (2.0, 6.0)),
    JobKind(0.25, ("self-hosted", "linux", "small"), (2.0, 5.0)),
    JobKind(0.25, ("self-hosted", "large"), (3.0, 8.0)),
    JobKind(0.15, ("self-hosted", "gpu"), (4.0, 9.0)),
)


def demo_pools() -> dict[str, Any]:
    """Three pools: a warm default, a larger one with a scratch volume, and a cold GPU pool."""
    return {
        "small": pool_spec(["linux", "small"], min_idle=2, max_runners=8, idle_grace="2s"),
        "large": pool_spec(
            ["large"],
            flavor="m1.large",
            min_idle=1,
            max_runners=5,
            idle_grace="2s",
            extra_volumes=[{"name": "scratch", "size_gb": 50}],
        ),
        "gpu": pool_spec(["gpu"], flavor="m1.xlarge", min_idle=0, max_runners=3, idle_grace="2s"),
    }


@dataclass(frozen=True)
class DemoOptions:
    duration_s: float | None = None
    """Stop submitting jobs after this long; None runs until Ctrl-C."""
    jobs_per_minute: float = 40.0
    port: int = 8080
    boot_delay_s: float = 1.0
    boot_failure_rate: float = 0.06
    seed: int | None = None


@dataclass
class Arrivals:
    """A Poisson process of jobs, generated lazily so an open-ended demo needs no precomputed trace."""

    jobs_per_minute: float
    rng: random.Random
    next_at: float = 0.0

    def __post_init__(self) -> None:
        self.next_at = self._gap()

    def _gap(self) -> float:
        return self.rng.expovariate(self.jobs_per_minute / 60.0)

    def until(self, horizon: float) -> Iterator[tuple[float, dict[str, Any]]]:
        """Every arrival before `horizon` (seconds since the start) not given out yet, with its job."""
        while self.next_at < horizon:
            kind = self.rng.choices(JOB_KINDS, weights=[k.weight for k in JOB_KINDS])[0]
            job = {
                "repo": self.rng.choice(REPOS),
                "labels": list(kind.labels),
                "duration": round(self.rng.uniform(*kind.duration_s), 2),
                "workflow_name": "demo",
            }
            yield self.next_at, job
            self.next_at += self._gap()


class RecentWarnings(logging.Handler):
    """Keeps corral's warnings for the live view instead of letting them scroll it off the screen."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0
        self.last: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1
        self.last = record.getMessage()


@dataclass
class Leaks:
    servers: int
    volumes: int
    ports: int
    registrations: int

    @property
    def total(self) -> int:
        return self.servers + self.volumes + self.ports + self.registrations


def count_leaks(stats: dict[str, Any], ports_before: int) -> Leaks:
    """What the cloud and GitHub still hold, from the sandbox's `/_sandbox/stats`, once every pool is drained:
    any server, volume or runner registration, and any port beyond those that existed before corral ran."""
    return Leaks(
        servers=stats["cloud"]["servers"],
        volumes=stats["cloud"]["volumes"],
        ports=max(0, stats["cloud"]["ports"] - ports_before),
        registrations=stats["github"]["runners"]["registered"],
    )


@dataclass
class Outcome:
    """What the summary reports."""

    elapsed_s: float
    submitted: int
    served: int
    cancelled: int
    waits_by_pool: dict[str, list[float]]
    runners_created: int
    servers_created: int
    boot_failures: int
    leaks: Leaks
    warnings: int = 0


def parse_time(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


def wait_of(job: dict[str, Any]) -> float | None:
    queued, started = parse_time(job.get("queued_at")), parse_time(job.get("started_at"))
    return (started - queued).total_seconds() if queued and started else None


def clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes:02d}:{secs:02d}"


def seconds_text(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


class Demo:
    """One demo run: `run()` returns the process exit status."""

    def __init__(self, options: DemoOptions, out: TextIO) -> None:
        self.options = options
        self.out = out
        self.tty = out.isatty()
        self.seed = options.seed if options.seed is not None else random.SystemRandom().randrange(2**31)
        self.arrivals = Arrivals(options.jobs_per_minute, random.Random(self.seed))
        self.stop = threading.Event()
        self.interrupts = 0
        self.warnings = RecentWarnings()
        self.submitted = 0
        self.started_at = time.monotonic()
        self.phase = "running"
        self._drawn_lines = 0
        self._last_plain = -math.inf
        self.dashboard_url = ""
        self._dashboard_token = ""

    # -- lifecycle ----------------------------------------------------------------------------------

    def run(self) -> int:
        try:
            return self._run()
        except KeyboardInterrupt:
            self._clear_view()
            self.say("corral demo: interrupted again; stopped without the leak check", error=True)
            return 130

    def _run(self) -> int:
        with contextlib.ExitStack() as stack:
            stack.enter_context(self._signals())
            stack.enter_context(self._quiet_logging())
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="corral-demo-")))
            self.say(f"corral demo: starting the sandbox and corral (SQLite in {workdir})")
            sandbox = Sandbox(timings=Timings(boot_delay=self.options.boot_delay_s), seed=self.seed)
            sandbox.start()
            stack.callback(sandbox.stop)
            document = corral_config(
                sandbox.info, f"sqlite:///{workdir / 'corral.db'}", demo_pools(), default_pool="small"
            )
            try:
                corral = LocalCorral(sandbox.info, workdir / "corral.yaml", document, port=self.options.port)
            except OSError as exc:
                self.say(
                    f"corral demo: cannot listen on 127.0.0.1:{self.options.port} ({exc.strerror}); "
                    "choose another --port, or --port 0 for any free one",
                    error=True,
                )
                return 2
            corral.start()
            stack.callback(corral.stop)
            # Printed once, beside the URL and never in it: the dashboard takes a token only through its form.
            _, self._dashboard_token = corral.service.store.run_blocking(tokens.create, "demo-dashboard", "read")
            self.dashboard_url = f"{corral.url}/"
            with httpx.Client(base_url=sandbox.info.control_url, timeout=10) as control, corral.api() as api:
                return self._drive(control, api)

    def _drive(self, control: httpx.Client, api: httpx.Client) -> int:
        ports_before = control.get("/stats").json()["cloud"]["ports"]
        faults = {"seed": self.seed, "world": {"boot_failure_rate": self.options.boot_failure_rate}}
        control.put("/faults", json=faults).raise_for_status()
        self.say(f"dashboard: {self.dashboard_url} (sign in with this read token: {self._dashboard_token})")
        self.say(self._plan_text())
        self.phase = "warming up"
        self._wait(control, api, lambda: self._warm(api), WARM_UP_TIMEOUT_S)
        self.phase = "running"
        self.started_at = time.monotonic()
        self._last_plain = -math.inf
        self._run_trace(control, api)
        self.phase = "finishing jobs"
        cancelled = self._finish_jobs(control, api)
        self.phase = "draining pools"
        leaks = self._drain(control, api, ports_before)
        outcome = self._outcome(control, api, cancelled, leaks)
        self._clear_view()
        self.out.write(summary_text(outcome))
        self.out.flush()
        problems = failures(outcome)
        if problems:
            self.say(f"corral demo: failed: {'; '.join(problems)}", error=True)
        return 1 if problems else 0

    def _plan_text(self) -> str:
        until = f"for {self.options.duration_s:g} s" if self.options.duration_s else "until Ctrl-C"
        return (
            f"jobs: ~{self.options.jobs_per_minute:g}/min {until}; pools small (default, 2 warm), "
            f"large (1 warm, scratch volume), gpu (cold); {self.options.boot_failure_rate:.0%} of boots fail"
        )

    # -- phases ---------------------------------------------------------------------------------------

    def _run_trace(self, control: httpx.Client, api: httpx.Client) -> None:
        """Submit arrivals one tick ahead (as a sandbox trace, so they land at their exact offsets)."""
        end = self.options.duration_s
        while not self.stop.is_set():
            elapsed = time.monotonic() - self.started_at
            if end is not None and elapsed >= end:
                return
            horizon = elapsed + TICK_S if end is None else min(elapsed + TICK_S, end)
            jobs = [{**job, "at": max(0.0, at - elapsed)} for at, job in self.arrivals.until(horizon)]
            if jobs:
                control.post("/trace", json={"jobs": jobs}).raise_for_status()
                self.submitted += len(jobs)
            self._refresh(control, api)
            self.stop.wait(TICK_S)

    def _warm(self, api: httpx.Client) -> bool:
        """Every pool has its warm runners idle, so the trace starts from the steady state."""
        pools = api.get("/api/v1/pools").json()
        return all(pool["idle"] >= pool["min_idle"] for pool in pools) or self.stop.is_set()

    def _finish_jobs(self, control: httpx.Client, api: httpx.Client) -> int:
        """Let every submitted job run to completion; cancel what is still waiting after the timeout."""

        def finished() -> bool:
            jobs = control.get("/stats").json()["github"]["jobs"]
            total = jobs["queued"] + jobs["in_progress"] + jobs["completed"]
            return bool(total >= self.submitted and jobs["queued"] == 0 and jobs["in_progress"] == 0)

        if self._wait(control, api, finished, FINISH_TIMEOUT_S):
            return 0
        unfinished = [job for job in control.get("/jobs").json() if job["status"] != "completed"]
        for job in unfinished:
            control.post(f"/jobs/{job['id']}/cancel")
        return len(unfinished)

    def _drain(self, control: httpx.Client, api: httpx.Client, ports_before: int) -> Leaks:
        """Drain every pool as an operator would, then count what the cloud and GitHub still hold."""
        for pool in api.get("/api/v1/pools").json():
            if not pool["removed"]:
                api.post(f"/api/v1/pools/{pool['name']}/drain").raise_for_status()

        def leaks() -> Leaks:
            return count_leaks(control.get("/stats").json(), ports_before)

        def clean() -> bool:
            return leaks().total == 0 and not api.get("/api/v1/runners").json()

        self._wait(control, api, clean, DRAIN_TIMEOUT_S)
        return leaks()

    def _wait(self, control: httpx.Client, api: httpx.Client, done: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if done():
                return True
            self._refresh(control, api)
            time.sleep(TICK_S)
        return done()

    def _outcome(self, control: httpx.Client, api: httpx.Client, cancelled: int, leaks: Leaks) -> Outcome:
        runners = api.get("/api/v1/runners", params={"include_deleted": True}).json()
        pool_of_runner = {runner["name"]: runner["pool"] for runner in runners}
        waits: dict[str, list[float]] = {}
        served = 0
        for job in control.get("/jobs").json():
            if job["status"] != "completed" or job["conclusion"] != "success":
                continue
            served += 1
            wait = wait_of(job)
            if wait is not None:
                waits.setdefault(pool_of_runner.get(job["runner_name"], "?"), []).append(wait)
        cloud = control.get("/stats").json()["cloud"]
        return Outcome(
            elapsed_s=time.monotonic() - self.started_at,
            submitted=self.submitted,
            served=served,
            cancelled=cancelled,
            waits_by_pool=waits,
            runners_created=len(runners),
            servers_created=cloud["servers_created"],
            boot_failures=cloud["servers_errored"],
            leaks=leaks,
            warnings=self.warnings.count,
        )

    # -- the live view --------------------------------------------------------------------------------

    def _refresh(self, control: httpx.Client, api: httpx.Client) -> None:
        elapsed = time.monotonic() - self.started_at
        if not self.tty and elapsed - self._last_plain < PLAIN_STATUS_EVERY_S:
            return
        jobs = control.get("/stats").json()["github"]["jobs"]
        pools = api.get("/api/v1/summary").json()["pools"]
        if not self.tty:
            self._last_plain = elapsed
            per_pool = ", ".join(f"{p['name']} {p['starting']}/{p['idle']}/{p['busy']}/{p['failed']}" for p in pools)
            self.say(
                f"[{clock(elapsed)}] {self.phase}: jobs queued {jobs['queued']}, running {jobs['in_progress']}, "
                f"done {jobs['completed']}; runners starting/idle/busy/failed: {per_pool}"
            )
            return
        total = f" / {clock(self.options.duration_s)}" if self.options.duration_s else ""
        lines = [
            f"corral demo  {clock(elapsed)}{total}  {self.phase}   ({self._ctrl_c_hint()})",
            f"jobs    submitted {self.submitted:<5} queued {jobs['queued']:<4} running {jobs['in_progress']:<4} "
            f"done {jobs['completed']}",
            "",
            f"{'pool':<8} {'ready':<6} {'desired':>7} {'starting':>8} {'idle':>5} {'busy':>5} {'failed':>6} "
            f"{'queued':>6}",
        ]
        for p in pools:
            name = p["name"] + ("*" if p["default"] else "")
            ready = "yes" if p["ready"] else "no"
            lines.append(
                f"{name:<8} {ready:<6} {p['desired']:>7} {p['starting']:>8} {p['idle']:>5} {p['busy']:>5} "
                f"{p['failed']:>6} {p['queued_jobs']:>6}"
            )
        lines.append("")
        lines.append(f"dashboard: {self.dashboard_url}")
        if self.warnings.last:
            lines.append(f"last warning: {self.warnings.last[:110]}")
        self._draw(lines)

    def _ctrl_c_hint(self) -> str:
        if self.stop.is_set():
            return "stopping; Ctrl-C again to quit without the leak check"
        return "Ctrl-C to stop"

    def _draw(self, lines: list[str]) -> None:
        up = f"\x1b[{self._drawn_lines}F" if self._drawn_lines else ""
        body = "".join(f"{line}\x1b[K\n" for line in lines)
        self.out.write(f"{up}{body}\x1b[J")
        self.out.flush()
        self._drawn_lines = len(lines)

    def _clear_view(self) -> None:
        if self.tty and self._drawn_lines:
            self.out.write(f"\x1b[{self._drawn_lines}F\x1b[J")
            self.out.flush()
            self._drawn_lines = 0

    def say(self, text: str, *, error: bool = False) -> None:
        stream = sys.stderr if error else self.out
        print(text, file=stream, flush=True)

    # -- process plumbing -----------------------------------------------------------------------------

    @contextlib.contextmanager
    def _signals(self) -> Iterator[None]:
        """First Ctrl-C (or SIGTERM): wind down cleanly and still check for leaks. Second: give up."""

        def handle(signum: int, frame: FrameType | None) -> None:
            self.interrupts += 1
            if self.interrupts > 1:
                raise KeyboardInterrupt
            self.stop.set()

        previous = {signum: signal.signal(signum, handle) for signum in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    @contextlib.contextmanager
    def _quiet_logging(self) -> Iterator[None]:
        """corral's own log lines would scroll the live view away; keep its warnings for the view."""
        logger = logging.getLogger("corral")
        saved = logger.propagate
        logger.addHandler(self.warnings)
        logger.propagate = False
        try:
            yield
        finally:
            logger.removeHandler(self.warnings)
            logger.propagate = saved


def summary_text(outcome: Outcome) -> str:
    """The closing report; tests and people read the same lines."""
    all_waits = [wait for waits in outcome.waits_by_pool.values() for wait in waits]
    median = statistics.median(all_waits) if all_waits else None
    per_pool = ", ".join(
        f"{pool} {statistics.median(waits):.1f} s" for pool, waits in sorted(outcome.waits_by_pool.items())
    )
    lines = [
        f"corral demo summary ({clock(outcome.elapsed_s)})",
        f"  jobs served       {outcome.served} of {outcome.submitted} submitted"
        + (f" ({outcome.cancelled} cancelled unfinished)" if outcome.cancelled else ""),
        f"  median wait       {seconds_text(median)} queued -> started"
        + (f" (per pool: {per_pool})" if per_pool else "")
        + "; GitHub timestamps, 1 s resolution",
        f"  runners created   {outcome.runners_created} ({outcome.servers_created} servers, "
        f"{outcome.boot_failures} of them failed to boot and were replaced)",
    ]
    leaks = outcome.leaks
    lines.append(
        f"  leaks found       {leaks.total} (servers {leaks.servers}, volumes {leaks.volumes}, "
        f"ports {leaks.ports}, runner registrations {leaks.registrations})"
    )
    if outcome.warnings:
        lines.append(f"  corral warnings   {outcome.warnings}")
    return "\n".join(lines) + "\n"


def failures(outcome: Outcome) -> list[str]:
    """Why the run failed, empty if it did not: a smoke test passes only if every job submitted was served
    and nothing was left behind (a demo that served nothing, talking to the wrong cloud, once exited 0)."""
    problems = []
    unserved = outcome.submitted - outcome.served
    if unserved > 0:
        problems.append(f"{unserved} of {outcome.submitted} jobs went unserved")
    if outcome.leaks.total:
        problems.append(f"leaks found: {outcome.leaks.total}")
    return problems


def run_demo(options: DemoOptions, out: TextIO | None = None) -> int:
    return Demo(options, out or sys.stdout).run()
