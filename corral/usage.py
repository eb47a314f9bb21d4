"""Usage accounting: runner-seconds by pool, repository and workflow, split into boot, idle and busy.

Computed from the runner history corral keeps anyway (every move of every runner, with its time), so the
figures agree with that history by construction and cost nothing on the hot path. Pure: `store.usage`
reads the rows.

- A runner's **boot** is its time from the intent (`pending`) until it came online or ended (`pending`,
  `creating`, `booting`); **idle** its time `idle`; **busy** its time `busy`. What follows its job
  (`finished`, `failed`, `deleting`) is teardown: a few seconds corral spends deleting, not counted here.
- A runner is accounted to the **repository and workflow** of the job it ran, else of the job it was
  started for; a warm runner that never ran a job has none (shown as empty).
- Only the part of each interval inside `[since, until)` counts; a runner still in a phase counts up to
  `until` (or now).
- **Jobs** are the jobs that started in the window, grouped the same way (by the pool they matched), with
  their mean wait from queued to started.
- **Lost** are the jobs whose runner's server died under them in the window (corral saw it), and **re-runs**
  those corral asked GitHub to run again in the window (`rerun_lost_jobs`), grouped the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from corral.model import RunnerState

Dimension = Literal["pool", "repository", "workflow"]
DIMENSIONS: tuple[Dimension, ...] = ("pool", "repository", "workflow")
PHASES: dict[RunnerState, str] = {
    RunnerState.PENDING: "boot",
    RunnerState.CREATING: "boot",
    RunnerState.BOOTING: "boot",
    RunnerState.IDLE: "idle",
    RunnerState.BUSY: "busy",
}
"""Which phase each state's time counts towards; states not listed are teardown."""


@dataclass(frozen=True)
class RunnerHistory:
    """One runner's moves, oldest first: (state entered, when)."""

    pool: str
    repository: str | None
    workflow: str | None
    moves: Sequence[tuple[RunnerState, datetime]]


@dataclass(frozen=True)
class StartedJob:
    pool: str | None
    repository: str
    workflow: str | None
    queued_at: datetime | None
    started_at: datetime


@dataclass(frozen=True)
class LostJob:
    """A job lost with its runner's server: when corral saw it, and when it re-ran it (None: it did not)."""

    pool: str | None
    repository: str
    workflow: str | None
    lost_at: datetime
    rerun_at: datetime | None


@dataclass
class UsageRow:
    key: dict[str, str]
    boot_s: float = 0.0
    idle_s: float = 0.0
    busy_s: float = 0.0
    runners: int = 0
    """Runners with any time in the window."""
    jobs: int = 0
    """Jobs that started in the window."""
    lost: int = 0
    """Jobs lost with their runner's server in the window."""
    reruns: int = 0
    """Jobs corral re-ran in the window (`rerun_lost_jobs`)."""
    queue_s_total: float = field(default=0.0, repr=False)
    queued_jobs: int = field(default=0, repr=False)

    @property
    def runner_s(self) -> float:
        return self.boot_s + self.idle_s + self.busy_s

    @property
    def mean_queue_s(self) -> float | None:
        return self.queue_s_total / self.queued_jobs if self.queued_jobs else None


def phase_seconds(moves: Sequence[tuple[RunnerState, datetime]], since: datetime, until: datetime) -> dict[str, float]:
    """Seconds in each phase within `[since, until)`; the last state lasts until `until`."""
    spent = {"boot": 0.0, "idle": 0.0, "busy": 0.0}
    for index, (state, entered) in enumerate(moves):
        left = moves[index + 1][1] if index + 1 < len(moves) else until
        phase = PHASES.get(state)
        if phase is None:
            continue
        start, end = max(entered, since), min(left, until)
        if end > start:
            spent[phase] += (end - start).total_seconds()
    return spent


def account(
    runners: Iterable[RunnerHistory],
    jobs: Iterable[StartedJob],
    *,
    since: datetime,
    until: datetime,
    group_by: Sequence[Dimension],
    lost: Iterable[LostJob] = (),
) -> list[UsageRow]:
    """Usage in `[since, until)`, one row per group, sorted by group."""
    rows: dict[tuple[str, ...], UsageRow] = {}

    def row_for(pool: str | None, repository: str | None, workflow: str | None) -> UsageRow:
        values = {"pool": pool or "", "repository": repository or "", "workflow": workflow or ""}
        key = tuple(values[dimension] for dimension in group_by)
        if key not in rows:
            rows[key] = UsageRow({dimension: values[dimension] for dimension in group_by})
        return rows[key]

    for runner in runners:
        spent = phase_seconds(runner.moves, since, until)
        if not any(spent.values()):
            continue
        row = row_for(runner.pool, runner.repository, runner.workflow)
        row.boot_s += spent["boot"]
        row.idle_s += spent["idle"]
        row.busy_s += spent["busy"]
        row.runners += 1
    for job in jobs:
        if not since <= job.started_at < until:
            continue
        row = row_for(job.pool, job.repository, job.workflow)
        row.jobs += 1
        if job.queued_at is not None:
            row.queue_s_total += max((job.started_at - job.queued_at).total_seconds(), 0.0)
            row.queued_jobs += 1
    for gone in lost:
        in_window = since <= gone.lost_at < until
        rerun = gone.rerun_at is not None and since <= gone.rerun_at < until
        if in_window or rerun:
            row = row_for(gone.pool, gone.repository, gone.workflow)
            row.lost += in_window
            row.reruns += rerun
    return [rows[key] for key in sorted(rows)]
