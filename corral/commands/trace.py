"""`corral trace import`: a job trace from GitHub's Actions API (`corral.simulate.history`), for `corral simulate`
before corral is installed; and `write_trace`, how both trace commands write theirs.

Credentials: the `github` section of `--config` (a token or an App installed on the repositories), or a token
in `CORRAL_GITHUB_TOKEN` (or `GITHUB_TOKEN`) with `--github-url` for GitHub Enterprise Server. The token needs
to read Actions (`actions: read` for a fine-grained token or an App, `repo` for a classic token on private
repositories).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import SecretStr, ValidationError

from corral.commands.moments import since_when
from corral.config import ConfigError, GitHubConfig, load_config
from corral.model import REPO_PATTERN
from corral.simulate.trace import Export, export

if TYPE_CHECKING:
    from corral.github.client import GitHubClient
    from corral.simulate.history import History

TOKEN_VARIABLES = ("CORRAL_GITHUB_TOKEN", "GITHUB_TOKEN")
REPOSITORY = re.compile(REPO_PATTERN)


def add_parser(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subcommands.add_parser("trace", help="job traces for corral simulate")
    actions = parser.add_subparsers(title="actions", metavar="ACTION", required=True)
    imported = actions.add_parser(
        "import",
        help="write a job trace from GitHub's Actions API (workflow runs and their jobs)",
        description=(
            "Read the workflow runs created in the window in each --repo, and their jobs (every attempt), from "
            "GitHub's Actions API, and write the jobs that ran on a runner and completed as a job trace (JSON "
            "Lines) for corral simulate: at (the job's created_at), repo, labels, duration (completed minus "
            "started) and workflow_name. Jobs skipped, cancelled before a runner took them, or not completed "
            "are left out and counted on stderr."
        ),
    )
    imported.add_argument("--repo", action="append", required=True, metavar="OWNER/REPO", help="repeatable")
    imported.add_argument("--since", default="7d", help="ISO 8601 time, or a duration back from now (default 7d)")
    imported.add_argument("--until", help="ISO 8601 time, or a duration back from now (default: now)")
    imported.add_argument("--config", type=Path, help="take the GitHub credentials from this corral.yaml")
    imported.add_argument(
        "--github-url", default="https://api.github.com", help="the API's URL, without --config (GitHub Enterprise)"
    )
    imported.add_argument("--output", type=Path, help="write the trace to this file (default: stdout)")
    imported.set_defaults(handler=_import)


def _import(args: argparse.Namespace) -> int:
    bad = [repo for repo in args.repo if not REPOSITORY.fullmatch(repo)]
    if bad:
        print(
            f"corral trace import: --repo {bad[0][:80]!r}: write it as OWNER/REPO, such as octo-org/app",
            file=sys.stderr,
        )
        return 2
    since = since_when(args.since, "--since", "trace import")
    until = since_when(args.until, "--until", "trace import") if args.until else datetime.now(UTC)
    if until <= since:
        print(
            "corral trace import: --until is not after --since; give a window that ends after it starts",
            file=sys.stderr,
        )
        return 2
    # Imported here: GitHub's client is for this command alone, not every CLI start-up.
    from corral.github.client import GitHubError

    github = _github(args)
    if github is None:
        return 2
    try:
        history = asyncio.run(_read(github, args.repo, since, until))
    except GitHubError as exc:
        print(f"corral trace import: GitHub refused: {exc}", file=sys.stderr)
        return 1
    result = export(history.jobs)
    if not write_trace(result, args.output, "trace import"):
        return 1
    _say(history, result, args.output)
    return 0


async def _read(github: GitHubClient, repositories: list[str], since: datetime, until: datetime) -> History:
    from corral.simulate.history import read_history

    try:
        return await read_history(github, repositories, since, until)
    finally:
        await github.aclose()


def _github(args: argparse.Namespace) -> GitHubClient | None:
    """The client for the credentials given, or None having said what is missing."""
    from corral.github.client import GitHubClient

    if args.config is not None:
        try:
            return GitHubClient(load_config(args.config).github)
        except ConfigError as exc:
            print(f"corral trace import: {args.config} is not a valid config:", file=sys.stderr)
            for problem in exc.problems:
                print(f"  - {problem}", file=sys.stderr)
            return None
    token = next((os.environ[name] for name in TOKEN_VARIABLES if os.environ.get(name)), None)
    if token is None:
        print(
            "corral trace import: no credentials; give --config (a corral.yaml's github section) or a token in "
            "CORRAL_GITHUB_TOKEN that can read Actions",
            file=sys.stderr,
        )
        return None
    try:
        return GitHubClient(GitHubConfig(url=args.github_url, token=SecretStr(token)))
    except ValidationError:
        print(f"corral trace import: --github-url {args.github_url[:80]!r}: give an http(s) URL", file=sys.stderr)
        return None


def _say(history: History, result: Export, output: Path | None) -> None:
    left = history.not_run + result.unfit
    where = "" if output is None else f" to {output}"
    print(
        f"corral trace import: {len(result.lines)} job(s) of {history.runs} run(s){where}; left out {left} "
        "skipped, cancelled before a runner took them, or not completed",
        file=sys.stderr,
    )
    for minute in history.truncated:
        print(f"corral trace import: GitHub answered only 1,000 of the runs created {minute}", file=sys.stderr)


def _fail(message: str) -> None:
    print(f"corral trace import: {message}", file=sys.stderr)


def write_trace(result: Export, output: Path | None, command: str) -> bool:
    """Write the trace's lines to `output` (stdout when None); False, having said why, when it cannot."""
    text = "".join(f"{line}\n" for line in result.lines)
    if output is None:
        sys.stdout.write(text)
        return True
    try:
        output.write_text(text)
    except OSError as exc:
        print(
            f"corral {command}: cannot write {str(output)!r} ({exc.strerror or exc}); check the path", file=sys.stderr
        )
        return False
    return True
