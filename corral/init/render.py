"""The starter corral.yaml as text: the values init chose, and comments on the keys a newcomer must revisit.

Written by hand rather than dumped, because the comments are half of its worth; every value still goes
through the YAML emitter (`_flow`), so a name with a colon or a leading `*` cannot change the document's
meaning. Secrets appear only as `*_file` paths.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from corral.config import ScopeConfig

HEADER = """\
# corral.yaml, written by `corral init`. Every key is explained in docs/configuration.md;
# `corral config check` validates the file and `corral doctor` checks it against the cloud and GitHub.
# No secret is in this file: each *_file key names a file (readable by its owner only) holding one.
"""


@dataclass(frozen=True)
class StarterConfig:
    github_url: str
    app_id: int | None
    private_key_file: str | None
    token_file: str | None
    webhook_secret_file: str
    cloud_name: str | None
    region: str | None
    database_url: str
    pool: str
    scope: ScopeConfig
    labels: list[str]
    image: str
    flavor: str
    networks: list[str]
    security_groups: list[str]
    key_name: str | None
    availability_zone: str | None
    min_idle: int
    max_runners: int


def _flow(value: object) -> str:
    """`value` as one line of YAML in flow style (scalars quoted only where YAML needs it)."""
    text = yaml.safe_dump([value], default_flow_style=True, width=2**20, allow_unicode=True).strip()
    return text[1:-1]


def _github(config: StarterConfig) -> list[str]:
    lines = ["github:", f"  url: {_flow(config.github_url)}"]
    if config.app_id is not None:
        lines += [
            "  # The GitHub App (Settings > Developer settings > GitHub Apps) and its private key.",
            f"  app_id: {config.app_id}",
            f"  private_key_file: {_flow(config.private_key_file)}",
        ]
    else:
        lines += [
            "  # A personal access token (admin:org, or repo for repository scopes); a GitHub App is preferred.",
            f"  token_file: {_flow(config.token_file)}",
        ]
    lines += [
        "  # The same secret must be in the App's webhook settings (or the repository's/organisation's webhook),",
        "  # with the webhook URL pointing at corral: https://<where corral listens>/webhook",
        f"  webhook_secret_file: {_flow(config.webhook_secret_file)}",
    ]
    return lines


def _cloud(config: StarterConfig) -> list[str]:
    if config.cloud_name is None:
        note = "openstacksdk reads the OS_* variables, which `corral serve` must then have too"
        if config.region is None:
            return [f"# cloud: left out, so {note}."]
        return ["cloud:", f"  # No name: {note}.", f"  region: {_flow(config.region)}"]
    lines = [
        "cloud:",
        "  # An entry of clouds.yaml (where openstacksdk looks for it: ./, ~/.config/openstack/, /etc/openstack/,",
        "  # or the file OS_CLIENT_CONFIG_FILE names); `corral serve` must find the same file.",
        f"  name: {_flow(config.cloud_name)}",
    ]
    if config.region is not None:
        lines.append(f"  region: {_flow(config.region)}")
    return lines


def _pool(config: StarterConfig) -> list[str]:
    labels = _flow(config.labels)
    runs_on = _flow(["self-hosted", *config.labels])
    lines = [
        f"  {_flow(config.pool)}:",
        f"    scope: {_flow({config.scope.kind: config.scope.target})}",
        "    # A job runs here when this pool has every label its `runs-on` names (self-hosted, linux and x64",
        f"    # come with every runner): `runs-on: {runs_on}`. Name labels after what the runner offers",
        "    # (size, GPU, OS) and give each kind of runner its own pool; labels are matched ignoring case.",
        f"    labels: {labels}",
        f"    image: {_flow(config.image)}",
        f"    flavor: {_flow(config.flavor)}",
    ]
    if config.networks:
        lines.append(f"    networks: {_flow(config.networks)}")
    else:
        lines.append(
            '    # networks: none given, so Nova picks (its "auto" allocation); name one if the project has several'
        )
    if config.security_groups:
        lines.append(f"    security_groups: {_flow(config.security_groups)}")
    if config.key_name is not None:
        lines.append(f"    key_name: {_flow(config.key_name)}")
    if config.availability_zone is not None:
        lines.append(f"    availability_zone: {_flow(config.availability_zone)}")
    lines += [
        "    # Warm runners kept idle for the next job. 0 costs nothing while no job waits, but every job then waits",
        "    # for a VM to boot; each warm runner is a VM running (and billed) around the clock. 1 or 2 is typical.",
        f"    min_idle: {config.min_idle}",
        "    # Never more servers than this for this pool, however long the queue: keep it within the project's",
        "    # quota (instances, cores, RAM, volumes) and what you are ready to pay for at once.",
        f"    max_runners: {config.max_runners}",
    ]
    return lines


def render(config: StarterConfig) -> str:
    """The whole file."""
    lines = [
        *HEADER.splitlines(),
        *_github(config),
        *_cloud(config),
        "# SQLite suits one corral; use postgresql+psycopg://user@host/db to run several replicas.",
        f"database_url: {_flow(config.database_url)}",
        "# Jobs that ask only for generic labels (self-hosted, linux, x64) go to this pool.",
        f"default_pool: {_flow(config.pool)}",
        "pools:",
        *_pool(config),
    ]
    return "\n".join(lines) + "\n"


def config_relative(path: Path, config_dir: Path) -> str:
    """How the config names a file: relative when it sits in the config's folder (corral reads `*_file`
    paths from there), absolute otherwise, so the config works from any working directory."""
    resolved = path.resolve()
    try:
        return str(resolved.relative_to(config_dir.resolve()))
    except ValueError:
        return str(resolved)
