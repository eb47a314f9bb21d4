"""The `corral` command."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import socket
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from corral import __version__
from corral.commands import client, database, tokens, usage, why
from corral.commands import init as init_command
from corral.commands import simulate as simulate_command
from corral.commands import trace as trace_command

SANDBOX_MISSING = 2
"""The exit status of `corral sandbox` and `corral demo` when corral-sandbox is not installed."""


def _sandbox_missing(command: str) -> bool:
    """Whether corral_sandbox cannot be imported, saying so and how to get it.

    The sandbox and the demo are the corral-sandbox distribution, not corral's runtime wheel: a production install
    has the commands (they are part of corral's interface) but not what they run.
    """
    if importlib.util.find_spec("corral_sandbox") is not None:
        return False
    print(
        f"corral {command}: the sandbox is not installed; `corral {command}` needs the corral-sandbox distribution "
        f"of the same version as corral ({__version__}). From a checkout of corral: `bash scripts/install.sh` "
        "(a development venv with both), or `pip install ./sandbox` into this environment.",
        file=sys.stderr,
    )
    return True


def _add_sandbox_parser(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subcommands.add_parser(
        "sandbox",
        help="run the loopback OpenStack + GitHub sandbox",
        description=(
            "Run the sandbox: a loopback OpenStack (Keystone, Nova, Glance, Neutron, Cinder) and GitHub "
            "(REST, App auth, runners, jobs, webhooks) for tests, demos and benchmarks. Prints one JSON "
            "line with URLs and credentials, then serves until interrupted. Needs the corral-sandbox "
            f"distribution (exits {SANDBOX_MISSING} without it)."
        ),
    )
    parser.add_argument("--webhook-url", help="where GitHub's webhook deliveries go (default: none)")
    parser.add_argument(
        "--boot-delay", type=float, default=1.0, metavar="SECONDS", help="BUILD -> ACTIVE time (default 1)"
    )
    parser.add_argument("--host", default="127.0.0.1", help="loopback address to listen on")
    parser.add_argument("--openstack-port", type=int, default=0, help="default: a free port")
    parser.add_argument("--github-port", type=int, default=0, help="default: a free port")
    parser.add_argument("--workdir", type=Path, help="where clouds.yaml and the App key go (default: a temp dir)")
    parser.add_argument("--seed", type=int, default=0, help="seed for injected faults")
    parser.set_defaults(handler=_run_sandbox)


def _run_sandbox(args: argparse.Namespace) -> int:
    if _sandbox_missing("sandbox"):
        return SANDBOX_MISSING
    from corral_sandbox.server import Sandbox
    from corral_sandbox.world import Timings

    if args.boot_delay < 0:
        print("corral sandbox: --boot-delay must not be negative", file=sys.stderr)
        return 2
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    sandbox = Sandbox(
        host=args.host,
        openstack_port=args.openstack_port,
        github_port=args.github_port,
        workdir=args.workdir,
        timings=Timings(boot_delay=args.boot_delay),
        webhook_url=args.webhook_url,
        seed=args.seed,
    )
    try:
        info = sandbox.start()
        print(json.dumps(info.as_dict()), flush=True)
        stop.wait()
    finally:
        sandbox.stop()
    return 0


def _add_demo_parser(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subcommands.add_parser(
        "demo",
        help="run corral against the sandbox with a live job trace, then check for leaks",
        description=(
            "Start the sandbox and corral (SQLite, three pools) in this process, feed it jobs, show progress "
            "and the dashboard URL, then drain and report jobs served, waits and leaks. Exits 1 if anything "
            "was left behind in the cloud or on GitHub. Needs the corral-sandbox distribution (exits "
            f"{SANDBOX_MISSING} without it)."
        ),
    )
    parser.add_argument(
        "--duration",
        type=float,
        metavar="SECONDS",
        help="submit jobs for this long, then finish, drain and report (default: until Ctrl-C)",
    )
    parser.add_argument("--jobs-per-minute", type=float, default=40.0, metavar="N", help="mean arrivals (default 40)")
    parser.add_argument("--port", type=int, default=8080, help="API and dashboard port on 127.0.0.1 (0: any free)")
    parser.set_defaults(handler=_run_demo)


def _run_demo(args: argparse.Namespace) -> int:
    if _sandbox_missing("demo"):
        return SANDBOX_MISSING
    from corral_sandbox.demo import DemoOptions, run_demo

    if args.duration is not None and args.duration <= 0:
        print("corral demo: --duration must be positive", file=sys.stderr)
        return 2
    if args.jobs_per_minute <= 0:
        print("corral demo: --jobs-per-minute must be positive", file=sys.stderr)
        return 2
    return run_demo(DemoOptions(duration_s=args.duration, jobs_per_minute=args.jobs_per_minute, port=args.port))


def _report_problems(source: Path | str, problems: list[str]) -> int:
    """Every configuration problem on stderr, one per line, under where they are (the file, or the
    environment); the exit code for a bad configuration."""
    print(f"{source}: {len(problems)} problem(s)", file=sys.stderr)
    for problem in problems:
        print(f"  - {problem}", file=sys.stderr)
    return 1


def _add_config_parser(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subcommands.add_parser("config", help="work with configuration files")
    actions = parser.add_subparsers(title="actions", metavar="ACTION", required=True)
    check = actions.add_parser("check", help="validate a config file and list every problem")
    check.add_argument("file", type=Path)
    check.set_defaults(handler=_check_config)


def _check_config(args: argparse.Namespace) -> int:
    from corral.config import ConfigError, load_config

    try:
        config = load_config(args.file)
    except ConfigError as exc:
        return _report_problems(args.file, exc.problems)
    print(f"{args.file}: ok ({len(config.pools)} pools, default {config.default_pool})")
    return 0


def _add_doctor_parser(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subcommands.add_parser(
        "doctor",
        help="check a config against the cloud, GitHub and the database, item by item",
        description=(
            "Check everything a config names: Keystone and the catalog; each pool's image, flavor, networks, "
            "security groups, key pair, availability zone, volume types and quota headroom; the GitHub App's "
            "key, the clock, each scope's installation and permissions, the webhook and its recent deliveries "
            "(or a token's scopes); the database and its schema. Prints a fix for every failure. Exits 0 when "
            "nothing failed (warnings allowed), 1 when something did, 2 when the file is not a valid config."
        ),
    )
    parser.add_argument("--config", type=Path, required=True, help="corral.yaml")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    parser.set_defaults(handler=_doctor)


def _doctor(args: argparse.Namespace) -> int:
    from corral.doctor import run_doctor

    return run_doctor(args.config, as_json=args.json)


def _add_serve_parser(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subcommands.add_parser("serve", help="run corral: the engine and its API")
    parser.add_argument("--config", type=Path, required=True, help="corral.yaml")
    parser.add_argument("--listen", default="127.0.0.1:8080", help="HOST:PORT for the API (default 127.0.0.1:8080)")
    parser.add_argument(
        "--log-format", choices=["console", "json"], default="console", help="log lines as text or JSON"
    )
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.add_argument(
        "--replica-name",
        default=os.environ.get("CORRAL_REPLICA_NAME"),
        help="this replica's name on a shared PostgreSQL (default HOST:PORT; CORRAL_REPLICA_NAME): keep it "
        "across restarts, unique per live replica",
    )
    parser.set_defaults(handler=_serve)


def _serve(args: argparse.Namespace) -> int:
    import uvloop

    from corral import gc_tuning
    from corral.config import ConfigError
    from corral.logs import configure_logging
    from corral.serve import serve
    from corral.service import Service
    from corral.store import AnotherCorralServing, SchemaTooNew

    host, _, port = args.listen.rpartition(":")
    if not host or not port.isdigit():
        print(f"corral serve: --listen {args.listen!r} is not HOST:PORT", file=sys.stderr)
        return 2
    configure_logging(args.log_format, args.log_level)
    try:
        replica = args.replica_name or f"{socket.gethostname()}:{port}"
        service = Service.from_file(args.config, replica=replica)
    except ConfigError as exc:
        return _report_problems(exc.source or args.config, exc.problems)
    except (AnotherCorralServing, SchemaTooNew) as exc:
        print(f"corral serve: {exc}", file=sys.stderr)
        return 2
    gc_tuning.tune()
    uvloop.run(serve(service, host, int(port)))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="corral", description="Ephemeral self-hosted GitHub Actions runners on OpenStack."
    )
    parser.add_argument("--version", action="version", version=f"corral {__version__}")
    subcommands = parser.add_subparsers(title="commands", metavar="COMMAND")
    _add_serve_parser(subcommands)
    _add_sandbox_parser(subcommands)
    _add_demo_parser(subcommands)
    _add_config_parser(subcommands)
    _add_doctor_parser(subcommands)
    init_command.add_parser(subcommands)
    database.add_migrate_parser(subcommands)
    tokens.add_parser(subcommands)
    client.add_parsers(subcommands)
    why.add_parser(subcommands)
    usage.add_parser(subcommands)
    simulate_command.add_parser(subcommands)
    trace_command.add_parser(subcommands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "handler"):
        parser.print_help()
        return 2
    result: int = args.handler(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
