"""Commands that talk to a running corral through its API: pools, runners, jobs, replicas, drain, reconcile,
reload.

URL and token come from `--url`/`--token` or `CORRAL_URL`/`CORRAL_TOKEN`; output is a table, or JSON
with `--json`.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import httpx

from corral.commands import jobs as jobs_command
from corral.commands.output import emit

DEFAULT_URL = "http://127.0.0.1:8080"
POOL_COLUMNS = ["name", "default", "ready", "desired", "queued_jobs", "starting", "idle", "busy", "failed", "reason"]
RUNNER_COLUMNS = ["id", "name", "pool", "state", "server_id", "github_runner_id", "state_changed_at", "failure_reason"]
REPLICA_COLUMNS = ["name", "version", "live", "last_seen", "pools", "answering"]
JOB_COLUMNS = ["id", "repository", "status", "pool", "labels", "runner_name", "queued_at", "started_at"]


def common_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", default=os.environ.get("CORRAL_URL", DEFAULT_URL), help="corral API (CORRAL_URL)")
    parser.add_argument("--token", default=os.environ.get("CORRAL_TOKEN"), help="API token (CORRAL_TOKEN)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def add_parsers(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    pools = subcommands.add_parser("pools", help="pools with their state (API)")
    common_options(pools)
    pools.set_defaults(handler=_pools)

    runners = subcommands.add_parser("runners", help="runners, by pool and state (API)")
    common_options(runners)
    runners.add_argument("--pool")
    runners.add_argument("--state", action="append", help="repeat for several states")
    runners.set_defaults(handler=_runners)

    jobs = subcommands.add_parser(
        "jobs", help="recent jobs (API); `jobs export`: the store's jobs as a trace for corral simulate"
    )
    common_options(jobs)
    jobs.add_argument("--status", choices=["queued", "in_progress", "completed"])
    jobs.set_defaults(handler=_jobs)
    jobs_command.add_export_parser(jobs.add_subparsers(title="actions", metavar="ACTION"))

    drain = subcommands.add_parser("drain", help="stop starting runners in a pool and retire its idle ones (API)")
    common_options(drain)
    drain.add_argument("pool")
    drain.add_argument("--undo", action="store_true", help="undrain: resume the pool")
    drain.set_defaults(handler=_drain)

    replicas = subcommands.add_parser("replicas", help="replicas on the database and the pools each holds (API)")
    common_options(replicas)
    replicas.set_defaults(handler=_replicas)

    reconcile = subcommands.add_parser("reconcile", help="ask for a reconcile pass now (API)")
    common_options(reconcile)
    reconcile.set_defaults(handler=_reconcile)

    reload = subcommands.add_parser(
        "reload", help="re-read the config file, on this replica and on every other one, each its own (API)"
    )
    common_options(reload)
    reload.set_defaults(handler=_reload)


def request(args: argparse.Namespace, method: str, path: str, *, answers: tuple[int, ...] = (), **kwargs: Any) -> Any:
    """The JSON answer; an HTTP error (other than the `answers` expected) ends the command with its detail."""
    headers = {"Authorization": f"Bearer {args.token}"} if args.token else {}
    try:
        response = httpx.request(method, f"{args.url.rstrip('/')}{path}", headers=headers, timeout=15, **kwargs)
    except httpx.TransportError as exc:
        raise SystemExit(f"corral: cannot reach {args.url}: {type(exc).__name__}") from None
    if response.status_code == 401:
        raise SystemExit("corral: the API wants a token: --token or CORRAL_TOKEN (create one: corral token create)")
    if response.status_code >= 400 and response.status_code not in answers:
        raise SystemExit(refusal(f"corral: {method} {path}: HTTP {response.status_code}", response))
    return response.json()


PARAMETER_PLACES = {"query": "query parameter", "path": "path parameter", "body": "body field", "header": "header"}
"""Where FastAPI found a refused value (the first item of its `loc`), as a person would say it."""


def refusal(headline: str, response: httpx.Response) -> str:
    """What an error answer says: its `detail` sentence on the headline, or, for a validation error (FastAPI's
    `{"detail": [{"loc": [...], "msg": ...}, ...]}`), one line per problem naming the field."""
    detail = _detail(response)
    if isinstance(detail, list) and detail and all(isinstance(item, dict) for item in detail):
        return "\n".join([f"{headline}: {len(detail)} problem(s)", *(f"  - {problem_line(item)}" for item in detail)])
    return f"{headline}: {detail if isinstance(detail, str) and detail else response.text[:200]}"


def _detail(response: httpx.Response) -> object:
    """The answer's `detail`; None when the answer is not a JSON object with one."""
    if "json" not in response.headers.get("content-type", ""):
        return None
    try:
        body = response.json()
    except ValueError:
        return None
    return body.get("detail") if isinstance(body, dict) else None


def problem_line(item: dict[str, Any]) -> str:
    """`query parameter state[0]: Input should be 'starting', ...`: where, which field, what is wrong; never
    the refused value itself (`input`), which need not be printable, nor short."""
    location = list(item.get("loc") or [])
    place = PARAMETER_PLACES.get(str(location[0]), str(location[0])) if location else ""
    field = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in location[1:]).lstrip(".")
    where = " ".join(word for word in (place, field) if word) or "request"
    return f"{where}: {item.get('msg', 'refused')}"


def _print(args: argparse.Namespace, data: Any, columns: list[str]) -> int:
    print(emit(data, columns, args.json))
    return 0


def _pools(args: argparse.Namespace) -> int:
    return _print(args, request(args, "GET", "/api/v1/pools"), POOL_COLUMNS)


def _runners(args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"state": args.state} if args.state else {}
    if args.pool:
        params["pool"] = args.pool
    return _print(args, request(args, "GET", "/api/v1/runners", params=params), RUNNER_COLUMNS)


def _jobs(args: argparse.Namespace) -> int:
    params = {"status": args.status} if args.status else {}
    rows = request(args, "GET", "/api/v1/jobs", params=params)
    if not args.json:
        for row in rows:
            row["labels"] = ",".join(row["labels"])
    return _print(args, rows, JOB_COLUMNS)


def _replicas(args: argparse.Namespace) -> int:
    rows = request(args, "GET", "/api/v1/replicas")
    if not args.json:
        for row in rows:
            row["pools"] = ",".join(row["pools"])
    return _print(args, rows, REPLICA_COLUMNS)


def _drain(args: argparse.Namespace) -> int:
    action = "undrain" if args.undo else "drain"
    return _print(args, request(args, "POST", f"/api/v1/pools/{args.pool}/{action}"), POOL_COLUMNS)


def _reconcile(args: argparse.Namespace) -> int:
    request(args, "POST", "/api/v1/reconcile")
    print("reconcile requested", file=sys.stderr if args.json else sys.stdout)
    return 0


def _reload(args: argparse.Namespace) -> int:
    result = request(args, "POST", "/api/v1/reload", answers=(422,))
    if args.json:
        print(emit(result, [], True))
    else:
        print(
            f"this replica: {'reloaded, generation ' + str(result['generation']) if result['reloaded'] else 'refused'}"
        )
        for problem in result["problems"]:
            print(f"  {problem}")
        for replica, outcome in result.get("replicas", {}).items():
            print(f"{replica}: {outcome}")
    return 0 if result["reloaded"] and all(v == "reloaded" for v in result.get("replicas", {}).values()) else 1
