"""Job traces with a working day's shape and matrix bursts, seeded: what `corral simulate` is measured on.

A busy organisation's CI: few jobs at night, a ramp from 08:00, a plateau through the working day, a tail into
the evening; weekends at a fifth of a weekday. Arrivals are a Poisson process whose rate follows that shape
(thinning), and a few times a working day a matrix queues `--burst` jobs in the same second. Durations are
log-normal (median 5 minutes, p95 20 minutes). Jobs alternate between the pools' labels by `--share`.

    .venv/bin/python bench/traces.py --days 4 --jobs-per-day 2250 --seed 1 > jobs.jsonl
    .venv/bin/python bench/traces.py --hours 6 --start-hour 9 --jobs-per-day 4800 > busy-morning.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

START = datetime(2026, 3, 2, tzinfo=UTC)
"""A Monday at midnight UTC."""
HOURLY_SHAPE = (
    0.04, 0.03, 0.03, 0.03, 0.03, 0.04, 0.08, 0.2,  # 00-08
    0.6, 1.0, 1.0, 1.0, 0.8, 0.9, 1.0, 1.0,  # 08-16
    0.9, 0.6, 0.35, 0.2, 0.12, 0.08, 0.06, 0.05,  # 16-24
)  # fmt: skip
"""A weekday's arrival rate by hour, relative to its peak."""
WEEKEND = 0.2
DURATION_P50_S, DURATION_P95_S = 300.0, 1200.0
Z95 = 1.6448536269514722


@dataclass(frozen=True)
class Shape:
    """What a trace looks like: how many jobs a weekday holds, its bursts, its pools' labels and shares."""

    jobs_per_day: float = 2250.0
    bursts_per_day: int = 3
    burst: int = 20
    labels: Sequence[tuple[str, ...]] = (("self-hosted", "linux", "small"), ("self-hosted", "linux", "large"))
    share: Sequence[float] = (0.7, 0.3)
    repos: int = 12


def rate_at(moment: datetime, shape: Shape) -> float:
    """Expected arrivals per second at `moment` (bursts aside)."""
    relative = HOURLY_SHAPE[moment.hour] * (WEEKEND if moment.weekday() >= 5 else 1.0)
    return shape.jobs_per_day * relative / (sum(HOURLY_SHAPE) * 3600.0)


def jobs(start: datetime, seconds: float, shape: Shape, seed: int) -> Iterator[dict[str, object]]:
    """The trace's jobs in order of arrival."""
    rng = random.Random(seed)
    peak = shape.jobs_per_day / (sum(HOURLY_SHAPE) * 3600.0)
    sigma = math.log(DURATION_P95_S / DURATION_P50_S) / Z95
    arrivals: list[tuple[float, int]] = []
    at = 0.0
    while True:
        at += rng.expovariate(peak)
        if at >= seconds:
            break
        if rng.random() * peak <= rate_at(start + timedelta(seconds=at), shape):
            arrivals.append((at, 1))
    midnight = start.replace(hour=0, minute=0, second=0, microsecond=0)
    while midnight < start + timedelta(seconds=seconds):
        if midnight.weekday() < 5:
            for _ in range(shape.bursts_per_day):
                when = (midnight - start).total_seconds() + rng.uniform(9 * 3600, 17 * 3600)
                if 0 <= when < seconds:
                    arrivals.append((when, shape.burst))
        midnight += timedelta(days=1)
    arrivals.sort()
    for at, count in arrivals:
        pool = rng.choices(range(len(shape.labels)), weights=shape.share)[0]
        repo = f"octo-org/app-{rng.randrange(shape.repos)}"
        for _ in range(count):
            yield {
                "at": (start + timedelta(seconds=round(at, 3))).isoformat().replace("+00:00", "Z"),
                "repo": repo,
                "labels": list(shape.labels[pool]),
                "duration": round(rng.lognormvariate(math.log(DURATION_P50_S), sigma), 1),
            }


def add_trace_arguments(parser: argparse.ArgumentParser, jobs_per_day: float = Shape.jobs_per_day) -> None:
    """The options that choose a trace: its length, start, weekday's jobs, bursts and seed (`trace_jobs`)."""
    length = parser.add_mutually_exclusive_group()
    length.add_argument("--days", type=float, default=None)
    length.add_argument("--hours", type=float, default=None)
    parser.add_argument("--start-hour", type=float, default=0.0, help="hour of the first day the trace starts")
    parser.add_argument("--jobs-per-day", type=float, default=jobs_per_day, help="a weekday's jobs")
    parser.add_argument("--bursts-per-day", type=int, default=Shape.bursts_per_day)
    parser.add_argument("--burst", type=int, default=Shape.burst, help="jobs a matrix burst queues at once")
    parser.add_argument("--seed", type=int, default=1)


def trace_seconds(args: argparse.Namespace) -> float:
    """How long the trace `add_trace_arguments`' options ask for lasts (a day when they say nothing)."""
    return args.hours * 3600.0 if args.hours is not None else (args.days or 1.0) * 86400.0


def trace_jobs(args: argparse.Namespace) -> Iterator[dict[str, object]]:
    """The jobs of the trace `add_trace_arguments`' options ask for."""
    shape = Shape(jobs_per_day=args.jobs_per_day, bursts_per_day=args.bursts_per_day, burst=args.burst)
    return jobs(START + timedelta(hours=args.start_hour), trace_seconds(args), shape, args.seed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_trace_arguments(parser)
    for job in trace_jobs(parser.parse_args()):
        sys.stdout.write(json.dumps(job) + "\n")


if __name__ == "__main__":
    main()
