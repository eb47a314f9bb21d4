"""corral's configuration: a YAML file of pools and credentials, validated with messages a person can act on.

Every problem is reported at once, each as `<key path>: <what is wrong>; <how to fix it>`, so
`corral config check` can list them all and a reload with a bad file can say exactly why it was refused.
Secrets may come inline, from a `*_file`, or from `CORRAL_*` environment variables; they are held as
`SecretStr` so they never appear in a repr, a log line or an API response.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from corral.cloud.userdata import UserDataError, load_template

POOL_NAME_PATTERN = re.compile(r"^[a-z0-9]([a-z0-9-]{0,22}[a-z0-9])?$")
"""Pool names become part of server names (`<prefix>-<pool>-<id>`) and hostnames: DNS-label safe, short."""
VOLUME_NAME_PATTERN = re.compile(r"^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$")
DURATION_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
SECRET_ENVIRONMENT = {
    ("github", "token"): "CORRAL_GITHUB_TOKEN",
    ("github", "private_key"): "CORRAL_GITHUB_PRIVATE_KEY",
    ("github", "webhook_secret"): "CORRAL_WEBHOOK_SECRET",
}


class ConfigError(Exception):
    """The configuration cannot be used; `problems` lists every reason, each naming its key and the fix."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid configuration:\n" + "\n".join(f"  - {p}" for p in problems))


def parse_duration(value: object) -> float:
    """Seconds from `90`, `"90s"`, `"10m"`, `"1h"` or `"250ms"`."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 30s, 10m or 1h")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        match = DURATION_PATTERN.match(str(value))
        if not match:
            raise ValueError(f"{value!r} is not a duration; write it as 30s, 10m or 1h")
        seconds = float(match.group(1)) * DURATION_UNITS[match.group(2) or "s"]
    if seconds <= 0:
        raise ValueError("must be a positive duration, such as 30s, 10m or 1h")
    return seconds


Duration = Annotated[float, BeforeValidator(parse_duration)]


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ScopeConfig(StrictModel):
    """Where a pool's runners register: exactly one of an organisation, a repository or an enterprise."""

    org: str | None = None
    repo: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
    enterprise: str | None = None

    @model_validator(mode="after")
    def exactly_one(self) -> ScopeConfig:
        given = [name for name in ("org", "repo", "enterprise") if getattr(self, name)]
        if len(given) != 1:
            raise ValueError("give exactly one of org, repo (owner/name) or enterprise")
        return self

    @property
    def kind(self) -> Literal["org", "repo", "enterprise"]:
        if self.org:
            return "org"
        return "repo" if self.repo else "enterprise"

    @property
    def target(self) -> str:
        return self.org or self.repo or self.enterprise or ""

    @property
    def key(self) -> str:
        """A stable text form, `org:octo`, `repo:octo/app` or `enterprise:acme`, as stored with runners."""
        return f"{self.kind}:{self.target}"

    @classmethod
    def from_key(cls, key: str) -> ScopeConfig:
        kind, _, target = key.partition(":")
        return cls.model_validate({kind: target})

    @property
    def owner(self) -> str:
        """The account whose App installation serves this scope."""
        return self.repo.split("/", 1)[0] if self.repo else self.target


class VolumeConfig(StrictModel):
    """A blank volume attached to every server of a pool and deleted with it."""

    name: str
    size_gb: int = Field(ge=1, le=65_536)
    type: str | None = None

    @field_validator("name")
    @classmethod
    def dns_safe(cls, name: str) -> str:
        if not VOLUME_NAME_PATTERN.match(name):
            raise ValueError("use lowercase letters, digits and dashes, at most 32 characters")
        return name


class SharedVolumeConfig(VolumeConfig):
    """A volume declared once and added to every pool it names (`propagation: [all]` for every pool)."""

    propagation: list[str] = Field(default_factory=lambda: ["all"], min_length=1)


class PoolConfig(StrictModel):
    """One named pool: what its servers look like, which jobs they serve, and how many there may be."""

    scope: ScopeConfig
    labels: list[str] = Field(min_length=1, max_length=100)
    image: str = Field(min_length=1)
    flavor: str = Field(min_length=1)
    networks: list[str] = Field(default_factory=list)
    security_groups: list[str] = Field(default_factory=list)
    key_name: str | None = None
    availability_zone: str | None = None
    config_drive: bool = False
    boot_volume_gb: int | None = Field(default=None, ge=1, le=65_536)
    boot_volume_type: str | None = None
    extra_volumes: list[VolumeConfig] = Field(default_factory=list)
    metadata: dict[str, str] = Field(default_factory=dict)
    min_idle: int = Field(default=0, ge=0)
    max_runners: int = Field(default=10, ge=1)
    bootstrap_timeout: Duration = 600.0
    idle_grace: Duration = 60.0
    runner_group: str = "Default"
    priority: int = 0

    @field_validator("labels")
    @classmethod
    def labels_unique(cls, labels: list[str]) -> list[str]:
        lowered = [label.lower() for label in labels]
        if any(not label.strip() for label in labels):
            raise ValueError("labels must not be empty strings")
        if len(set(lowered)) != len(lowered):
            raise ValueError("labels repeat (GitHub compares labels ignoring case); list each once")
        return labels

    @model_validator(mode="after")
    def warm_fits_max(self) -> PoolConfig:
        if self.min_idle > self.max_runners:
            raise ValueError(
                f"min_idle ({self.min_idle}) is larger than max_runners ({self.max_runners}); "
                "lower min_idle or raise max_runners"
            )
        names = [volume.name for volume in self.extra_volumes]
        if len(set(names)) != len(names):
            raise ValueError("extra_volumes: two volumes share a name; give each its own")
        return self

    def label_set(self) -> frozenset[str]:
        return frozenset(label.lower() for label in self.labels)


class GitHubConfig(StrictModel):
    """GitHub credentials: a GitHub App (preferred) or a token, and the webhook secret."""

    url: str = "https://api.github.com"
    app_id: int | None = Field(default=None, ge=1)
    private_key: SecretStr | None = None
    private_key_file: Path | None = None
    token: SecretStr | None = None
    token_file: Path | None = None
    webhook_secret: SecretStr | None = None
    webhook_secret_file: Path | None = None
    timeout: Duration = 15.0

    @field_validator("url")
    @classmethod
    def http_url(cls, url: str) -> str:
        if not re.match(r"^https?://[^/\s]+", url):
            raise ValueError("must be an http(s) URL such as https://api.github.com or https://ghe.example/api/v3")
        return url.rstrip("/")

    @model_validator(mode="after")
    def one_way_to_authenticate(self) -> GitHubConfig:
        has_app = self.app_id is not None
        has_token = self.token is not None
        if has_app and has_token:
            raise ValueError("give either app_id with private_key(_file), or token(_file), not both")
        if not has_app and not has_token:
            raise ValueError(
                "no credentials: set app_id with private_key_file (a GitHub App), "
                "or token / token_file / CORRAL_GITHUB_TOKEN"
            )
        if has_app and self.private_key is None:
            raise ValueError("app_id is set but no private key: set private_key_file or CORRAL_GITHUB_PRIVATE_KEY")
        return self

    @property
    def uses_app(self) -> bool:
        return self.app_id is not None


class CloudConfig(StrictModel):
    """Which `clouds.yaml` entry to use; with no name, openstacksdk reads the `OS_*` variables."""

    name: str | None = None
    region: str | None = None
    max_concurrent_creates: int = Field(default=8, ge=1, le=256)
    quota_retry: Duration = 30.0
    """How long a pool waits after the cloud said its quota is exhausted before asking again."""


class CorralConfig(StrictModel):
    """The whole configuration; `generation` counts how many times it has been (re)loaded."""

    github: GitHubConfig
    cloud: CloudConfig = Field(default_factory=CloudConfig)
    database_url: str = "sqlite:///corral.db"
    installation: str = Field(default="corral", pattern=r"^[a-z0-9][a-z0-9-]{0,30}$")
    name_prefix: str = Field(default="corral", pattern=r"^[a-z][a-z0-9-]{0,14}$")
    default_pool: str | None = None
    extra_volumes: list[SharedVolumeConfig] = Field(default_factory=list)
    pools: dict[str, PoolConfig] = Field(min_length=1)
    reconcile_interval: Duration = 30.0
    user_data_template: Path | None = None
    """A cloud-init script of your own (string.Template: ${jit_config}, ${runner_name}, ${pool}, ${labels},
    ${runner_download_url}); the default installs or finds the runner and starts it."""
    stale_job_check: Duration = 60.0
    """A job queued longer than this is confirmed with GitHub (one GET) before it gets a runner."""
    max_runners_per_job: int = Field(default=3, ge=1, le=20)
    """Runners started for one job that may go to other jobs before the job is held back: after that it gets
    another runner only once GitHub confirms it still queued, after a backoff that doubles each time."""
    missed_job_scan: Duration = 60.0
    """How often to look for jobs whose webhook was lost: failed App deliveries, or queued runs."""

    @field_validator("pools")
    @classmethod
    def pool_names_fit_server_names(cls, pools: dict[str, PoolConfig]) -> dict[str, PoolConfig]:
        for name in pools:
            if not POOL_NAME_PATTERN.match(name):
                raise ValueError(
                    f"pool name {name!r} cannot be part of a server name: use 1-24 lowercase letters, "
                    "digits and dashes, starting and ending with a letter or digit"
                )
        return pools

    @model_validator(mode="after")
    def pools_are_consistent(self) -> CorralConfig:
        """Cross-pool rules; every broken one is reported, one per line."""
        if self.default_pool is None and len(self.pools) == 1:
            object.__setattr__(self, "default_pool", next(iter(self.pools)))
        problems = []
        if self.default_pool is None:
            problems.append(f"default_pool: required with several pools; name one of {sorted(self.pools)}")
        elif self.default_pool not in self.pools:
            problems.append(f"default_pool: {self.default_pool!r} names no pool; use one of {sorted(self.pools)}")
        seen: dict[tuple[str, str, frozenset[str]], str] = {}
        for name, pool in self.pools.items():
            key = (pool.scope.kind, pool.scope.target.lower(), pool.label_set())
            if key in seen:
                problems.append(
                    f"pools.{name}: same scope and labels as pool {seen[key]!r}, so no job could tell them "
                    "apart; give one of them a distinguishing label"
                )
            seen[key] = name
        if self.user_data_template is not None:
            try:
                load_template(self.user_data_template)
            except (OSError, UserDataError) as exc:
                problems.append(f"user_data_template: {exc}; point it at a readable string.Template script")
        for index, volume in enumerate(self.extra_volumes):
            unknown = [p for p in volume.propagation if p != "all" and p not in self.pools]
            if unknown:
                problems.append(
                    f"extra_volumes.{index}.propagation: no pool named {unknown}; "
                    f"use 'all' or pool names from {sorted(self.pools)}"
                )
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def volumes_for(self, pool_name: str) -> list[VolumeConfig]:
        """A pool's own extra volumes plus the shared ones propagated to it (the pool's own win on a name)."""
        pool = self.pools[pool_name]
        own = {volume.name for volume in pool.extra_volumes}
        shared = [
            VolumeConfig(name=v.name, size_gb=v.size_gb, type=v.type)
            for v in self.extra_volumes
            if ("all" in v.propagation or pool_name in v.propagation) and v.name not in own
        ]
        return [*pool.extra_volumes, *shared]


def _format_location(location: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in location)


def _format_error(error: Mapping[str, Any]) -> list[str]:
    location = _format_location(tuple(error["loc"]))
    kind = error["type"]
    if kind == "extra_forbidden":
        return [f"{location}: unknown key; remove it or check its spelling"]
    if kind == "missing":
        return [f"{location}: required key is missing; add it"]
    messages = str(error["msg"]).removeprefix("Value error, ").splitlines()
    if not error["loc"]:
        return messages
    return [f"{location}: {message}" for message in messages]


def _read_secret_files(raw: dict[str, Any], base: Path, problems: list[str]) -> None:
    """Resolve `*_file` secrets and `CORRAL_*` variables into the inline secret keys, in place."""
    github = raw.get("github")
    if not isinstance(github, dict):
        return
    for key in ("private_key", "token", "webhook_secret"):
        file_key = f"{key}_file"
        if github.get(file_key):
            path = Path(github[file_key])
            path = path if path.is_absolute() else base / path
            try:
                github[key] = path.read_text().strip()
            except OSError as exc:
                problems.append(
                    f"github.{file_key}: cannot read {str(path)!r} ({exc.strerror or exc}); "
                    "fix the path or the file's permissions"
                )
            github[file_key] = str(path)
        variable = SECRET_ENVIRONMENT[("github", key)]
        if key not in github and os.environ.get(variable):
            github[key] = os.environ[variable]


def _resolve_template_path(raw: dict[str, Any], base: Path) -> None:
    """A relative `user_data_template` is taken from the config file's folder, like the secret files."""
    template = raw.get("user_data_template")
    if isinstance(template, str) and not Path(template).is_absolute():
        raw["user_data_template"] = str(base / template)


def parse_config(raw: object, base: Path = Path()) -> CorralConfig:
    """Validate an already-parsed document; raises ConfigError listing every problem."""
    if not isinstance(raw, dict):
        raise ConfigError(["(top level): the file must be a YAML mapping with github and pools keys"])
    raw = dict(raw)
    if isinstance(raw.get("github"), dict):
        raw["github"] = dict(raw["github"])
    problems: list[str] = []
    _read_secret_files(raw, base, problems)
    _resolve_template_path(raw, base)
    try:
        config = CorralConfig.model_validate(raw)
    except ValidationError as exc:
        for error in exc.errors():
            problems.extend(_format_error(error))
        raise ConfigError(problems) from None
    if problems:
        raise ConfigError(problems)
    return config


def load_config(path: Path) -> CorralConfig:
    """Read and validate a config file; relative `*_file` paths are taken from the file's folder."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read the config file ({exc.strerror or exc})"]) from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError([f"{path}: not valid YAML: {exc}"]) from None
    return parse_config(raw, base=path.parent)
