"""`corral simulate`: replay a job trace against a config in virtual time, before anyone pays for it.

Reads a normal corral.yaml (its credentials, database and clouds are ignored: nothing is contacted) and a job
trace (`corral jobs export`, or any JSON Lines of the same shape), runs corral's engine on them in virtual
time (`corral.simulate.run`) and prints what each pool would do: jobs served, waits, runner-hours, peak
servers (`corral.simulate.report`).
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from corral.commands.database import open_store_at
from corral.config import ConfigError, CorralConfig, load_config, parse_duration
from corral.simulate.settings import BootTimes, Settings
from corral.store import runners

if TYPE_CHECKING:
    from corral.simulate.suggest import Goal

DEFAULT_BOOT = "60s"
MIN_BOOTS = 10
"""Measured boots a pool needs before its own distribution is replayed."""


def add_parser(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subcommands.add_parser(
        "simulate",
        help="replay a job trace against a config in virtual time: waits and runner-hours per pool",
        description=(
            "Run corral's engine (the same passes, planner, policies, schedules, quotas and placements) in "
            "virtual time against a simulated cloud and GitHub, replaying the jobs of --trace, and print per "
            "pool: jobs, jobs served, waits from queued to started (p50, p95, p99, max), runner-hours busy, "
            "idle and booting, and the peak number of servers. Credentials, database and clouds in the config "
            "are ignored: nothing is contacted. The same config, trace and seed print the same output."
        ),
    )
    parser.add_argument("--config", type=Path, required=True, help="the corral.yaml to simulate")
    parser.add_argument("--trace", type=Path, required=True, help="JSON Lines, one job a line (corral jobs export)")
    parser.add_argument("--seed", type=int, default=0, help="seed of boot times and boot failures (default 0)")
    parser.add_argument(
        "--boot-time",
        metavar="TIME | P50,P95",
        help=f"from a create to its runner online: fixed (90s), or a log-normal by two percentiles (45s,2m); "
        f"default: measured in --database-url's history, else {DEFAULT_BOOT}",
    )
    parser.add_argument(
        "--database-url",
        metavar="URL",
        help="a corral database whose recent runners' boots (per pool) the simulation replays; only read",
    )
    parser.add_argument(
        "--history", default="7d", metavar="DURATION", help="how far back --database-url's boots are read (7d)"
    )
    parser.add_argument(
        "--boot-failure-rate", type=float, default=0.0, metavar="R", help="share of servers that go to ERROR (0-1)"
    )
    parser.add_argument(
        "--measure-from",
        default="0s",
        metavar="DURATION",
        help="count only jobs queued (and runner time) from this long after the first job: earlier ones warm "
        "the engine up (default: from the start)",
    )
    parser.add_argument(
        "--drain",
        default="1h",
        metavar="DURATION",
        help="after the last job is queued, wait at most this long for jobs still queued or running (default 1h)",
    )
    parser.add_argument("--instances", type=int, metavar="N", help="each cloud's instance quota (default: unlimited)")
    parser.add_argument("--format", choices=["table", "json"], default="table", help="output format (default table)")
    parser.add_argument(
        "--html", type=Path, metavar="PATH", help="also write one self-contained page: timelines and wait histograms"
    )
    parser.add_argument(
        "--compare",
        type=Path,
        metavar="OTHER",
        help="also run the corral.yaml OTHER on the same trace and settings, and print both side by side with "
        "what changes, figure by figure and key by key (--html then writes OTHER's page beside the first, "
        "as NAME.compare.html)",
    )
    parser.add_argument(
        "--suggest",
        metavar="WAIT",
        help="instead of one run, find per pool the smallest fixed min_idle whose waits meet the goal (the "
        "--suggest-percentile of waits at or below WAIT, such as 30s) and simulate auto with that target, "
        "printing what each costs (about log2(max_runners) + 3 simulations)",
    )
    parser.add_argument(
        "--suggest-percentile",
        type=float,
        default=95.0,
        metavar="P",
        help="the percentile of waits --suggest's goal is for (default 95)",
    )
    parser.set_defaults(handler=_simulate)


def _simulate(args: argparse.Namespace) -> int:
    # Imported here: the engine and its virtual-time loop are for this command alone, not every CLI start-up.
    from corral.simulate.compare import Comparison, changed_keys
    from corral.simulate.html import render
    from corral.simulate.report import report
    from corral.simulate.run import SimulationRefused, simulate
    from corral.simulate.suggest import suggest
    from corral.simulate.trace import TraceError, load_trace

    try:
        settings = _settings(args)
        measure_from = _duration(args.measure_from, "--measure-from", zero=True)
        goal = _goal(args) if args.suggest is not None else None
    except ValueError as exc:
        print(f"corral simulate: {exc}", file=sys.stderr)
        return 2
    config = _load(args.config)
    other = _load(args.compare) if args.compare is not None else None
    if config is None or (args.compare is not None and other is None):
        return 2
    try:
        trace = load_trace(args.trace)
    except TraceError as exc:
        return _refused(f"{args.trace} is not a job trace", exc.problems)
    except OSError as exc:
        print(f"corral simulate: cannot read {args.trace} ({exc.strerror or exc})", file=sys.stderr)
        return 2
    if args.boot_time is None and args.database_url is not None:
        pools = list(config.pools) + [name for name in (other.pools if other else {}) if name not in config.pools]
        measured = _measured_boots(args.database_url, args.history, pools)
        if measured is None:
            return 2
        settings = replace(settings, boot=measured[0], boot_by_pool=measured[1])
    if goal is not None:
        try:
            suggestion = suggest(config, trace, settings, measure_from, goal)
        except SimulationRefused as exc:
            return _refused(f"{args.config} asks for what the simulation does not model", exc.problems)
        sys.stdout.write(suggestion.as_json() if args.format == "json" else suggestion.as_table())
        return 0
    runs = [(args.config, config)] + ([(args.compare, other)] if other is not None else [])
    outcomes = []
    for path, each in runs:
        try:
            outcomes.append(simulate(each, trace, settings))
        except SimulationRefused as exc:
            return _refused(f"{path} asks for what the simulation does not model", exc.problems)
    found = [report(outcome, measure_from) for outcome in outcomes]
    if other is not None:
        names = _names(args.config, args.compare)
        comparison = Comparison(names[0], names[1], found[0], found[1], changed_keys(config, other))
        sys.stdout.write(comparison.as_json() if args.format == "json" else comparison.as_table())
    else:
        sys.stdout.write(found[0].as_json() if args.format == "json" else found[0].as_table())
    if args.html is not None:
        pages = [args.html, args.html.with_name(f"{args.html.stem}.compare{args.html.suffix or '.html'}")]
        for page, outcome, figures in zip(pages, outcomes, found, strict=False):
            try:
                page.write_text(render(outcome, figures, measure_from))
            except OSError as exc:
                print(f"corral simulate: cannot write {page} ({exc.strerror or exc})", file=sys.stderr)
                return 1
    return 0


def _load(path: Path) -> CorralConfig | None:
    """The config at `path`, its credentials unread (nothing is contacted); None after saying what is wrong."""
    try:
        return load_config(path, credentials=False)
    except ConfigError as exc:
        _refused(f"{path} is not a valid config", exc.problems)
        return None


def _refused(heading: str, problems: list[str]) -> int:
    """Say what is wrong, a problem a line, and give the exit code of a bad input (2)."""
    print(f"corral simulate: {heading}:", file=sys.stderr)
    for problem in problems:
        print(f"  - {problem}", file=sys.stderr)
    return 2


def _names(base: Path, other: Path) -> tuple[str, str]:
    """How the two configs are headed in a comparison: their file names, or their paths when those are alike."""
    if base.name != other.name:
        return base.name, other.name
    return str(base), str(other)


def _goal(args: argparse.Namespace) -> Goal:
    from corral.simulate.suggest import Goal  # the engine with it: for this command alone

    if args.compare is not None or args.html is not None:
        raise ValueError(
            "--suggest runs many simulations and prints what each pool needs: leave out --compare and --html"
        )
    percentile = args.suggest_percentile
    if not (math.isfinite(percentile) and 0 < percentile <= 100):
        raise ValueError(f"--suggest-percentile {percentile:g}: give a percentile above 0 and up to 100, such as 95")
    return Goal(_duration(args.suggest, "--suggest", zero=True), percentile)


def _settings(args: argparse.Namespace) -> Settings:
    rate = args.boot_failure_rate
    if not (math.isfinite(rate) and 0 <= rate < 1):
        raise ValueError(f"--boot-failure-rate {rate:g}: give a share from 0 up to (not including) 1, such as 0.05")
    if args.instances is not None and args.instances < 0:
        raise ValueError(f"--instances {args.instances}: give the instance quota, 0 or more")
    return Settings(
        boot=_boot_times(args.boot_time or DEFAULT_BOOT),
        boot_failure_rate=rate,
        seed=args.seed,
        drain=_duration(args.drain, "--drain"),
        instances=args.instances,
    )


def _measured_boots(url: str, history: str, pools: list[str]) -> tuple[BootTimes, dict[str, BootTimes]] | None:
    """The boot times a store's recent runners took: per pool with at least `MIN_BOOTS` of them, and over all
    pools for the others (`DEFAULT_BOOT` when even those are too few); a pool's boots are timed by the jobs that
    waited for their runner when it has `MIN_BOOTS` of those. Says on stderr what it took."""
    try:
        window = _duration(history, "--history")
    except ValueError as exc:
        print(f"corral simulate: {exc}", file=sys.stderr)
        return None
    store = open_store_at(url, "simulate", migrate=False)
    if store is None:
        return None
    since = datetime.now(UTC) - timedelta(seconds=window)
    try:
        seen = store.run_blocking(runners.boot_seconds, since)
        waited = store.run_blocking(runners.waited_boot_seconds, since)
    finally:
        store.close()
    # A boot timed by the job that waited for it is exact; one timed to the pass that saw the runner online is
    # up to a look interval late. A pool's exact ones are taken when there are enough of them.
    exact = {pool for pool, samples in waited.items() if len(samples) >= MIN_BOOTS}
    boots = {**seen, **{pool: waited[pool] for pool in exact}}
    every = [seconds for samples in boots.values() for seconds in samples]
    overall = BootTimes.of(every) if len(every) >= MIN_BOOTS else BootTimes(parse_duration(DEFAULT_BOOT))
    by_pool = {pool: BootTimes.of(boots[pool]) for pool in pools if len(boots.get(pool, ())) >= MIN_BOOTS}
    for pool in pools:
        boot = by_pool.get(pool, overall)
        timed_by = "jobs that waited for their runner" if pool in exact else "runners"
        source = (
            f"{len(boots.get(pool, ()))} {timed_by} of the last {history}" if pool in by_pool else "too few runners"
        )
        print(f"corral simulate: pool {pool} boots p50 {boot.p50:g}s, p95 {boot.p95 or boot.p50:g}s ({source})",
              file=sys.stderr)  # fmt: skip
    return overall, by_pool


def _boot_times(text: str) -> BootTimes:
    parts = text.split(",")
    if len(parts) > 2:
        raise ValueError(f"--boot-time {text[:40]!r}: give one time (90s) or two percentiles, p50 and p95 (45s,2m)")
    p50 = _duration(parts[0].strip(), "--boot-time", zero=True)
    if len(parts) == 1:
        return BootTimes(p50)
    p95 = _duration(parts[1].strip(), "--boot-time's p95")
    if p95 < p50:
        raise ValueError(f"--boot-time {text[:40]!r}: the p95 ({parts[1].strip()}) is shorter than the p50")
    return BootTimes(p50, p95)


def _duration(text: str, option: str, *, zero: bool = False) -> float:
    """Seconds from `text` (30s, 10m, 72h, 7d); `zero` allows 0."""
    if zero and text.strip() in ("0", "0s"):
        return 0.0
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise ValueError(f"{option} {text[:40]!r}: {exc}") from None
