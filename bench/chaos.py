"""Chaos: a long job trace against a real `corral serve` while the world misbehaves, and what got lost.

corral is driven only from outside, the way production meets it: `corral serve` and `corral sandbox` run as
separate processes; jobs go in through the sandbox's control API, corral is read through its REST API
(an admin token made with `corral token create`), faults are switched on through the sandbox, and
PostgreSQL is disturbed the way an admin would. Nothing here imports corral's engine, so the bench runs
unchanged against any engine behind the same config, CLI and API.

corral uses the sandbox's GitHub App (so failed webhook deliveries are redelivered at its request) and
three pools: `small` (1 warm, max 4), `large` (1 warm, max 3, a scratch volume) and `gpu` (cold, max 2).
Every job names its pool's label, so no runner of one pool can take another pool's job. While the trace
runs, at moments drawn from `--seed`:

- corral is killed with SIGKILL (`--kills` times, at least 2 s after it last came back) and started again
  on the same database and port after 0-2 s; webhooks sent meanwhile fail and stay in the delivery log.
  One restart in three is preceded by Keystone 503s and one in three by Glance 500s (three each, spent
  as corral starts);
- 20% of server creates and deletes answer 500; 10% of GitHub REST calls answer 500;
- 5% of webhook events are lost (never attempted, `webhook_lose_rate`) and 5% of delivery attempts fail
  (`webhook_drop_rate`, redeliverable);
- GitHub's rate limit is exhausted once (`remaining: 0` until a reset a few seconds later);
- on PostgreSQL, every connection corral holds is terminated (`pg_terminate_backend`) now and then.

Definitions of the figures:

- served: jobs the sandbox completed with conclusion `success`, of all submitted. A job whose runner's
  server was deleted under it concludes `failure`; one nobody ran is still queued.
- leaks: after the trace has settled, every pool is drained through the REST API (no new runners, idle
  ones retired); once corral has no runner left (or the drain timeout passes) whatever the sandbox still
  holds is a leak: servers, volumes, ports beyond those before the run, runner registrations
  (`corral_sandbox.demo.count_leaks`).
- duplicates: servers created beyond one per job: servers whose runner ran no job, less the pools'
  `min_idle` (the warm runners standing at the end, which the drain retires). A warm runner that takes a
  job is replaced by one started for that job, so a perfect run creates exactly jobs + min_idle servers.
  Races corral cannot avoid (a runner started for a job that a warm runner took a moment earlier, with the
  `in_progress` webhook lost) make a few more.
- max_violations: episodes in which a pool had more live servers than its `max_runners`, replayed exactly
  from the sandbox's server lifetimes (`GET /_sandbox/servers`), not sampled. A server is live from its
  create until it shuts down (its runner exited), goes to ERROR, or its delete is accepted: after that it
  no longer counts as capacity in corral's design either (DESIGN.md: failed runners being cleaned up do not
  count against `max_runners`). Peaks per pool, including excess, are printed beside.
- stuck_jobs: after the settle time, jobs the sandbox has not completed, together with jobs corral's own
  table (REST API) still has `queued` or `in_progress` (counted once per job). Those corral was never told
  about (their `queued` event lost, `GET /_sandbox/deliveries/lost`, and unknown to corral) are named apart.
- recovery_p99_s: per kill, seconds from the kill until a job started on a runner that the restarted corral
  created (corral turning demand into runners again); p99 over kills. A kill not recovered before the next
  one (or the end of the run) counts as the time until then, a lower bound, and is reported as unrecovered.
  Not "until a job queued after the restart starts": GitHub hands a new runner the oldest queued job, so
  that moment measures the outage's backlog against the pools' maximum more than corral. It is printed
  beside, as "backlog cleared".

With `--replicas N` (PostgreSQL only), N `corral serve` processes share the database, each under its own
stable name (HOST:PORT). A kill takes one replica (each once per round of N kills, in an order drawn from
the seed) and keeps it down for one to two lease times by default, so the others take its pools over before
it comes back and takes its share back. Webhooks go to one live replica: when that one is killed they move to
the next, as a load balancer would (the deliveries in between fail and are redelivered). `--rolling` stops
each replica in turn with SIGTERM instead (webhooks moved off it first) and starts it again at once: a
rolling restart. Two more figures, for every run:

- runners per job: the servers a job accounts for: the one that ran it, and those started for it (corral's
  runners, listed through the API with the deleted ones, name the job each was started for) that ran no job;
  the maximum over jobs, held against `max_runners_per_job`. A server started for one job that ran another
  counts for the job it ran;
- servers created twice for one runner: servers beyond one per `corral-runner` metadata value, a create
  made twice (by two replicas, or by a restart blind to its predecessor's create).

Figures are printed, never asserted: the exit status is 0 unless the harness itself failed (2). With
`--workdir`, corral's config, log (all lives, INFO) and database (SQLite) stay there, with `records.json`:
the sandbox's jobs, server lifetimes, stats, delivery log and lost events, to chase a finding afterwards.

    .venv/bin/python bench/chaos.py [--jobs 1000] [--kills 20] [--seed 0] [--database sqlite|postgresql]
                                    [--duration SECONDS] [--settle SECONDS] [--workdir DIR]
                                    [--replicas N [--rolling] [--lease-time S] [--downtime MIN MAX]]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import re
import socket
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal

import httpx
import psycopg
import yaml

from corral.cloud.provider import META_RUNNER
from corral.files import write_private
from corral_sandbox.demo import Leaks, count_leaks
from corral_sandbox.local import app_github, corral_config, pool_spec
from corral_sandbox.server import SandboxInfo

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import chaos_measures as measures
from bench.support import CorralExited, CorralProcess, HarnessError, create_token, free_port, start_sandbox, stop
from tests.store_urls import POSTGRES_ADMIN_URL, postgres_url, sqlite_url

Database = Literal["sqlite", "postgresql"]
ORG = "octo-org"
REPOS = [f"{ORG}/app", f"{ORG}/api", f"{ORG}/web"]
JOB_KINDS = (("small", 0.5), ("large", 0.3), ("gpu", 0.2))
"""Each job's pool label and the share of jobs that ask for it."""
MAX_FAILED_STARTS = 5
"""Starts in a row that may end on their own (each one a finding) before the run gives up."""
MIN_UPTIME_S = 2.0
"""The least time corral answers before the next kill, however far behind the schedule the kills are."""
AMPLE_RATE_LIMIT = 10_000_000
"""Restored after the exhaustion: a run makes more calls than GitHub's 5,000 an hour, and that is not the point."""
STARTUP_FAULTS: dict[str, dict[str, Any]] = {
    "keystone": {"match": "openstack POST /identity/v3/auth/tokens", "error_rate": 1.0, "status": 503, "count": 3},
    "glance": {"match": "openstack GET /image/v2/images*", "error_rate": 1.0, "status": 500, "count": 3},
}
MASKS = (
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "<uuid>"),
    (re.compile(r"https?://127\.0\.0\.1:\d+"), "<url>"),
    (re.compile(r"-[0-9a-f]{10}\b"), "-<id>"),
    (re.compile(r"\d{4,}"), "<n>"),
)
"""What differs line by line in a log message (ids, ports, times), masked so alike lines read as one."""
LOG_PATTERNS = {
    "cannot go from deleted to failed": re.compile(r"cannot go from deleted to failed"),
    "ERROR lines": re.compile(r" ERROR "),
    "tracebacks": re.compile(r"^Traceback"),
    "reconcile pass failed": re.compile(r"reconcile pass failed"),
    "job upkeep failed": re.compile(r"job upkeep failed"),
}


@dataclass(frozen=True)
class ChaosOptions:
    """What a run does; the defaults are the full bench the module docstring describes."""

    jobs: int = 1000
    kills: int = 20
    seed: int = 0
    database: Database = "sqlite"
    duration_s: float | None = None
    """The arrival window; by default jobs arrive at about two a second."""
    boot_delay_s: float = 0.5
    job_duration_s: tuple[float, float] = (0.5, 3.0)
    cloud_error_rate: float = 0.2
    github_error_rate: float = 0.1
    webhook_lose_rate: float = 0.05
    webhook_drop_rate: float = 0.05
    rate_limit_exhaustions: int = 1
    rate_limit_reset_s: int = 10
    pg_terminations: int | None = None
    """On PostgreSQL, how often every connection of corral's is terminated; default: one per two kills, >= 3."""
    settle_s: float = 300.0
    """After the last arrival, how long jobs may take to finish before the unfinished ones count as stuck."""
    drain_s: float = 120.0
    workdir: Path | None = None
    """Where the config, database (SQLite) and corral's log go; a temporary folder if None."""
    replicas: int = 1
    """`corral serve` processes on one PostgreSQL; each kill takes one of them (each once per round, in an
    order drawn from the seed) and webhooks go to one live replica, moved on each kill as a load balancer would."""
    stop: Literal["kill", "term"] = "kill"
    """"term": a rolling restart instead of kills: SIGTERM (a clean stop) to each replica in turn, started
    again as soon as it has exited, with no start-up faults; webhooks leave it first, as a draining balancer's."""
    lease_time_s: float | None = None
    """corral's `lease_time` (None: its default, 15 s)."""
    downtime_s: tuple[float, float] | None = None
    """How long a killed corral stays down, drawn per kill; default 0-2 s, and with replicas one to two lease
    times, so that the others take its pools before it comes back (a restart within the lease takes them back
    under its stable name before anyone else may)."""
    max_runners_per_job: int = 3
    """corral's default, which the runs keep: the bound the runners-per-job figure is held to."""

    @property
    def lease_s(self) -> float:
        return self.lease_time_s if self.lease_time_s is not None else 15.0

    @property
    def downtime_range(self) -> tuple[float, float]:
        if self.downtime_s is not None:
            return self.downtime_s
        if self.stop == "term":
            return (0.0, 0.0)
        return (self.lease_s, 2 * self.lease_s) if self.replicas > 1 else (0.0, 2.0)

    @property
    def window_s(self) -> float:
        return self.duration_s if self.duration_s is not None else max(self.jobs / 2.0, 10.0)

    @property
    def terminations(self) -> int:
        if self.database != "postgresql":
            return 0
        return self.pg_terminations if self.pg_terminations is not None else max(3, self.kills // 2)


def chaos_pools() -> dict[str, Any]:
    return {
        "small": pool_spec(["small"], min_idle=1, max_runners=4, idle_grace="1s"),
        "large": pool_spec(
            ["large"],
            flavor="m1.large",
            min_idle=1,
            max_runners=3,
            idle_grace="1s",
            extra_volumes=[{"name": "scratch", "size_gb": 10}],
        ),
        "gpu": pool_spec(["gpu"], flavor="m1.xlarge", min_idle=0, max_runners=2, idle_grace="1s"),
    }


@dataclass(frozen=True)
class FaultRow:
    fault: str
    injected: int
    affected: str
    recovery: str


@dataclass
class ChaosResult:
    options: ChaosOptions
    total: int
    served: int
    failed_jobs: int
    leaks: Leaks
    duplicates: int
    servers_created: int
    over_max: dict[str, measures.OverMax]
    max_runners: dict[str, int]
    stuck_on_github: list[int]
    stuck_in_corral: list[int]
    stuck_never_told: list[int]
    """Stuck jobs corral was never told about: their `queued` event was lost (never sent, so never in the
    delivery log to redeliver) and corral does not know them."""
    recoveries: list[float | None]
    recovery_bounds: list[float]
    wait_p50_s: float | None
    wait_p99_s: float | None
    faults: list[FaultRow]
    unexpected_exits: list[int]
    log_counts: dict[str, int]
    log_samples: list[str]
    elapsed_s: float
    workdir: Path
    runners_per_job: dict[int, int]
    """Per job, the servers it accounts for (`chaos_measures.runners_per_job`)."""
    double_creates: int
    victims: list[tuple[int, list[str]]]
    leak_trail: list[str] = field(default_factory=list)
    """For each server left after the drain: its name, corral's row for its runner, and the last log lines
    that name it (CI keeps only this report, not the work folder)."""

    @property
    def runners_per_job_max(self) -> int:
        return max(self.runners_per_job.values(), default=0)

    @property
    def jobs_over_max_runners_per_job(self) -> list[int]:
        limit = self.options.max_runners_per_job
        return sorted(job for job, count in self.runners_per_job.items() if count > limit)

    @property
    def max_violations(self) -> int:
        return sum(pool.episodes for pool in self.over_max.values())

    @property
    def stuck_jobs(self) -> int:
        return len(set(self.stuck_on_github) | set(self.stuck_in_corral))

    @property
    def unrecovered(self) -> int:
        return sum(1 for value in self.recoveries if value is None)

    @property
    def recovery_p99_s(self) -> float | None:
        pairs = zip(self.recoveries, self.recovery_bounds, strict=True)
        values = [bound if value is None else value for value, bound in pairs]
        return measures.percentile(values, 0.99)

    def summary_line(self) -> str:
        return (
            f"served={self.served}/{self.total} leaks={self.leaks.total} duplicates={self.duplicates} "
            f"max_violations={self.max_violations} stuck_jobs={self.stuck_jobs} "
            f"recovery_p99_s={seconds(self.recovery_p99_s)}"
        )

    def report(self) -> str:
        """The summary line, the per-fault table, and what else a reader needs to tell why."""
        lines = [self.summary_line(), ""]
        widths = (34, 9, 46)
        lines.append(f"{'fault':<{widths[0]}} {'injected':>{widths[1]}}  {'jobs affected':<{widths[2]}} recovery")
        for row in self.faults:
            lines.append(
                f"{row.fault:<{widths[0]}} {row.injected:>{widths[1]}}  {row.affected:<{widths[2]}} {row.recovery}"
            )
        lines.append("")
        peaks = ", ".join(f"{pool} {over.peak}/{self.max_runners[pool]}" for pool, over in self.over_max.items())
        lines.append(
            f"jobs {self.total} ({self.failed_jobs} failed); servers created {self.servers_created}; "
            f"peak live servers/max: {peaks}"
        )
        lines.append(f"queued->started p50 {seconds(self.wait_p50_s)} s, p99 {seconds(self.wait_p99_s)} s")
        over = self.jobs_over_max_runners_per_job
        lines.append(
            f"runners per job: max {self.runners_per_job_max} (max_runners_per_job "
            f"{self.options.max_runners_per_job}; {len(over)} jobs above {over[:10]}); servers created twice for "
            f"one runner: {self.double_creates}"
        )
        if self.options.replicas > 1:
            lines.append(
                f"replicas {self.options.replicas}, lease {self.options.lease_s:g} s; "
                + ", ".join(f"{replica} holding {'+'.join(pools) or '-'}" for replica, pools in self.victims)
            )
        lines.append(
            f"leaks: servers {self.leaks.servers}, volumes {self.leaks.volumes}, ports {self.leaks.ports}, "
            f"registrations {self.leaks.registrations}"
        )
        if self.stuck_jobs:
            lines.append(
                f"stuck: {len(self.stuck_on_github)} unfinished on GitHub {sorted(self.stuck_on_github)[:10]}, "
                f"{len(self.stuck_in_corral)} unfinished in corral's table {sorted(self.stuck_in_corral)[:10]}"
            )
            if self.stuck_never_told:
                lines.append(
                    f"  of which {len(self.stuck_never_told)} never told to corral: their queued webhook was lost "
                    f"(never sent) and nothing found them {self.stuck_never_told[:10]}"
                )
        if self.unrecovered:
            lines.append(f"kills not recovered before the next one: {self.unrecovered} of {len(self.recoveries)}")
        if self.unexpected_exits:
            lines.append(f"corral exited on its own {len(self.unexpected_exits)} times: {self.unexpected_exits}")
        lines.append("corral's log: " + ", ".join(f"{name} {count}" for name, count in self.log_counts.items()))
        lines.extend(f"  {sample}" for sample in self.log_samples)
        if self.leak_trail:
            lines.append("left behind:")
            lines.extend(f"  {line}" for line in self.leak_trail)
        how = {"kill": "kill -9", "term": "SIGTERM (rolling)"}[self.options.stop]
        lines.append(
            f"elapsed {self.elapsed_s:.0f} s; seed {self.options.seed}; database {self.options.database}; "
            f"{self.options.replicas} replica(s), stops by {how}"
        )
        return "\n".join(lines)


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


@dataclass
class Event:
    """Something the harness does at `at` seconds into the trace."""

    at: float
    kind: Literal["kill", "rate_limit", "rate_limit_restore", "pg_terminate"]
    startup_fault: str | None = None
    downtime_s: float = 0.0
    replica: int = 0
    """Which replica a kill takes (an index into the run's replicas)."""


def victim_order(options: ChaosOptions, rng: random.Random) -> list[int]:
    """The replica each kill takes: every replica once per round, in an order drawn from the seed (a rolling
    restart goes in order); one replica draws nothing, so single-replica runs keep their seeds' schedules."""
    if options.replicas == 1:
        return [0] * options.kills
    order: list[int] = []
    while len(order) < options.kills:
        round_ = list(range(options.replicas))
        if options.stop == "kill":
            rng.shuffle(round_)
        order.extend(round_)
    return order[: options.kills]


def plan_trace(options: ChaosOptions, rng: random.Random) -> list[dict[str, Any]]:
    """Arrivals spread at random over the window (a Poisson process given its count), with mixed pools."""
    window = options.window_s
    jobs = []
    for at in sorted(rng.uniform(0.0, window) for _ in range(options.jobs)):
        label = rng.choices([kind for kind, _ in JOB_KINDS], weights=[share for _, share in JOB_KINDS])[0]
        jobs.append(
            {
                "at": round(at, 3),
                "repo": rng.choice(REPOS),
                "labels": ["self-hosted", label],
                "duration": round(rng.uniform(*options.job_duration_s), 2),
                "workflow_name": "chaos",
            }
        )
    return jobs


def plan_faults(options: ChaosOptions, rng: random.Random) -> list[Event]:
    """Kills one per equal slot of the window (at a random point of its middle), the rest anywhere."""
    window = options.window_s
    events = []
    kinds: list[str | None] = [None, "keystone", "glance"] if options.stop == "kill" else [None]
    startup = [kinds[i % len(kinds)] for i in range(options.kills)]
    rng.shuffle(startup)
    slot = window / max(options.kills, 1)
    for index in range(options.kills):
        at = slot * (index + rng.uniform(0.1, 0.9))
        downtime = rng.uniform(*options.downtime_range)
        events.append(Event(at, "kill", startup_fault=startup[index], downtime_s=downtime))
    victims = victim_order(options, rng)
    for event, replica in zip([e for e in events if e.kind == "kill"], victims, strict=True):
        event.replica = replica
    for _ in range(options.rate_limit_exhaustions):
        at = rng.uniform(0.2, 0.8) * window
        events.append(Event(at, "rate_limit"))
        events.append(Event(at + options.rate_limit_reset_s + 1.0, "rate_limit_restore"))
    events.extend(Event(rng.uniform(0.05, 0.95) * window, "pg_terminate") for _ in range(options.terminations))
    return sorted(events, key=lambda event: event.at)


def base_faults(options: ChaosOptions) -> list[dict[str, Any]]:
    return [
        {"match": "openstack POST /compute/v2.1/servers", "error_rate": options.cloud_error_rate, "status": 500},
        {
            "match": "openstack DELETE /compute/v2.1/servers/{server_id}",
            "error_rate": options.cloud_error_rate,
            "status": 500,
        },
        {"match": "github *", "error_rate": options.github_error_rate, "status": 500},
    ]


class ChaosRun:
    """One run: corral and the sandbox already set up; `execute()` drives, measures and returns."""

    def __init__(
        self,
        options: ChaosOptions,
        info: SandboxInfo,
        database_url: str,
        workdir: Path,
        say: Callable[[str], None],
    ) -> None:
        self.options = options
        self.info = info
        self.database_url = database_url
        self.workdir = workdir
        self.say = say
        self.rng = random.Random(options.seed)
        self.control = httpx.Client(base_url=info.control_url, timeout=60)
        self.pools = chaos_pools()
        document = corral_config(info, database_url, self.pools, default_pool="small")
        document["github"] = app_github(info)
        # Shorter than the defaults so a run of minutes sees its lost webhooks found and its stale jobs checked.
        document.update(reconcile_interval="1s", stale_job_check="10s", missed_job_scan="5s")
        if options.lease_time_s is not None:
            document["lease_time"] = f"{options.lease_time_s:g}s"
        self.config_path = workdir / "corral.yaml"
        write_private(self.config_path, yaml.safe_dump(document))
        if options.replicas > 1 and options.database != "postgresql":
            raise HarnessError("replicas share one PostgreSQL: --replicas needs --database postgresql")
        logs = ["corral.log"] if options.replicas == 1 else [f"replica-{i}.log" for i in range(options.replicas)]
        self.corrals = [CorralProcess(self.config_path, free_port(), info.clouds_yaml, workdir / log) for log in logs]
        self.target = 0
        """The replica webhooks go to (the one a load balancer would pick)."""
        self.api = httpx.Client(timeout=30)
        self.kills: list[tuple[float, float, float, str | None]] = []
        self.victims: list[tuple[int, list[str]]] = []
        """Per kill, the replica taken and the pools it held just before."""
        self.rate_limit_windows: list[measures.Window] = []
        self.terminated: list[int] = []
        self.unexpected_exits: list[int] = []
        self._killing: int | None = None
        self._answering_since = 0.0

    def close(self) -> None:
        for corral in self.corrals:
            corral.stop()
        self.api.close()
        self.control.close()

    # -- driving ------------------------------------------------------------------------------------

    def execute(self) -> ChaosResult:
        started = time.monotonic()
        self._install_app()
        ports_before = self.control.get("/stats").json()["cloud"]["ports"]
        self.api.headers["Authorization"] = f"Bearer {create_token(self.config_path, 'chaos')}"
        for corral in self.corrals:
            corral.start()
        for corral in self.corrals:
            self._serving(corral)
        self._send_webhooks_to(self.target)
        self._wait(self._warm, 90, "warm runners before the trace")
        self._put_faults(seed=True)
        trace = plan_trace(self.options, self.rng)
        events = plan_faults(self.options, self.rng)
        self.control.post("/trace", json={"jobs": trace}).raise_for_status()
        origin = time.monotonic()
        self.say(f"chaos: {len(trace)} jobs over {self.options.window_s:.0f} s, {len(events)} fault events")
        for event in events:
            self._until(origin + event.at)
            self._apply(event)
        self._until(origin + self.options.window_s + 1.0)
        self.say("chaos: trace submitted; letting it settle")
        settled_by = time.monotonic() + self.options.settle_s
        total = len(trace)
        self._wait(lambda: self._sandbox_done(total), settled_by - time.monotonic(), "jobs to finish")
        self._wait(self._corral_table_done, settled_by - time.monotonic(), "corral's job table to catch up")
        run_end = time.time()
        jobs = self.control.get("/jobs").json()
        stuck_in_corral = self._corral_unfinished() or []
        self.say("chaos: draining every pool")
        leaks = self._drain(ports_before)
        lives = self.control.get("/servers").json()
        stats = self.control.get("/stats").json()
        deliveries = self.control.get("/deliveries").json()
        lost = self.control.get("/deliveries/lost").json()
        runners = self._api_json("GET", "/api/v1/runners", include_deleted="true") or []
        for corral in self.corrals:
            corral.stop()
        # For a reader chasing a finding: what the sandbox saw, beside corral's log and database.
        records = {"jobs": jobs, "servers": lives, "stats": stats, "deliveries": deliveries, "lost": lost}
        records.update(kills=self.kills, victims=self.victims, runners=runners)
        (self.workdir / "records.json").write_text(json.dumps(records))
        log_counts, log_samples = scan_logs([corral.log_path for corral in self.corrals])
        trail = leak_trail(lives, runners, [corral.log_path for corral in self.corrals]) if leaks.total else []
        return self._result(
            jobs,
            lives,
            stats,
            deliveries,
            lost,
            leaks,
            stuck_in_corral,
            run_end,
            log_counts,
            log_samples,
            started,
            runners,
            trail,
        )

    def _install_app(self) -> None:
        """The App installed on the organisation, as an admin would have it before corral starts (the sandbox
        creates an account, and the App's installation on it, when a request first names it)."""
        self.control.put("/rate-limit", json={"remaining": AMPLE_RATE_LIMIT, "reset_in": 3600}).raise_for_status()
        headers = {"Authorization": f"Bearer {self.info.pat}"}
        httpx.get(f"{self.info.github_url}/orgs/{ORG}/actions/runners", headers=headers).raise_for_status()

    def _put_faults(self, *, seed: bool = False, startup: str | None = None) -> None:
        spec: dict[str, Any] = {
            "endpoints": base_faults(self.options) + ([STARTUP_FAULTS[startup]] if startup else []),
            "world": {
                "webhook_lose_rate": self.options.webhook_lose_rate,
                "webhook_drop_rate": self.options.webhook_drop_rate,
            },
        }
        if seed:
            spec["seed"] = self.options.seed
        self.control.put("/faults", json=spec).raise_for_status()

    def _apply(self, event: Event) -> None:
        if event.kind == "kill":
            self._kill(event)
        elif event.kind == "rate_limit":
            reset = self.options.rate_limit_reset_s
            now = time.time()
            self.control.put("/rate-limit", json={"remaining": 0, "reset_in": reset}).raise_for_status()
            self.rate_limit_windows.append(measures.Window(now, float(int(now) + reset)))
        elif event.kind == "rate_limit_restore":
            body = {"remaining": AMPLE_RATE_LIMIT, "reset_in": 3600}
            self.control.put("/rate-limit", json=body).raise_for_status()
        else:
            self.terminated.append(self._terminate_connections())

    def _kill(self, event: Event) -> None:
        victim = self.corrals[event.replica]
        self._serving(victim)
        # A kill due while corral was still restarting waits a little: back-to-back kills would measure
        # nothing but start-up, and recovery could not be told from the next outage.
        self._until(self._answering_since + MIN_UPTIME_S)
        self.victims.append((event.replica, self._pools_held_by(victim)))
        self._killing = event.replica
        try:
            if self.options.stop == "term":
                self._move_webhooks_off(event.replica)  # a balancer drains a replica before it is stopped
                killed = victim.terminate()
            else:
                killed = victim.kill()
                self._move_webhooks_off(event.replica)  # and notices a dead one a moment after it died
            time.sleep(event.downtime_s)  # the outage itself, drawn from the seed
            if event.startup_fault:
                self._put_faults(startup=event.startup_fault)
            restarted = victim.start()
        finally:
            self._killing = None
        serving = self._serving(victim)
        self._answering_since = time.monotonic()
        self.kills.append((killed, restarted, serving, event.startup_fault))
        how = "SIGTERM" if self.options.stop == "term" else "kill"
        which = f" of replica {event.replica}" if len(self.corrals) > 1 else ""
        self.say(
            f"chaos: {how} {len(self.kills)}/{self.options.kills}{which} ({event.startup_fault or 'plain'} "
            f"restart), answering again after {serving - killed:.1f} s"
        )

    def _send_webhooks_to(self, replica: int) -> None:
        self.target = replica
        url = f"{self.corrals[replica].url}/webhook"
        self.control.put("/webhook", json={"url": url}).raise_for_status()

    def _move_webhooks_off(self, replica: int) -> None:
        """Webhooks that went to `replica` go to the next one, as a balancer stops sending to a backend that is
        down or draining."""
        if len(self.corrals) > 1:
            self._send_webhooks_to((replica + 1) % len(self.corrals) if self.target == replica else self.target)

    def _pools_held_by(self, corral: CorralProcess) -> list[str]:
        if len(self.corrals) == 1:
            return sorted(self.pools)
        rows = self._api_json("GET", "/api/v1/replicas") or []
        name = f"{socket.gethostname()}:{corral.port}"
        return next((sorted(row["pools"]) for row in rows if row["name"] == name), [])

    def _terminate_connections(self) -> int:
        name = self.database_url.rsplit("/", 1)[1]
        query = "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = %s"
        with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
            row = admin.execute(query, (name,)).fetchone()
        return int(row[0]) if row else 0

    def _keep_alive(self) -> None:
        """corral ending on its own is a finding: note its status and start it again."""
        for index, corral in enumerate(self.corrals):
            code = corral.exit_code
            if code is None or self._killing == index:
                continue
            self.unexpected_exits.append(code)
            self.say(f"chaos: corral {index} exited on its own with status {code}; starting it again")
            corral.start()
            self._serving(corral)

    def _serving(self, corral: CorralProcess) -> float:
        """Wait until corral answers (epoch seconds); a start that ends on its own is noted and tried again."""
        for _ in range(MAX_FAILED_STARTS):
            try:
                return corral.wait_serving()
            except CorralExited as exc:
                self.unexpected_exits.append(exc.code)
                self.say(f"chaos: corral exited with status {exc.code} while starting; starting it again")
                corral.start()
        raise HarnessError(f"corral serve failed to start {MAX_FAILED_STARTS} times in a row; see its log")

    def _until(self, moment: float) -> None:
        """Let the schedule's time pass (this is pacing, not waiting for a result), minding corral meanwhile."""
        while (left := moment - time.monotonic()) > 0:
            self._keep_alive()
            time.sleep(min(left, 0.5))

    def _wait(self, done: Callable[[], bool], timeout: float, what: str) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            self._keep_alive()
            if done():
                return True
            if time.monotonic() > deadline:
                self.say(f"chaos: gave up waiting for {what} after {timeout:.0f} s")
                return False
            time.sleep(0.5)

    # -- reading corral and the sandbox --------------------------------------------------------------

    def _api_json(self, method: str, path: str, **params: Any) -> Any:
        """corral's answer, or None while it cannot give one (restarting, its database briefly away). Asked of
        the replica webhooks go to: any replica answers for all."""
        try:
            response = self.api.request(method, self.corrals[self.target].url + path, params=params or None)
        except httpx.TransportError:
            return None
        return response.json() if response.status_code < 300 else None

    def _answered(self, method: str, path: str) -> bool:
        return self._api_json(method, path) is not None

    def _warm(self) -> bool:
        pools = self._api_json("GET", "/api/v1/pools")
        return pools is not None and all(pool["idle"] >= pool["min_idle"] for pool in pools)

    def _sandbox_done(self, total: int) -> bool:
        jobs = self.control.get("/stats").json()["github"]["jobs"]
        return bool(jobs["completed"] >= total and jobs["queued"] == 0 and jobs["in_progress"] == 0)

    def _corral_unfinished(self) -> list[int] | None:
        ids: list[int] = []
        for status in ("queued", "in_progress"):
            jobs = self._api_json("GET", "/api/v1/jobs", status=status, limit=1000)
            if jobs is None:
                return None
            ids.extend(int(job["id"]) for job in jobs)
        return ids

    def _corral_table_done(self) -> bool:
        return self._corral_unfinished() == []

    def _drain(self, ports_before: int) -> Leaks:
        for name in self.pools:
            path = f"/api/v1/pools/{name}/drain"
            self._wait(partial(self._answered, "POST", path), 60, f"pool {name} to accept the drain")

        def clean() -> bool:
            runners = self._api_json("GET", "/api/v1/runners")
            stats = self.control.get("/stats").json()
            return runners == [] and count_leaks(stats, ports_before).total == 0

        self._wait(clean, self.options.drain_s, "the drained pools to leave nothing behind")
        return count_leaks(self.control.get("/stats").json(), ports_before)

    # -- figures ------------------------------------------------------------------------------------

    def _result(
        self,
        jobs: list[dict[str, Any]],
        lives: list[dict[str, Any]],
        stats: dict[str, Any],
        deliveries: list[dict[str, Any]],
        lost: list[dict[str, Any]],
        leaks: Leaks,
        stuck_in_corral: list[int],
        run_end: float,
        log_counts: dict[str, int],
        log_samples: list[str],
        started: float,
        runners: list[dict[str, Any]],
        trail: list[str],
    ) -> ChaosResult:
        kills = [
            measures.Kill(killed, restarted, serving, fault, deadline)
            for (killed, restarted, serving, fault), deadline in zip(
                self.kills, [kill[0] for kill in self.kills[1:]] + [run_end], strict=True
            )
        ]
        recoveries = [measures.recovery_s(kill, jobs, lives) for kill in kills]
        waits = [value for job in jobs if (value := measures.wait_s(job)) is not None]
        warm = sum(int(pool["min_idle"]) for pool in self.pools.values())
        max_runners = {name: int(pool["max_runners"]) for name, pool in self.pools.items()}
        return ChaosResult(
            options=self.options,
            total=len(jobs),
            served=measures.served(jobs),
            failed_jobs=sum(1 for job in jobs if job["status"] == "completed" and job["conclusion"] != "success"),
            leaks=leaks,
            duplicates=measures.duplicates(lives, jobs, warm),
            servers_created=len(lives),
            over_max=measures.over_max(lives, max_runners),
            max_runners=max_runners,
            stuck_on_github=sorted(measures.unfinished(jobs)),
            stuck_in_corral=sorted(stuck_in_corral),
            stuck_never_told=sorted(measures.never_told(jobs, lost, stuck_in_corral)),
            recoveries=recoveries,
            recovery_bounds=[kill.deadline_s - kill.killed_s for kill in kills],
            wait_p50_s=measures.percentile(waits, 0.5),
            wait_p99_s=measures.percentile(waits, 0.99),
            faults=self._fault_rows(kills, recoveries, jobs, lives, stats, deliveries),
            unexpected_exits=self.unexpected_exits,
            log_counts=log_counts,
            log_samples=log_samples,
            leak_trail=trail,
            elapsed_s=time.monotonic() - started,
            workdir=self.workdir,
            runners_per_job=measures.runners_per_job(lives, jobs, runners),
            double_creates=measures.double_creates(lives),
            victims=self.victims,
        )

    def _fault_rows(
        self,
        kills: list[measures.Kill],
        recoveries: list[float | None],
        jobs: list[dict[str, Any]],
        lives: list[dict[str, Any]],
        stats: dict[str, Any],
        deliveries: list[dict[str, Any]],
    ) -> list[FaultRow]:
        rows = [
            kill_row("kill -9 (all)" if self.options.stop == "kill" else "SIGTERM (all)", "*", kills, recoveries, jobs),
            kill_row("  plain restart", None, kills, recoveries, jobs),
            kill_row("  restart after Keystone 503s", "keystone", kills, recoveries, jobs),
            kill_row("  restart after Glance 500s", "glance", kills, recoveries, jobs),
        ]
        injected = stats["injected_errors"]
        cloud = injected["openstack"]
        rows.append(FaultRow("cloud 500 on create", cloud.get("POST /compute/v2.1/servers", 0), "-", "-"))
        rows.append(FaultRow("cloud 500 on delete", cloud.get("DELETE /compute/v2.1/servers/{server_id}", 0), "-", "-"))
        rows.append(FaultRow("GitHub 500", sum(injected["github"].values()), "-", "-"))
        webhooks = stats["github"]["webhooks"]
        rows.append(FaultRow("webhook lost (never sent)", webhooks["lost"], "-", "-"))
        redelivered = sum(1 for d in deliveries if d["redelivery"] and 200 <= d["status_code"] < 300)
        refused = sum(1 for d in deliveries if d["status_code"] >= 500)
        rows.append(
            FaultRow(
                "webhook delivery failed",
                webhooks["dropped"],
                f"{redelivered} redelivered OK; corral answered 5xx {refused} times",
                "-",
            )
        )
        for window in self.rate_limit_windows:
            affected = measures.jobs_in(window, jobs)
            moment = measures.first_served_after(window.end_s, jobs, lives)
            recovery = "-" if moment is None else f"{moment - window.end_s:.1f} s after the reset"
            rows.append(FaultRow("rate limit exhausted", 1, jobs_text(affected), recovery))
        if self.options.database == "postgresql":
            rows.append(
                FaultRow(
                    "PostgreSQL connections terminated",
                    len(self.terminated),
                    f"{sum(self.terminated)} connections",
                    "-",
                )
            )
        return rows


def jobs_text(jobs: list[dict[str, Any]]) -> str:
    waits = [value for job in jobs if (value := measures.wait_s(job)) is not None]
    p99 = measures.percentile(waits, 0.99)
    return f"{len(jobs)} queued meanwhile, wait p99 {seconds(p99)} s"


def kill_row(
    label: str, kind: str | None, kills: list[measures.Kill], recoveries: list[float | None], jobs: list[Any]
) -> FaultRow:
    """Kills of one restart kind ("*": all): the jobs queued while corral was not answering, recovery times
    and when the backlog was worked off."""
    pairs = zip(kills, recoveries, strict=True)
    chosen = [(kill, value) for kill, value in pairs if kind == "*" or kill.startup_fault == kind]
    if not chosen:
        return FaultRow(label, 0, "-", "-")
    down = [measures.Window(kill.killed_s, kill.serving_s) for kill, _ in chosen]
    affected = [job for window in down for job in measures.jobs_in(window, jobs)]
    values = [value for _, value in chosen if value is not None]
    backlog = [value for kill, _ in chosen if (value := measures.backlog_s(kill, jobs)) is not None]
    recovery = f"p50 {seconds(measures.percentile(values, 0.5))} s, max {seconds(max(values, default=None))} s"
    if len(values) < len(chosen):
        recovery += f" ({len(chosen) - len(values)} not recovered)"
    recovery += f"; backlog cleared p50 {seconds(measures.percentile(backlog, 0.5))} s"
    return FaultRow(label, len(chosen), jobs_text(affected), recovery)


def scan_logs(paths: list[Path]) -> tuple[dict[str, int], list[str]]:
    """How often each pattern of interest appears in corral's logs (one per replica), and a few distinct
    lines that say what went wrong: ERROR lines and each traceback's last line first, then warnings."""
    counts: Counter[str] = Counter({name: 0 for name in LOG_PATTERNS})
    errors: dict[str, None] = {}
    warnings: dict[str, None] = {}
    in_traceback = False
    for line in log_lines(paths):
        for name, pattern in LOG_PATTERNS.items():
            if pattern.search(line):
                counts[name] += 1
        if line.startswith("Traceback"):
            in_traceback = True
        elif in_traceback and not line.startswith((" ", "\t")):
            # The first unindented line after a traceback is its exception: "ValueError: ...".
            in_traceback = False
            errors.setdefault(_masked(line, keep_time=True), None)
            continue
        if " ERROR " in line:
            errors.setdefault(_masked(line), None)
        elif " WARNING " in line:
            warnings.setdefault(_masked(line), None)
    samples = list(errors)[:8]
    samples += list(warnings)[: max(8 - len(samples), 0)]
    return dict(counts), samples


def _masked(line: str, *, keep_time: bool = False) -> str:
    """Times, names and ids differ line by line; what is left says what went wrong."""
    text = line.strip() if keep_time else re.sub(r"^\S+ \S+ ", "", line.strip())
    for pattern, placeholder in MASKS:
        text = pattern.sub(placeholder, text)
    return text[:200]


def leak_trail(lives: list[dict[str, Any]], runners: list[dict[str, Any]], logs: list[Path]) -> list[str]:
    """What there is to know of each server still there: its runner's row in corral and its last log lines."""
    rows = {row["id"]: row for row in runners}
    trail = []
    for life in lives:
        if life.get("gone_s") is not None:
            continue
        runner_id = life["metadata"].get(META_RUNNER, "?")
        row = rows.get(runner_id)
        known = (
            f"corral: {row['state']} ({row.get('failure_reason') or row.get('reason')})" if row else "corral: no row"
        )
        trail.append(f"server {life['name']} ({life['id'][:8]}): {known}")
        mentions = [line.rstrip() for line in log_lines(logs) if life["name"] in line or runner_id in line]
        trail.extend(f"  {line[:200]}" for line in mentions[-6:])
    return trail[:60]


def log_lines(paths: list[Path]) -> Iterator[str]:
    for path in paths:
        with contextlib.suppress(FileNotFoundError), path.open(errors="replace") as log:
            yield from log


def _quiet(_: str) -> None:
    """The default progress sink for `run_chaos`: say nothing."""


@contextlib.contextmanager
def database_for(options: ChaosOptions, folder: Path) -> Iterator[str]:
    with sqlite_url(folder) if options.database == "sqlite" else postgres_url() as url:
        yield url


def run_chaos(options: ChaosOptions, say: Callable[[str], None] = _quiet) -> ChaosResult:
    """Start the sandbox and corral, run the trace with its faults, and measure what it left."""
    with contextlib.ExitStack() as stack:
        if options.workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="corral-chaos-")))
        else:
            workdir = options.workdir
            workdir.mkdir(parents=True, exist_ok=True)
        database_url = stack.enter_context(database_for(options, workdir))
        sandbox, info = start_sandbox(workdir / "sandbox", options.boot_delay_s)
        stack.callback(stop, sandbox)
        run = ChaosRun(options, info, database_url, workdir, say)
        stack.callback(run.close)
        return run.execute()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--database", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--duration", type=float, help="arrival window in seconds (default: jobs / 2)")
    parser.add_argument("--settle", type=float, default=300.0, help="seconds jobs may take to finish afterwards")
    parser.add_argument("--boot-delay", type=float, default=0.5)
    parser.add_argument("--workdir", type=Path, help="keep corral's config, database and log here")
    parser.add_argument("--replicas", type=int, default=1, help="corral serve processes on one PostgreSQL")
    parser.add_argument("--rolling", action="store_true", help="SIGTERM each replica in turn instead of kill -9")
    parser.add_argument("--lease-time", type=float, help="corral's lease_time in seconds (default 15)")
    parser.add_argument(
        "--downtime", type=float, nargs=2, metavar=("MIN", "MAX"), help="seconds a killed corral stays down"
    )
    args = parser.parse_args()
    options = ChaosOptions(
        jobs=args.jobs,
        kills=args.kills,
        seed=args.seed,
        database=args.database,
        duration_s=args.duration,
        settle_s=args.settle,
        boot_delay_s=args.boot_delay,
        workdir=args.workdir,
        replicas=args.replicas,
        stop="term" if args.rolling else "kill",
        lease_time_s=args.lease_time,
        downtime_s=tuple(args.downtime) if args.downtime else None,
    )
    try:
        result = run_chaos(options, say=lambda text: print(text, file=sys.stderr, flush=True))
    except HarnessError as exc:
        print(f"chaos: harness error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    print(result.report())


if __name__ == "__main__":
    main()
