"""`corral usage`: runner-seconds (boot, idle, busy), jobs and mean queue time, jobs lost with their server and
re-run, per pool, repository or workflow over a window, as a table, JSON or CSV (for a spreadsheet or a
chargeback script).

`--since`/`--until` take an ISO 8601 time or a duration back from now (`24h`, `7d`); the API does the
accounting (`GET /api/v1/usage`, see `corral.usage`).
"""

from __future__ import annotations

import argparse
import csv
import io

from corral.commands.client import common_options, request
from corral.commands.moments import moment
from corral.commands.output import emit

NUMBERS = ["boot_s", "idle_s", "busy_s", "runner_s", "runners", "jobs", "mean_queue_s", "lost", "reruns"]


def add_parser(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    usage = subcommands.add_parser("usage", help="runner-seconds and jobs per pool, repository or workflow (API)")
    common_options(usage)
    usage.add_argument("--since", help="ISO 8601 time, or a duration back from now: 24h, 7d (default: 24h)")
    usage.add_argument("--until", help="ISO 8601 time, or a duration back from now (default: now)")
    usage.add_argument("--group-by", default="pool", help="comma-separated: pool, repository, workflow (default: pool)")
    usage.add_argument("--csv", action="store_true", help="print CSV with a header row")
    usage.set_defaults(handler=_usage)


def _usage(args: argparse.Namespace) -> int:
    params = {"group_by": args.group_by}
    if args.since:
        params["since"] = moment(args.since, "--since")
    if args.until:
        params["until"] = moment(args.until, "--until")
    answer = request(args, "GET", "/api/v1/usage", params=params)
    columns = [*answer["group_by"], *NUMBERS]
    if args.json:
        print(emit(answer, [], True))
    elif args.csv:
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        writer.writerows(answer["rows"])
        print(out.getvalue(), end="")
    else:
        print(f"from {answer['since']} to {answer['until']}")
        print(emit(answer["rows"], columns, False))
    return 0
