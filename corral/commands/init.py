"""`corral init`: write a starter corral.yaml from what the cloud and the GitHub App hold."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DESCRIPTION = (
    "Write a starter corral.yaml: lists the cloud's images, flavors, networks, security groups, key pairs and "
    "availability zones and the GitHub App's installations, picks what is unambiguous, asks the rest (a "
    "numbered menu on a terminal; with --non-interactive or no terminal, an error naming the flag to pass), "
    "writes secrets only as *_file references, validates the file and runs `corral doctor` on it."
)


def _labels(text: str) -> list[str]:
    return [label.strip() for label in text.split(",")]


def add_parser(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subcommands.add_parser(
        "init", help="write a starter corral.yaml from the cloud and GitHub", description=DESCRIPTION
    )
    parser.add_argument("--output", type=Path, default=Path("corral.yaml"), help="file to write (default corral.yaml)")
    parser.add_argument("--force", action="store_true", help="replace --output if it exists")
    parser.add_argument("--non-interactive", action="store_true", help="never ask: fail naming the flag instead")
    parser.add_argument("--no-check", action="store_true", help="do not run `corral doctor` on the written file")
    cloud = parser.add_argument_group("cloud (openstacksdk: clouds.yaml or OS_* variables)")
    cloud.add_argument("--cloud", help="the clouds.yaml entry (default: OS_CLOUD, OS_* or the only entry)")
    cloud.add_argument("--region", help="region name, if the cloud has several")
    cloud.add_argument("--image", help="image name or id")
    cloud.add_argument("--flavor", help="flavor name or id")
    cloud.add_argument("--network", action="append", default=[], help="network name or id (repeat for several)")
    cloud.add_argument("--security-group", action="append", default=[], help="security group (repeatable)")
    cloud.add_argument("--key-name", help="key pair to put on runners (default: none)")
    cloud.add_argument("--availability-zone", help="availability zone (default: Nova chooses)")
    github = parser.add_argument_group("GitHub")
    github.add_argument("--github-url", default="https://api.github.com", help="API root (GHES: https://HOST/api/v3)")
    github.add_argument("--app-id", type=int, help="the GitHub App's id")
    github.add_argument("--private-key-file", type=Path, help="the App's private key (.pem)")
    github.add_argument("--token-file", type=Path, help="a file holding a personal access token (instead of an App)")
    github.add_argument("--scope", help="org:NAME, repo:OWNER/NAME or enterprise:SLUG")
    github.add_argument(
        "--webhook-secret-file", type=Path, help="file holding the webhook secret (default: generate webhook.secret)"
    )
    pool = parser.add_argument_group("the pool")
    pool.add_argument("--pool", default="runners", help="pool name (default runners)")
    pool.add_argument("--labels", type=_labels, default=["corral"], help="comma-separated labels (default corral)")
    pool.add_argument("--min-idle", type=int, default=0, help="warm runners kept idle (default 0)")
    pool.add_argument("--max-runners", type=int, default=10, help="most servers at once (default 10)")
    pool.add_argument("--database-url", help="default: SQLite corral.db beside --output")
    parser.set_defaults(handler=_init)


def _init(args: argparse.Namespace) -> int:
    from corral.init import InitError, InitOptions, run_init
    from corral.init.prompt import Prompter

    options = InitOptions(
        output=args.output,
        force=args.force,
        check=not args.no_check,
        cloud=args.cloud,
        region=args.region,
        image=args.image,
        flavor=args.flavor,
        networks=args.network,
        security_groups=args.security_group,
        key_name=args.key_name,
        availability_zone=args.availability_zone,
        github_url=args.github_url,
        app_id=args.app_id,
        private_key_file=args.private_key_file,
        token_file=args.token_file,
        scope=args.scope,
        webhook_secret_file=args.webhook_secret_file,
        pool=args.pool,
        labels=args.labels,
        min_idle=args.min_idle,
        max_runners=args.max_runners,
        database_url=args.database_url,
    )
    interactive = not args.non_interactive and sys.stdin.isatty()
    prompter = Prompter(interactive=interactive, stdin=sys.stdin, stdout=sys.stdout)
    try:
        return run_init(options, prompter, sys.stdout)
    except InitError as exc:
        print(f"corral init: {exc}", file=sys.stderr)
        return 1
