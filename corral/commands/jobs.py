"""`corral jobs export`: the store's job history as a job trace (`corral.simulate.trace`), the input of
`corral simulate`.

It reads the database itself (`--config` or `--database-url`, as `corral token` does), not the API: the API
answers the last 1,000 jobs, a trace wants every job of the window, and a stopped corral's history is as good.
Both kinds of job are written: webhook jobs and scale-set jobs, oldest first.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from corral.commands.database import add_database_arguments, open_store
from corral.commands.moments import since_when
from corral.commands.trace import write_trace
from corral.simulate.trace import export
from corral.store import jobs, scaleset_jobs


def add_export_parser(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`export` under `corral jobs`."""
    parser = actions.add_parser(
        "export",
        help="write the store's jobs as a job trace for corral simulate (database)",
        description=(
            "Write every job queued since --since (webhook and scale-set jobs) as JSON Lines, one job a line, "
            "oldest first: at (when GitHub queued it, RFC 3339), repo, labels, duration (completed minus "
            "started) and workflow_name. Jobs not completed, or never started, are left out and counted on "
            "stderr. Reads the database named by --config or --database-url."
        ),
    )
    add_database_arguments(parser)
    parser.add_argument(
        "--since", default="7d", help="ISO 8601 time, or a duration back from now: 24h, 7d (default: 7d)"
    )
    parser.add_argument("--format", choices=["jsonl"], default="jsonl", help="JSON Lines (the only format so far)")
    parser.add_argument("--output", type=Path, help="write the trace to this file (default: stdout)")
    parser.set_defaults(handler=_export)


def _export(args: argparse.Namespace) -> int:
    since = since_when(args.since, "--since", "jobs export")
    store = open_store(args, "jobs export", migrate=False)  # it only reads: a production schema is not its to upgrade
    if store is None:
        return 2
    try:
        history = [
            *store.run_blocking(jobs.queued_since, since),
            *store.run_blocking(scaleset_jobs.queued_since, since),
        ]
    finally:
        store.close()
    result = export(history)
    if not write_trace(result, args.output, "jobs export"):
        return 1
    reasons = [f"{result.not_run} not completed or never started"] if result.not_run else []
    reasons += [f"{result.unfit} the trace format refuses (no labels?)"] if result.unfit else []
    left_out = f"; left out {', '.join(reasons)}" if reasons else ""
    where = "" if args.output is None else f" to {args.output}"
    print(
        f"corral jobs export: {len(result.lines)} job(s) queued since {since.isoformat(timespec='seconds')}"
        f"{where}{left_out}",
        file=sys.stderr,
    )
    return 0
