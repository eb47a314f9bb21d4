"""Where corral's engine spends its CPU, per job: `corral simulate` of a seeded trace, under cProfile.

The simulation runs the engine `corral serve` runs (passes, looks, intake, job upkeep) with nothing else on the
machine's clock, so its profile is the engine's own cost, free of the sandbox and of threads. Prints the CPU
per job, the functions that took the most time themselves, and the store's queries by their total time (each
`Store.run` is one transaction): the first place to look when a figure regresses.

    .venv/bin/python bench/engine_profile.py                      # one weekday of 2,600 jobs on two pools (~1 min)
    .venv/bin/python bench/engine_profile.py --hours 6 --start-hour 9 --top 40
    .venv/bin/python bench/engine_profile.py --days 4 --output engine.prof   # then: python -m pstats engine.prof
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import time
from pathlib import Path
from typing import cast

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from sqlalchemy.engine import Engine

from bench.counting import StatementCounter
from bench.traces import add_trace_arguments, trace_jobs, trace_seconds
from corral.config import CorralConfig, parse_config
from corral.simulate.run import simulate
from corral.simulate.trace import Trace, read_trace

POOLS = {
    "small": {"labels": ["self-hosted", "linux", "small"], "flavor": "m1.small", "min_idle": 2, "max_runners": 60},
    "large": {"labels": ["self-hosted", "linux", "large"], "flavor": "m1.large", "min_idle": 1, "max_runners": 30},
}
"""The two pools `bench/traces.py`'s default shape sends its jobs to (70% and 30%)."""


def bench_config() -> CorralConfig:
    pools = {name: {"scope": {"org": "octo-org"}, "image": "ubuntu", **spec} for name, spec in POOLS.items()}
    return parse_config({"github": {"token": "ghp_" + "x" * 36}, "default_pool": "small", "pools": pools})


def bench_trace(args: argparse.Namespace) -> Trace:
    """The trace `bench/traces.py` would write for these options, read as `corral simulate` reads a file."""
    lines = "".join(json.dumps(job) + "\n" for job in trace_jobs(args))
    return read_trace(io.BytesIO(lines.encode()))


def store_queries(stats: pstats.Stats) -> list[tuple[float, int, str]]:
    """The store's queries (what `Store._transaction` called), by total time: (seconds, calls, name)."""
    raw = stats.stats  # type: ignore[attr-defined]  # pstats keeps its table untyped
    transaction = next((key for key in raw if key[2] == "_transaction" and key[0].endswith("database.py")), None)
    found = []
    for function, (_, _, _, _, callers) in raw.items():
        if transaction in callers and f"{Path('corral') / 'store'}" in function[0]:  # not SQLAlchemy's own
            _, calls, _, total = callers[transaction]
            found.append((total, calls, f"{Path(function[0]).stem}.{function[2]}"))
    return sorted(found, reverse=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_trace_arguments(parser, jobs_per_day=2600.0)
    parser.add_argument("--top", type=int, default=25, help="functions and queries shown")
    parser.add_argument("--output", type=Path, help="also write the raw profile here (for pstats or snakeviz)")
    args = parser.parse_args()
    seconds = trace_seconds(args)
    trace = bench_trace(args)
    config = bench_config()

    profile = cProfile.Profile()  # the wall clock: a CPU clock costs a system call a reading
    statements = StatementCounter(cast(Engine, Engine))  # every engine: the simulation's store is made inside
    began = time.process_time()
    with statements.counting():
        profile.enable()
        outcome = simulate(config, trace)
        profile.disable()
    cpu = time.process_time() - began
    if args.output is not None:
        profile.dump_stats(args.output)

    served = sum(1 for job in outcome.ledger.jobs if job.started_at is not None)
    print(f"{len(trace.jobs)} jobs ({served} served) over {seconds / 3600:.1f} simulated hours")
    print(f"CPU under the profiler: {cpu:.1f} s, {cpu / max(len(trace.jobs), 1) * 1000:.1f} ms a job")
    print("(the profiler roughly doubles the cost: time `corral simulate` on the same trace for the real figure)")
    jobs = max(len(trace.jobs), 1)
    kinds = ", ".join(f"{kind} {count / jobs:.2f}" for kind, count in statements.kinds.most_common(8))
    print(f"SQL statements: {statements.total / jobs:.2f} a job ({kinds}, ...)")
    stats = pstats.Stats(profile)
    out = io.StringIO()
    stats.stream = out  # type: ignore[attr-defined]  # where print_stats writes
    stats.sort_stats("tottime").print_stats(args.top)
    table = out.getvalue()
    print("\nthe functions that took the most time themselves:")
    print(table[table.index("   ncalls") :].rstrip())
    print(f"\nthe store's queries, by total time ({args.top} at most):")
    for total, calls, name in store_queries(stats)[: args.top]:
        print(f"{total:9.2f} s {calls:9d} calls  {total / calls * 1e6:8.0f} us each  {name}")


if __name__ == "__main__":
    main()
