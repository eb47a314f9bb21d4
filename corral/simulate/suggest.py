"""`corral simulate --suggest 30s`: the warm runners each pool needs to meet a wait goal, and what they cost.

Two answers per pool, both simulated on the trace: the smallest fixed `min_idle` whose waits meet the goal
(the chosen percentile of queued-to-started waits at or below it), and `min_idle: {auto: ...}` with the goal
as its `target_wait`, each with the runner-hours it spends. The fixed number is found by bisection over
`0..max_runners`, all pools at once (in a simulation pools share nothing but the quota, which `--instances`
alone limits), so a search costs about `log2(max_runners) + 2` simulations, and auto one more.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from corral.config import CorralConfig, parse_config
from corral.percentiles import nearest_rank
from corral.simulate.report import PoolReport, Report, aligned, report
from corral.simulate.run import simulate
from corral.simulate.settings import Settings
from corral.simulate.trace import Trace


@dataclass(frozen=True)
class Goal:
    """The `percentile` of a pool's waits at or below `wait_s`."""

    wait_s: float
    percentile: float = 95.0

    def wait_of(self, pool: PoolReport) -> float:
        """The pool's wait at the goal's percentile (0 when it served no job: nobody waited)."""
        return nearest_rank(pool.waits, self.percentile) if pool.waits else 0.0

    def met(self, pool: PoolReport) -> bool:
        return pool.served == pool.jobs and self.wait_of(pool) <= self.wait_s


@dataclass(frozen=True)
class Option:
    """One way to keep a pool warm, as simulated."""

    min_idle: Any
    """As it would be written in the config: a number, or the `{auto: ...}` mapping."""
    wait_s: float
    """The pool's wait at the goal's percentile."""
    met: bool
    figures: PoolReport

    def as_dict(self) -> dict[str, object]:
        return {
            "min_idle": self.min_idle,
            "wait_s": round(self.wait_s, 2) + 0.0,
            "met": self.met,
            "runner_hours": self.figures.runner_time.hours(),
            "peak_servers": self.figures.peak_servers,
        }


@dataclass(frozen=True)
class Suggestion:
    goal: Goal
    fixed: dict[str, Option]
    """Per pool, the smallest fixed `min_idle` that met the goal, or `max_runners` when none did."""
    auto: dict[str, Option]
    simulations: int
    measured_s: float

    def as_dict(self) -> dict[str, object]:
        return {
            "goal": {"wait_s": self.goal.wait_s, "percentile": self.goal.percentile},
            "simulations": self.simulations,
            "measured_hours": round(self.measured_s / 3600.0, 3) + 0.0,
            "pools": {
                name: {"fixed": self.fixed[name].as_dict(), "auto": self.auto[name].as_dict()} for name in self.fixed
            },
        }

    def as_json(self) -> str:
        return json.dumps(self.as_dict(), indent=2) + "\n"

    def as_table(self) -> str:
        header = ("pool", "min_idle", f"wait p{self.goal.percentile:g}", "met", "idle h", "booting h", "busy h")
        rows: list[tuple[str, ...]] = [header]
        for name in self.fixed:
            for label, option in (("fixed", self.fixed[name]), ("auto", self.auto[name])):
                hours = option.figures.runner_time.hours()
                shown = f"{option.min_idle}" if label == "fixed" else "auto"
                rows.append(
                    (name if label == "fixed" else "", shown, f"{round(option.wait_s, 2) + 0.0:g}s",
                     "yes" if option.met else "no", f"{hours['idle']:g}", f"{hours['booting']:g}",
                     f"{hours['busy']:g}")
                )  # fmt: skip
        lines = aligned(rows, left=2)
        goal = f"p{self.goal.percentile:g} wait <= {self.goal.wait_s:g}s"
        lines.append(
            f"goal: {goal}; {round(self.measured_s / 3600.0, 3) + 0.0:g} h measured, {self.simulations} simulations"
        )
        lines.append(
            f"auto is min_idle: {{auto: {{target_wait: {self.goal.wait_s:g}s, percentile: {self.goal.percentile:g}}}}}"
        )
        return "\n".join(lines) + "\n"


def suggest(config: CorralConfig, trace: Trace, settings: Settings, measure_from: float, goal: Goal) -> Suggestion:
    """Simulate `auto` once and bisect each pool's fixed `min_idle` (see the module's docstring)."""
    names = list(config.pools)
    runs = 0

    def run(min_idles: dict[str, Any]) -> Report:
        nonlocal runs
        runs += 1
        return report(simulate(with_min_idle(config, min_idles), trace, settings), measure_from)

    auto_setting = {"auto": {"target_wait": goal.wait_s, "percentile": goal.percentile}}
    auto_report = run(dict.fromkeys(names, auto_setting))
    auto = {name: _option(auto_setting, auto_report.pools[name], goal) for name in names}

    # Bisection, every pool at once: `missed` is the largest count seen to miss the goal (-1: none yet), `met`
    # the smallest seen to meet it (None: none yet). The first round tries 0; a pool that misses at 0 tries its
    # maximum next (one that misses even there is settled: the goal is out of reach), then halves the gap.
    missed = dict.fromkeys(names, -1)
    met: dict[str, int | None] = dict.fromkeys(names)
    options: dict[str, dict[int, Option]] = {name: {} for name in names}
    trying = dict.fromkeys(names, 0)
    while trying:
        settled = {name: _answer(missed[name], met[name]) for name in names if name not in trying}
        figures = run({**settled, **trying})
        for name, count in trying.items():
            option = options[name][count] = _option(count, figures.pools[name], goal)
            if option.met:
                met[name] = count
            else:
                missed[name] = count
        trying = {}
        for name in names:
            maximum = config.pools[name].max_runners
            found = met[name]
            if found is None and missed[name] < maximum:
                trying[name] = maximum
            elif found is not None and found - missed[name] > 1:
                trying[name] = (missed[name] + found) // 2
    fixed = {name: options[name][_answer(missed[name], met[name])] for name in names}
    return Suggestion(goal, fixed, auto, runs, auto_report.measured_s)


def _answer(missed: int, met: int | None) -> int:
    """The smallest count known to meet the goal; the largest tried when none did."""
    return met if met is not None else missed


def _option(min_idle: Any, pool: PoolReport, goal: Goal) -> Option:
    return Option(min_idle, goal.wait_of(pool), goal.met(pool), pool)


def with_min_idle(config: CorralConfig, min_idles: dict[str, Any]) -> CorralConfig:
    """The config with each named pool's `min_idle` replaced (validated afresh: a schedule's peak, auto's max)."""
    document = config.model_dump(exclude_defaults=True)
    for name, min_idle in min_idles.items():
        document["pools"][name]["min_idle"] = min_idle
    return parse_config(document, credentials=False)
