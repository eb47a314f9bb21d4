"""corral's configuration: a YAML file of pools and credentials, validated with messages a person can act on.

Every problem is reported at once, each as `<key path>: <what is wrong>; <how to fix it>`, so
`corral config check` can list them all and a reload with a bad file can say exactly why it was refused.
What would only fail later is refused here: a credential that cannot work (an empty token, a key that is
not a key, a webhook secret anyone could guess), a database URL no driver can open, a duration so short
it would hammer an API, a user data template that renders too big for Nova.
Secrets may come inline, from a `*_file`, or from `CORRAL_*` environment variables; they are held as
`SecretStr` so they never appear in a repr or an API response, and registered with `corral.secrets` so
that no log line can carry them.
"""

from __future__ import annotations

import functools
import math
import os
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    SecretStr,
    Tag,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from corral import schedules as warm_schedules
from corral import secrets
from corral.images import ImageFilter, ImageRef
from corral.model import REPO_PATTERN, RUNNER_ID_LENGTH
from corral.userdata import SAMPLE_JIT_CONFIG_LENGTH, UserDataError, load_template, render_user_data
from corral.warmth import AutoWarm
from corral.yamlfile import DuplicateKey, YamlProblem, parse_yaml

POOL_NAME_PATTERN = re.compile(r"^[a-z0-9]([a-z0-9-]{0,22}[a-z0-9])?$")
"""Pool names become part of server names (`<prefix>-<pool>-<id>`) and hostnames: DNS-label safe, short."""
VOLUME_NAME_PATTERN = re.compile(r"^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$")
DEFAULT_CLOUD = "default"
"""The name the single `cloud:` section goes by among corral's clouds (`corral.cloud.provider` re-exports it)."""
DURATION_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
RUNNER_VERSION_PATTERN = r"^\d+\.\d+\.\d+$"
DEFAULT_RUNNER_VERSION = "2.329.0"
"""The GitHub Actions runner the default template downloads when the image has none (images should)."""
WEBHOOK_SECRET_MIN_LENGTH = 16
MAX_POOL_RUNNERS = 10_000
"""The most runners a count of one pool may name (`max_runners`, `min_idle`, `max_runners_per_repo`): more than
any one cloud project holds, so a larger number is a slip (extra zeros) that would plan a billion servers."""
DAY = 86400.0
SCALE_SET_NAME_MAX = 64
"""A scale set's name is what jobs ask for in `runs-on:`, one token; corral keeps it as long as a pool name may be
stored (64), which is also what the label column of a job holds."""
"""The webhook secret is the only thing standing between the internet and corral starting VMs: a short one
can be guessed from one captured delivery, offline, and an empty one lets anyone sign a fake job."""
DATABASES = {"sqlite": "sqlite:///corral.db", "postgresql+psycopg": "postgresql+psycopg://user@host/corral"}
"""The dialects and drivers corral ships with; the value is an example URL for the error message."""
SECRET_ENVIRONMENT = {
    ("github", "token"): "CORRAL_GITHUB_TOKEN",
    ("github", "private_key"): "CORRAL_GITHUB_PRIVATE_KEY",
    ("github", "webhook_secret"): "CORRAL_WEBHOOK_SECRET",
}


class ConfigError(Exception):
    """The configuration cannot be used; `problems` lists every reason, each naming its key and the fix.
    `source` says where the problems are when not in the config file (`OTEL_*` in the environment, say), so
    that they are not reported under the file's name."""

    def __init__(self, problems: list[str], source: str | None = None) -> None:
        # A token pasted where a key belongs would otherwise come back as "<token>: unknown key".
        self.problems = [secrets.redact(problem) for problem in problems]
        self.source = source
        super().__init__("invalid configuration:\n" + "\n".join(f"  - {p}" for p in self.problems))


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
    if not math.isfinite(seconds):  # YAML's .inf and .nan: NaN would slip past every bound below
        raise ValueError("must be a finite duration, such as 30s, 10m or 1h")
    return seconds


def format_duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    if seconds >= DAY and not seconds % DAY:
        return f"{seconds / DAY:g}d"
    if seconds < 60 or seconds % 60:
        return f"{seconds:,.3f}".rstrip("0").rstrip(".") + "s"  # 1,000,000,000s rather than 1e+09s
    return f"{seconds / 60:g}m" if seconds < 3600 or seconds % 3600 else f"{seconds / 3600:g}h"


def at_least(minimum: float, why: str) -> AfterValidator:
    """Refuse a duration below `minimum` seconds, saying what a shorter one would do."""

    def check(seconds: float) -> float:
        if seconds < minimum:
            raise ValueError(
                f"{format_duration(seconds)} is below the minimum of {format_duration(minimum)} ({why}); "
                f"set it to {format_duration(minimum)} or more"
            )
        return seconds

    return AfterValidator(check)


def at_most(maximum: float, why: str) -> AfterValidator:
    """Refuse a duration above `maximum` seconds, saying what a longer one would do (most often it is a slip of
    unit or of zeros, and corral would look stuck)."""

    def check(seconds: float) -> float:
        if seconds > maximum:
            raise ValueError(
                f"{format_duration(seconds)} is above the maximum of {format_duration(maximum)} ({why}); "
                f"set it to {format_duration(maximum)} or less"
            )
        return seconds

    return AfterValidator(check)


def within(low: int, high: int, why: str) -> AfterValidator:
    """Refuse a count outside `low`..`high`, naming the range (and, above it, `why` it ends there)."""

    def check(value: int) -> int:
        if not low <= value <= high:
            because = f" ({why})" if value > high else ""
            raise ValueError(f"{value:,} is outside {low:,} to {high:,}{because}; set it within that range")
        return value

    return AfterValidator(check)


Duration = Annotated[float, BeforeValidator(parse_duration)]
Interval = Annotated[
    Duration,
    at_least(1.0, "each round makes API calls: shorter spends the rate limits"),
    at_most(DAY, "rounds further apart would leave what they catch waiting for days"),
]
"""How often corral does something that calls the cloud or GitHub."""
_TOO_SHORT_TO_ANSWER = at_least(1.0, "shorter gives up before the cloud or GitHub could have answered")
Wait = Annotated[
    Duration,
    _TOO_SHORT_TO_ANSWER,
    at_most(DAY, "nothing corral waits for takes longer: a longer one is a slip of unit"),
]
"""How long corral lets something take before it acts on it."""
CallTimeout = Annotated[
    Duration,
    _TOO_SHORT_TO_ANSWER,
    at_most(600.0, "a call unanswered that long has hung; the next pass tries again"),
]
"""How long one API call may take (its own maximum only: above a day, `Wait`'s would name a value still refused)."""
PoolRunners = Annotated[int, within(1, MAX_POOL_RUNNERS, "more than any cloud project holds")]
"""A number of a pool's runners: at least one."""
WarmCount = Annotated[int, within(0, MAX_POOL_RUNNERS, "more than any cloud project holds")]
"""A number of warm runners: none is fine."""


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ScopeConfig(StrictModel):
    """Where a pool's runners register: exactly one of an organisation, a repository or an enterprise."""

    org: str | None = None
    repo: str | None = Field(default=None, pattern=REPO_PATTERN)
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

    @property
    def installation_key(self) -> str:
        """Which App installation serves this scope: the owning account's login, lower case, or
        `enterprise:<slug>` (an enterprise and an organisation may share a name, not an installation)."""
        return f"enterprise:{self.target.lower()}" if self.enterprise else self.owner.lower()

    @property
    def installation_path(self) -> str:
        """GitHub's direct lookup of the App's installation for this scope: one call, whatever the number
        of installations (404 when the App is not installed there)."""
        if self.org:
            return f"/orgs/{self.org}/installation"
        if self.repo:
            return f"/repos/{self.repo}/installation"
        return f"/enterprises/{self.enterprise}/installation"


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


CACHE_MOUNT_PATTERN = re.compile(r"^(/[A-Za-z0-9._-]+)+$")
RUNNER_HOME = "/opt/actions-runner"
"""Where the default user data installs the runner: its work directory and credentials live under it."""


class CacheVolumesConfig(StrictModel):
    """Cinder volumes a pool keeps and hands to its new servers, one each, to start warm (issue: cache volumes).

    A volume outlives the server it was attached to and goes to the pool's next one: whatever the jobs leave
    under `mount` (container images, a tool cache) the next job finds. Never the runner's work directory or
    credentials: `mount` may not hold or be held by the runner's home."""

    size_gb: int = Field(ge=1, le=65_536)
    max: int = Field(ge=1, le=1_000)
    """The most volumes the pool ever keeps; a new server finding none free and the pool at `max` boots
    without one (a job never waits for a cache)."""
    mount: str = "/var/lib/corral-cache"
    type: str | None = None

    @field_validator("mount")
    @classmethod
    def mount_is_safe(cls, mount: str) -> str:
        if not CACHE_MOUNT_PATTERN.match(mount) or "/../" in f"{mount}/" or "/./" in f"{mount}/":
            raise ValueError(
                "give an absolute path of letters, digits, '.', '_' and '-' (for example /var/lib/corral-cache)"
            )
        if mount.startswith(f"{RUNNER_HOME}/") or f"{RUNNER_HOME}/".startswith(f"{mount}/"):
            raise ValueError(
                f"the runner's home {RUNNER_HOME} holds its work directory and credentials, which must not outlive "
                "a job: mount the cache outside it (for example /var/lib/corral-cache)"
            )
        if mount in ("/etc", "/usr", "/bin", "/sbin", "/lib", "/boot", "/dev", "/proc", "/sys", "/root", "/home"):
            raise ValueError(f"{mount} is part of the system: mount the cache on a path of its own")
        return mount


class IdleWindowConfig(StrictModel):
    """A window of warm runners: opened at each time `cron` names, open for `duration`."""

    cron: str
    duration: Annotated[Duration, at_most(31 * DAY, "a window open longer is a new `default`; change that")]
    min_idle: WarmCount

    @field_validator("cron")
    @classmethod
    def five_fields(cls, cron: str) -> str:
        if not warm_schedules.valid_cron(cron):
            raise ValueError(
                f"{cron[:60]!r} is not a cron expression of five fields (minute hour day-of-month month "
                "day-of-week), such as '0 8 * * 1-5' for 8 o'clock on weekdays"
            )
        return cron


class AutoWarmConfig(StrictModel):
    """`min_idle: {auto: ...}`: the fewest warm runners that keep the chosen percentile of queued-to-started
    waits at or below `target_wait`, forecast from the pool's own history (`corral.warmth`)."""

    target_wait: Wait = 30.0
    percentile: float = Field(default=95.0, gt=0, le=100)
    min: WarmCount = 0
    max: WarmCount | None = None
    """At most this many warm (the pool's `max_runners` when not given)."""

    @model_validator(mode="after")
    def min_below_max(self) -> AutoWarmConfig:
        if self.max is not None and self.min > self.max:
            raise ValueError(f"min ({self.min}) is larger than max ({self.max}); lower min or raise max")
        return self


class IdleScheduleConfig(StrictModel):
    """`min_idle` that follows the clock: `default`, raised to the largest `min_idle` of the windows open; with
    `auto`, that is the floor under what the forecast wants."""

    default: WarmCount = 0
    timezone: str = "UTC"
    schedules: list[IdleWindowConfig] = Field(default_factory=list, max_length=50)
    auto: AutoWarmConfig | None = None

    @model_validator(mode="after")
    def schedules_or_auto(self) -> IdleScheduleConfig:
        if not self.schedules and self.auto is None:
            raise ValueError(
                "give `schedules` (windows of warm runners, such as [{cron: '0 8 * * 1-5', duration: 10h, "
                "min_idle: 20}]) or `auto` (such as {auto: {target_wait: 30s}}), or make min_idle a number"
            )
        return self

    @field_validator("timezone")
    @classmethod
    def known_zone(cls, timezone: str) -> str:
        try:
            ZoneInfo(timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"{timezone[:60]!r} is not a time zone name, such as UTC or Europe/Berlin") from None
        return timezone

    @property
    def peak(self) -> int:
        """The most the schedule (and `auto`, when its `max` is given) can ask for."""
        auto = [self.auto.max] if self.auto is not None and self.auto.max is not None else []
        return max([self.default, *(window.min_idle for window in self.schedules), *auto])

    def in_force(self, now: datetime) -> warm_schedules.InForce:
        if not self.schedules:
            return warm_schedules.InForce(self.default)
        windows = [
            warm_schedules.Window(window.cron, timedelta(seconds=window.duration), window.min_idle)
            for window in self.schedules
        ]
        return warm_schedules.in_force(self.default, windows, self.timezone, now)


def _warm_kind(value: object) -> str:
    return "schedule" if isinstance(value, dict | IdleScheduleConfig) else "number"


WarmRunners = Annotated[
    Annotated[WarmCount, Tag("number")] | Annotated[IdleScheduleConfig, Tag("schedule")],
    Discriminator(_warm_kind, custom_error_type="min_idle", custom_error_message="a number or a schedule"),
]
"""`min_idle`: a number, or a schedule; an error names only what was wrong with the form given."""
UNION_TAGS = {"min_idle": frozenset({"number", "schedule"}), "image": frozenset({"name", "filter"})}
"""The tags of the keys that take one of two forms (`WarmRunners`, `PoolImage`), which pydantic puts in an
error's location after the key and `_format_location` leaves out."""


class ImageFilterConfig(StrictModel):
    """`image` as a filter: the newest active image with these Glance properties and tags (and name)."""

    name: str | None = Field(default=None, min_length=1)
    properties: dict[str, str] = Field(default_factory=dict, max_length=20)
    tags: list[str] = Field(default_factory=list, max_length=20)

    @model_validator(mode="after")
    def says_something(self) -> ImageFilterConfig:
        if not self.properties and not self.tags:
            raise ValueError(
                "a filter needs properties or tags (for example `properties: {os_distro: ubuntu}`); to name one "
                "image, give its name or id as a string"
            )
        return self

    def to_filter(self) -> ImageFilter:
        return ImageFilter(tuple(sorted(self.properties.items())), tuple(self.tags), self.name)


def _image_kind(value: object) -> str:
    return "filter" if isinstance(value, dict | ImageFilterConfig) else "name"


PoolImage = Annotated[
    Annotated[str, Field(min_length=1), Tag("name")] | Annotated[ImageFilterConfig, Tag("filter")],
    Discriminator(_image_kind, custom_error_type="image", custom_error_message="a name or id, or a filter"),
]
"""`image`: a name or id, or a filter (`{properties: {...}, tags: [...]}`) for the newest matching image."""


def image_ref(image: str | ImageFilterConfig) -> ImageRef:
    return image.to_filter() if isinstance(image, ImageFilterConfig) else image


class RolloutConfig(StrictModel):
    """How a pool moves its idle runners to a new image (its `image` changed, or now means a new upload)."""

    max_surge: int = Field(default=1, ge=1, le=1000)
    """Replacement runners started at once, above what the pool keeps: each idle runner on the old image is
    retired once a replacement is online. Busy runners are never touched: they end with their job."""
    max_failure_rate: float = Field(default=0.5, ge=0.0, lt=1.0)
    """Share of runners on a new image that may fail to come online; above it, once `min_boots` were judged,
    the pool rolls back to the image in service before."""
    min_boots: int = Field(default=3, ge=1, le=1000)
    """Runners on a new image judged (online or failed) before it is rolled back or put in service."""
    canary: float | None = None
    """Given as a share such as `10%`: a new image first gets only that share of the pool's new runners
    (the canaries; the rest, and the idle runners, stay on the image in service) until `canary_jobs` jobs
    succeeded on it; then it is promoted and rolled out as without a canary. None: no canary."""
    canary_jobs: int = Field(default=5, ge=1, le=10000)
    """Jobs that must succeed on a canary image before it is promoted."""

    @field_validator("canary", mode="before")
    @classmethod
    def _share(cls, value: Any) -> float | None:
        """`10%` as 0.1: a bare number would be ambiguous (0.1 of the runners, or 0.1%?), so only a percentage
        is taken."""
        if value is None:
            return None
        text_value = str(value).strip() if isinstance(value, str) else None
        if text_value is None or not text_value.endswith("%"):
            raise ValueError(f"give the share of new runners as a percentage, such as '10%' (got {value!r})")
        try:
            percent = float(text_value[:-1])
        except ValueError:
            raise ValueError(f"{value!r} is not a percentage; write it like '10%'") from None
        if not 0 < percent <= 100:
            raise ValueError(f"{value!r} is not a share of runners: give more than 0% and at most 100%")
        return percent / 100


class PlacementConfig(StrictModel):
    """Where a pool's servers may be made: a cloud of `clouds`, and what differs there from the pool's own
    settings (an image, flavor or network has another name in another region)."""

    cloud: str = Field(min_length=1)
    flavor: str | None = Field(default=None, min_length=1)
    image: PoolImage | None = None
    networks: list[str] | None = None
    security_groups: list[str] | None = None
    key_name: str | None = None
    availability_zone: str | None = None


@dataclass(frozen=True)
class Placement:
    """A pool's placement, resolved: its settings with the pool's filled in where it overrides none."""

    index: int
    cloud: str
    flavor: str
    image: ImageRef
    networks: tuple[str, ...]
    security_groups: tuple[str, ...]
    key_name: str | None
    availability_zone: str | None

    def key(self, pool: str) -> str:
        """What the placement is known by: its pool's name for the first, `pool@index` for a later one."""
        return pool if self.index == 0 else f"{pool}@{self.index}"


def pool_of_placement(key: str) -> str:
    """The pool of a placement known by `key` (`Placement.key`; pool names have no `@`)."""
    return key.partition("@")[0]


def scale_set_name(name: str, pool: PoolConfig) -> str:
    """The scale set a `scale_set` pool named `name` registers (`runs-on:` names it): its `scale_set_name`, or
    the pool's name. A fact of the configuration, shared by the engine's listener and the doctor."""
    return pool.scale_set_name or name


class PoolConfig(StrictModel):
    """One named pool: what its servers look like, which jobs they serve, and how many there may be."""

    scope: ScopeConfig
    labels: list[str] = Field(min_length=1, max_length=100)
    image: PoolImage
    """A name or id, or a filter naming the newest active image with given Glance properties and tags."""
    flavor: str = Field(min_length=1)
    networks: list[str] = Field(default_factory=list)
    security_groups: list[str] = Field(default_factory=list)
    key_name: str | None = None
    availability_zone: str | None = None
    config_drive: bool = False
    boot_volume_gb: int | None = Field(default=None, ge=1, le=65_536)
    boot_volume_type: str | None = None
    extra_volumes: list[VolumeConfig] = Field(default_factory=list)
    cache_volumes: CacheVolumesConfig | None = None
    """Volumes kept between the pool's runners, one attached to each new server while one is free."""
    metadata: dict[str, str] = Field(default_factory=dict)
    placements: list[PlacementConfig] = Field(default_factory=list, max_length=16)
    """Where its servers are made, in order of preference: the first that has quota headroom, has not failed
    lately and whose check found nothing wrong; none given is the first of `clouds` with the settings above."""
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    min_idle: WarmRunners = 0
    """Warm runners kept idle: a number, or a schedule (`{default, timezone, schedules: [{cron, duration,
    min_idle}]}`) that the passes follow."""
    max_runners: PoolRunners = 10
    bootstrap_timeout: Wait = 600.0
    idle_grace: Wait = 60.0
    rerun_lost_jobs: int = Field(default=0, ge=0, le=10)
    """Re-run a job, at most this many times, once GitHub has failed it because its runner's server died under
    it (ERROR or vanished while the runner was busy, which corral saw); never a job that failed on its own."""
    runner_group: str = "Default"
    priority: int = 0
    max_runners_per_repo: PoolRunners | None = None
    """At most this many of the pool's runners started for one repository's jobs at a time, so one
    repository's matrix cannot take the whole pool. Such runners register at the repository (only its jobs
    can reach them); warm runners (`min_idle`) still register at the pool's scope and serve anyone."""
    intake: Literal["webhook", "scale_set"] = "webhook"
    """How the pool hears of its jobs: `webhook` (GitHub delivers `workflow_job` to corral) or `scale_set`
    (corral registers a runner scale set and long-polls GitHub for its jobs: no inbound connection)."""
    scale_set_name: str | None = Field(default=None, min_length=1, max_length=SCALE_SET_NAME_MAX, pattern=r"^\S+$")
    """The scale set's name on GitHub (`runs-on:` names it); the pool's name unless given."""

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
        if self.min_idle_peak > self.max_runners:
            raise ValueError(
                f"min_idle ({self.min_idle_peak}{' at its peak' if self.scheduled else ''}) is larger than "
                f"max_runners ({self.max_runners}); lower min_idle or raise max_runners"
            )
        names = [volume.name for volume in self.extra_volumes]
        if len(set(names)) != len(names):
            raise ValueError("extra_volumes: two volumes share a name; give each its own")
        if self.max_runners_per_repo is not None and (self.intake != "webhook" or not self.scope.org):
            raise ValueError(
                "max_runners_per_repo needs an organisation-scoped pool with `intake: webhook` (its runners "
                "register at each job's repository); remove it, or set scope.org and the webhook intake"
            )
        if self.auto_warm is not None and self.intake != "webhook":
            raise ValueError(
                "min_idle.auto forecasts from the webhook intake's job history, which a scale-set pool does not "
                "keep; give a number or a schedule, or set `intake: webhook`"
            )
        if self.scale_set_name is not None and self.intake != "scale_set":
            raise ValueError("scale_set_name is only for a pool with `intake: scale_set`; remove it or set the intake")
        return self

    @property
    def image_ref(self) -> ImageRef:
        return image_ref(self.image)

    def resolved_placements(self, default_cloud: str) -> list[Placement]:
        """Its placements with its own settings filled in (none given: one, in `default_cloud`)."""
        given = self.placements or [PlacementConfig(cloud=default_cloud)]
        return [
            Placement(
                index=index,
                cloud=placement.cloud,
                flavor=placement.flavor or self.flavor,
                image=image_ref(placement.image) if placement.image is not None else self.image_ref,
                networks=tuple(self.networks if placement.networks is None else placement.networks),
                security_groups=tuple(
                    self.security_groups if placement.security_groups is None else placement.security_groups
                ),
                key_name=placement.key_name or self.key_name,
                availability_zone=placement.availability_zone or self.availability_zone,
            )
            for index, placement in enumerate(given)
        ]

    def label_set(self) -> frozenset[str]:
        return frozenset(label.lower() for label in self.labels)

    @property
    def scheduled(self) -> bool:
        return isinstance(self.min_idle, IdleScheduleConfig)

    @property
    def min_idle_peak(self) -> int:
        return self.min_idle.peak if isinstance(self.min_idle, IdleScheduleConfig) else self.min_idle

    @property
    def auto_warm(self) -> AutoWarm | None:
        """`min_idle`'s `auto`, as the forecast reads it (its `max` defaulting to `max_runners`), or None."""
        auto = self.min_idle.auto if isinstance(self.min_idle, IdleScheduleConfig) else None
        if auto is None:
            return None
        maximum = auto.max if auto.max is not None else self.max_runners
        return AutoWarm(auto.target_wait, auto.percentile, auto.min, maximum)

    def min_idle_at(self, now: datetime) -> warm_schedules.InForce:
        """The `min_idle` in force at `now`, and its next change (a plain number never changes)."""
        if isinstance(self.min_idle, IdleScheduleConfig):
            return self.min_idle.in_force(now)
        return warm_schedules.InForce(self.min_idle)


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
    timeout: CallTimeout = 15.0

    @field_validator("url")
    @classmethod
    def http_url(cls, url: str) -> str:
        if not re.match(r"^https?://[^/\s]+", url):
            raise ValueError("must be an http(s) URL such as https://api.github.com or https://ghe.example/api/v3")
        return url.rstrip("/")

    @field_validator("token")
    @classmethod
    def token_not_empty(cls, token: SecretStr | None) -> SecretStr | None:
        if token is not None and not token.get_secret_value().strip():
            raise ValueError("empty; put the token (a PAT, ghp_...) in it, or use a GitHub App")
        return token

    @field_validator("private_key")
    @classmethod
    def private_key_loads(cls, key: SecretStr | None) -> SecretStr | None:
        if key is None:
            return key
        try:
            loaded = load_pem_private_key(key.get_secret_value().encode(), password=None)
        except (ValueError, TypeError):
            loaded = None
        if not isinstance(loaded, RSAPrivateKey):
            raise ValueError(
                "not an unencrypted PEM RSA private key, so every GitHub call would fail; use the .pem file "
                "GitHub generated for the App (its settings page, Private keys)"
            )
        return key

    @field_validator("webhook_secret")
    @classmethod
    def webhook_secret_unguessable(cls, secret: SecretStr | None) -> SecretStr | None:
        if secret is not None and len(secret.get_secret_value().strip()) < WEBHOOK_SECRET_MIN_LENGTH:
            what = "empty" if not secret.get_secret_value().strip() else "too short"
            raise ValueError(
                f"{what} (at least {WEBHOOK_SECRET_MIN_LENGTH} characters): anyone who can guess it can sign fake "
                "jobs and make corral start VMs; generate one with `openssl rand -hex 32` and set it here and in "
                "GitHub's webhook settings, or remove the key to turn /webhook off"
            )
        return secret

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


class CloudTuning(StrictModel):
    """What each cloud may set: its region, and how corral paces its calls to it."""

    region: str | None = None
    max_concurrent_creates: int = Field(default=8, ge=1, le=256)
    quota_retry: Interval = 30.0
    """How long a pool waits after the cloud said its quota is exhausted before asking again."""
    timeout: CallTimeout = 60.0
    """How long one cloud API call may take before it counts as failed (keystoneauth waits for ever otherwise)."""
    threads: int = Field(default=8, ge=1, le=64)
    """Worker threads for cloud calls other than creates (listings, deletes, pool checks)."""
    call_retries: int = Field(default=2, ge=0, le=10)
    """How often a cloud call that is safe to repeat (a read, a delete; never a create) is tried again after a
    dropped connection or a 502/503/504. openstacksdk's own retries (clouds.yaml's `*_status_code_retries`,
    5 for Glance by default) are off: one API blip costs seconds, not a minute."""
    call_retry_time: Wait = 10.0
    """No retry of a cloud call starts later than this after its first attempt: the engine's next pass is the
    real retry (each attempt is bounded by `timeout`)."""


class CloudConfig(CloudTuning):
    """The one cloud (`cloud:`): which `clouds.yaml` entry to use; with no name, openstacksdk reads the `OS_*`
    variables."""

    name: str | None = None


class CloudEntryConfig(CloudTuning):
    """One of several clouds (`clouds: {name: {cloud: <clouds.yaml entry>, region: ...}}`)."""

    cloud: str | None = None
    """Its `clouds.yaml` entry; with none, openstacksdk reads the `OS_*` variables."""

    def settings(self) -> CloudConfig:
        return CloudConfig(name=self.cloud, **self.model_dump(exclude={"cloud"}))


CLOUD_NAME_PATTERN = re.compile(r"^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$")


MAX_JIT_CONCURRENCY = 256
"""The most JIT configs `tuning.jit_concurrency` lets corral ask of GitHub at once."""


class TuningConfig(StrictModel):
    """The engine's dials. The defaults suit thousands of jobs a day; change them when a measurement says so."""

    jit_concurrency: int = Field(default=16, ge=1, le=MAX_JIT_CONCURRENCY)
    """JIT configs asked of GitHub at once (a burst's creates wait for these before they reach the cloud).
    github.com answers at most 100 requests of one client at once and, per endpoint, 900 points a minute (a
    JIT config is a POST: 5 points, so 180 a minute) before its secondary rate limit pauses corral; a GitHub
    Enterprise Server's limits are what its administrator set (none by default)."""
    news_delay: Annotated[Duration, at_most(60.0, "longer holds a pool's pass back from news that came")] = 0.5
    """How long a pool's pass may wait after a webhook said one of its runners took or finished a job (a new
    queued job never waits): under load, one pass then takes the news of many jobs at once."""
    lost_job_recheck: Annotated[Duration, at_most(600.0, "longer leaves a lost job's re-run waiting that long")] = 30.0
    """How often GitHub is asked about a job lost with its server until it has failed it (GitHub waits minutes
    for a silent runner), to re-run it then (`rerun_lost_jobs`)."""
    busy_covers_job: Wait = 30.0
    """How long a runner that turned busy is taken to run the job it was started for, unless GitHub says
    otherwise first; after that a job still queued may get another runner."""
    confirm_after: Annotated[Duration, at_most(600.0, "longer leaves a job nobody took waiting that long")] = 5.0
    """How long after a job was presumed taken (its runner took another one) GitHub is asked whether it really
    was: long enough for the runner that did take it to say so, so that a still-queued answer means it."""
    max_hold: Wait = 600.0
    """The longest a job whose runners keep going to other jobs waits before it may get another."""
    pool_recheck: Interval = 300.0
    """How often each pool is checked against the cloud again: one the cloud cannot serve (no such image, a
    refused create), to see it fixed; one it can, to pick up a new upload of its image (or one its image
    filter matches), which the pool then rolls its idle runners over to."""
    stale_checks_per_pass: int = Field(default=50, ge=1, le=1000)
    """Jobs GitHub is asked about per upkeep round (stale queued ones, and running ones whose runner is gone)."""
    intake_group: int = Field(default=500, ge=1, le=10_000)
    """Webhook deliveries recorded in one transaction at most."""
    prune_batch: int = Field(default=500, ge=10, le=100_000)
    """Rows of history deleted per transaction when pruning."""


class CorralConfig(StrictModel):
    """The whole configuration; `generation` counts how many times it has been (re)loaded."""

    github: GitHubConfig
    cloud: CloudConfig = Field(default_factory=CloudConfig)
    clouds: dict[str, CloudEntryConfig] = Field(default_factory=dict, max_length=32)
    """Several clouds by name (regions, providers): pools place servers in them with `placements`. The single
    `cloud:` is the one-entry map `{default: ...}`; the first entry is where pools without placements go."""
    database_url: str = "sqlite:///corral.db"
    installation: str = Field(default="corral", pattern=r"^[a-z0-9][a-z0-9-]{0,30}$")
    name_prefix: str = Field(default="corral", pattern=r"^[a-z][a-z0-9-]{0,14}$")
    default_pool: str | None = None
    extra_volumes: list[SharedVolumeConfig] = Field(default_factory=list)
    pools: dict[str, PoolConfig] = Field(min_length=1)
    reconcile_interval: Interval = 30.0
    user_data_template: Path | None = None
    """A cloud-init script of your own (string.Template: ${jit_config}, ${runner_name}, ${pool}, ${labels},
    ${runner_download_url}); the default installs or finds the runner and starts it."""
    stale_job_check: Wait = 60.0
    """A job queued longer than this is confirmed with GitHub (one GET) before it gets a runner."""
    max_runners_per_job: int = Field(default=3, ge=1, le=20)
    """Runners started for one job that may go to other jobs before the job is held back: after that it gets
    another runner only once GitHub confirms it still queued, after a backoff that doubles each time."""
    missed_job_scan: Interval = 60.0
    """How often to look for jobs whose webhook was lost: failed App deliveries, or queued runs."""
    retention: Annotated[
        Duration,
        at_least(3600.0, "jobs and runners younger than that are still being worked on"),
        at_most(3650 * DAY, "older history belongs in a backup, not in the database every pass reads"),
    ] = 14 * DAY
    """How long history (deleted runners and their events, jobs, webhook deliveries) is kept."""
    runner_version: str = Field(default=DEFAULT_RUNNER_VERSION, pattern=RUNNER_VERSION_PATTERN)
    """The runner release `${runner_download_url}` points at (for images that do not carry the runner)."""
    lease_time: Annotated[
        Duration,
        at_least(3.0, "a replica renews every third of it: shorter loses pools to a slow database"),
        at_most(600.0, "a replica that stops holds its pools that long before another takes them"),
    ] = 15.0
    """PostgreSQL replicas: how long a replica that stops renewing keeps its pools before another takes them."""
    tuning: TuningConfig = Field(default_factory=TuningConfig)

    @property
    def runner_download_url(self) -> str:
        version = self.runner_version
        return (
            f"https://github.com/actions/runner/releases/download/v{version}/actions-runner-linux-x64-{version}.tar.gz"
        )

    @field_validator("pools")
    @classmethod
    def pool_names_fit_server_names(cls, pools: dict[str, PoolConfig]) -> dict[str, PoolConfig]:
        for name in pools:
            if not POOL_NAME_PATTERN.match(name):
                raise ValueError(_pool_name_problem(name))
        return pools

    @field_validator("database_url")
    @classmethod
    def database_corral_can_open(cls, url: str) -> str:
        examples = " or ".join(DATABASES.values())
        try:
            parsed = make_url(url)
        except ArgumentError:
            raise ValueError(f"not a database URL; write it as {examples}") from None
        driver = "sqlite" if parsed.drivername == "sqlite+pysqlite" else parsed.drivername
        if driver not in DATABASES:
            fix = "postgresql+psycopg://" if parsed.get_backend_name() == "postgresql" else examples
            raise ValueError(f"{parsed.drivername}:// is not supported (only {', '.join(DATABASES)}); use {fix}")
        if not parsed.database or parsed.database == ":memory:":
            raise ValueError(f"names no database (an in-memory one would forget every runner); use {DATABASES[driver]}")
        return url

    def cloud_settings(self) -> dict[str, CloudConfig]:
        """Every cloud by name, the first being where pools without placements go."""
        if not self.clouds:
            return {DEFAULT_CLOUD: self.cloud}
        return {name: entry.settings() for name, entry in self.clouds.items()}

    @property
    def default_cloud(self) -> str:
        return next(iter(self.clouds), DEFAULT_CLOUD)

    def cloud_of(self, recorded: str | None) -> str:
        """The cloud a runner is in, from what its row recorded (None, for runners older than the record:
        the first cloud)."""
        return recorded or self.default_cloud

    @functools.cached_property
    def resolved_placements(self) -> dict[str, list[Placement]]:
        """Every pool's placements, resolved once per configuration: each pass reads them, several times."""
        return {name: pool.resolved_placements(self.default_cloud) for name, pool in self.pools.items()}

    def placements(self, pool: str) -> list[Placement]:
        return self.resolved_placements[pool]

    def placement_of(self, pool: str, recorded_cloud: str | None) -> Placement | None:
        """The placement a runner of `pool` in that cloud (as its row recorded it) was made by: the pool's
        first in that cloud (None: the pool no longer names that cloud, or is gone)."""
        if pool not in self.pools:
            return None
        cloud = self.cloud_of(recorded_cloud)
        return next((placement for placement in self.placements(pool) if placement.cloud == cloud), None)

    def clouds_of(self, pool: str) -> list[str]:
        """The clouds of the pool's placements, in order (a pool no longer configured: the first cloud, where
        the runners of the unrecorded past are)."""
        if pool not in self.pools:
            return [self.default_cloud]
        return [placement.cloud for placement in self.placements(pool)]

    @model_validator(mode="after")
    def sections_agree(self) -> CorralConfig:
        """The rules across sections, checked together so that one broken rule hides none of the others."""
        problems = self.problems_across_sections(self.pools)
        if problems:
            raise ValueError("\n".join(problems))
        webhook_pools = sorted(name for name, pool in self.pools.items() if pool.intake == "webhook")
        if self.default_pool is None and len(webhook_pools) == 1:
            object.__setattr__(self, "default_pool", webhook_pools[0])
        if self.clouds:
            object.__setattr__(self, "cloud", self.cloud_settings()[self.default_cloud])
        return self

    def problems_across_sections(self, pool_names: Collection[str], clouds_valid: bool = True) -> list[str]:
        """Every broken rule that reads more than one section: placements against the clouds, which pool a job
        selects (default pool, labels, scale sets), the user data template rendered for each pool, shared
        volumes' pools. `pool_names` is every pool the file names: for a file whose schema failed, `self.pools`
        holds only the pools valid on their own, and the others must not be called unknown (nor, when
        `clouds` itself is invalid, the clouds placements name)."""
        placements = self._placement_problems() if clouds_valid else []
        template = [] if self.user_data_template is None else self._user_data_problems(self.user_data_template)
        return [*placements, *self._selection_problems(pool_names), *template, *self._volume_problems(pool_names)]

    def _placement_problems(self) -> list[str]:
        """`cloud` or `clouds`, cloud names fit for labels, and every placement names a cloud."""
        problems = []
        if self.clouds and "cloud" in self.model_fields_set:
            problems.append(
                "cloud: give either `cloud` (one cloud) or `clouds` (several by name), not both; move its "
                "settings into an entry of `clouds`"
            )
        for name in self.clouds:
            if not CLOUD_NAME_PATTERN.match(name):
                problems.append(
                    f"clouds.{name}: a cloud's name is shown in metrics and runner records; use 1-32 lowercase "
                    "letters, digits and dashes, starting and ending with a letter or digit"
                )
        known = list(self.cloud_settings())
        for pool_name, pool in self.pools.items():
            for index, placement in enumerate(pool.placements):
                if placement.cloud not in known:
                    fix = "add it to `clouds`" if self.clouds else "declare your clouds in `clouds` by name"
                    problems.append(
                        f"pools.{pool_name}.placements.{index}.cloud: {placement.cloud!r} names no cloud "
                        f"(known: {known}); {fix}"
                    )
        return problems

    def _selection_problems(self, pool_names: Collection[str]) -> list[str]:
        """Which pool a job goes to: the default pool, and pools (or scale sets) that no job could tell apart."""
        webhook_pools = sorted(name for name, pool in self.pools.items() if pool.intake == "webhook")
        problems = []
        if self.default_pool is None and len(webhook_pools) > 1:
            problems.append(f"default_pool: required with several pools; name one of {webhook_pools}")
        elif self.default_pool is not None and self.default_pool not in pool_names:
            problems.append(f"default_pool: {self.default_pool!r} names no pool; use one of {sorted(pool_names)}")
        elif self.default_pool in self.pools and self.pools[self.default_pool].intake != "webhook":
            problems.append(
                f"default_pool: {self.default_pool!r} takes its jobs from a scale set, which GitHub routes by name "
                f"only; name a webhook pool ({webhook_pools or 'none configured'}) or leave it out"
            )
        scale_sets: dict[tuple[str, str, str], str] = {}  # (scope, runner group, scale set name) -> pool
        for name, pool in self.pools.items():
            if pool.intake != "scale_set":
                continue
            scale_set = (pool.scope.key.lower(), pool.runner_group.lower(), scale_set_name(name, pool).lower())
            if scale_set in scale_sets:
                problems.append(
                    f"pools.{name}: same scale set as pool {scale_sets[scale_set]!r} (scope, runner group and "
                    "name); give one of them its own scale_set_name"
                )
            scale_sets[scale_set] = name
        seen: dict[tuple[str, str, frozenset[str]], str] = {}
        for name, pool in self.pools.items():
            if pool.intake != "webhook":
                continue  # GitHub routes a scale set's jobs by its name: its labels need not tell it apart
            key = (pool.scope.kind, pool.scope.target.lower(), pool.label_set())
            if key in seen:
                problems.append(
                    f"pools.{name}: same scope and labels as pool {seen[key]!r}, so no job could tell them "
                    "apart; give one of them a distinguishing label"
                )
            seen[key] = name
        return problems

    def _volume_problems(self, pool_names: Collection[str]) -> list[str]:
        """Shared volumes propagate to pools by name: each name must be one of the file's pools."""
        problems = []
        for index, volume in enumerate(self.extra_volumes):
            unknown = [p for p in volume.propagation if p != "all" and p not in pool_names]
            if unknown:
                problems.append(
                    f"extra_volumes.{index}.propagation: no pool named {unknown}; "
                    f"use 'all' or pool names from {sorted(pool_names)}"
                )
        return problems

    def _user_data_problems(self, path: Path) -> list[str]:
        """Load the template and render it for every pool with a JIT config of realistic size."""
        try:
            template = load_template(path)
        except (OSError, UserDataError) as exc:
            return [f"user_data_template: {exc}; point it at a readable string.Template script"]
        for name, pool in self.pools.items():
            try:
                render_user_data(
                    template,
                    jit_config="A" * SAMPLE_JIT_CONFIG_LENGTH,
                    runner_name=f"{self.name_prefix}-{name}-0123456789",
                    pool=name,
                    labels=list(pool.labels),
                    runner_download_url=self.runner_download_url,
                    cache_volume="0" * 36 if pool.cache_volumes else "",
                    cache_mount=pool.cache_volumes.mount if pool.cache_volumes else "",
                )
            except UserDataError as exc:
                sample = f"{SAMPLE_JIT_CONFIG_LENGTH:,}-character JIT config"
                return [f"user_data_template: for pool {name} with a {sample}, {exc}"]
        return []

    def secret_values(self) -> list[str]:
        """Every credential this configuration holds, for `corral.secrets` to keep out of the log."""
        github = self.github
        values = [s.get_secret_value() for s in (github.token, github.private_key, github.webhook_secret) if s]
        password = make_url(self.database_url).password
        return [*values, *([str(password)] if password else [])]

    def uses_volumes(self) -> bool:
        """Whether any pool boots from a volume or has extra ones: then Cinder is needed, and its quota read."""
        return any(
            self.volumes_for(name) or pool.boot_volume_gb or pool.cache_volumes for name, pool in self.pools.items()
        )

    def pool_of_runner(self, name: str) -> str | None:
        """The pool of one of this installation's runners, read from its name (`<name_prefix>-<pool>-<id>`:
        the id comes last and has no dash, so a pool whose name has dashes reads whole); None when the name is
        not one corral gives (another prefix, no id) or names no pool of this config (a removed one)."""
        prefix = f"{self.name_prefix}-"
        if not name.startswith(prefix):
            return None
        pool, _, runner_id = name[len(prefix) :].rpartition("-")
        return pool if pool in self.pools and len(runner_id) == RUNNER_ID_LENGTH else None

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
    """`pools.small.min_idle`: dotted, without the union tag pydantic puts after `min_idle` or `image`."""
    kept = [
        part
        for index, part in enumerate(location)
        if not (index and part in UNION_TAGS.get(str(location[index - 1]), ()))
    ]
    return ".".join(str(part) for part in kept)


BOUNDS = {
    "greater_than_equal": ("ge", "is below the minimum of {limit}; set it to {limit} or more"),
    "less_than_equal": ("le", "is above the maximum of {limit}; set it to {limit} or less"),
    "greater_than": ("gt", "is not above {limit}; set it above {limit}"),
    "less_than": ("lt", "is not below {limit}; set it below {limit}"),
}
"""pydantic's numeric bounds, as `at_least` says them: the value, the bound, the fix."""


def _format_error(error: Mapping[str, Any]) -> list[str]:
    location = _format_location(tuple(error["loc"]))
    kind = error["type"]
    if kind == "extra_forbidden":
        return [f"{location}: unknown key; remove it or check its spelling"]
    if kind == "missing":
        return [f"{location}: required key is missing; add it"]
    if kind in BOUNDS and isinstance(error.get("input"), int | float):
        bound, says = BOUNDS[kind]
        return [f"{location}: {error['input']:,} " + says.format(limit=f"{error['ctx'][bound]:,}")]
    messages = str(error["msg"]).removeprefix("Value error, ").splitlines()
    if not error["loc"]:
        return messages
    return [f"{location}: {message}" for message in messages]


def _read_secret_files(raw: dict[str, Any], base: Path, problems: list[str]) -> dict[str, str]:
    """Resolve `*_file` secrets and `CORRAL_*` variables into the inline secret keys, in place.

    Returns, for each secret that did not come inline, where it came from (`github.token_file`,
    `CORRAL_GITHUB_TOKEN`), so that a problem with its value names what the operator actually wrote.
    """
    sources: dict[str, str] = {}
    github = raw.get("github")
    if not isinstance(github, dict):
        return sources
    for key in ("private_key", "token", "webhook_secret"):
        file_key = f"{key}_file"
        if key in github and github.get(file_key):
            problems.append(
                f"github.{key}: given both inline and as {file_key}, and only one can be meant; remove one of them"
            )
            continue
        if github.get(file_key):
            path = Path(github[file_key])
            path = path if path.is_absolute() else base / path
            sources[f"github.{key}"] = f"github.{file_key}"
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
            sources[f"github.{key}"] = variable
    return sources


def _name_source(problem: str, sources: dict[str, str]) -> str:
    key, separator, rest = problem.partition(": ")
    return f"{sources[key]}{separator}{rest}" if key in sources else problem


def _pool_name_problem(name: str) -> str:
    """Why `name` cannot be a pool's: it becomes part of server names and hostnames."""
    return (
        f"pool name {name!r} cannot be part of a server name: use 1-24 lowercase letters, digits and dashes, "
        "starting and ending with a letter or digit"
    )


CROSS_SECTION_KEYS = (
    "cloud",
    "clouds",
    "default_pool",
    "extra_volumes",
    "user_data_template",
    "name_prefix",
    "runner_version",
)
"""The top-level keys, besides `pools`, that the rules across sections read."""


@functools.cache
def _field_adapter(key: str) -> TypeAdapter[Any]:
    """Validates one top-level key on its own, with the constraints its field declares."""
    field = CorralConfig.model_fields[key]
    annotated: Any = Annotated
    annotation: Any = annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation
    return TypeAdapter(annotation)


def _valid_alone(raw: Mapping[str, Any], keys: Collection[str]) -> dict[str, Any]:
    """The values of `keys` in `raw` that are valid on their own."""
    valid = {}
    for key in keys:
        if key in raw:
            try:
                valid[key] = _field_adapter(key).validate_python(raw[key])
            except ValidationError:
                continue
    return valid


def _problems_across_sections(raw: dict[str, Any], refused: list[str]) -> list[str]:
    """The rules across sections (templates, which pool a job selects, placements, pool names) for a file the
    schema refused: pydantic skips a model's own checks once any field of it failed, so a short webhook secret
    would hide a template's unknown placeholder until the next run. Here they run on the sections valid on
    their own; a rule that needs a section that is not waits for it to be fixed, and neither a problem the
    schema already reported (`refused`) nor one at a key it refused is reported twice."""
    pools_raw = raw.get("pools")
    if not isinstance(pools_raw, dict):
        return []
    pool_names = [name for name in pools_raw if isinstance(name, str)]
    pools = {}
    for name in pool_names:
        try:
            pools[name] = PoolConfig.model_validate(pools_raw[name])
        except ValidationError:
            continue
    fields = _valid_alone(raw, CROSS_SECTION_KEYS)
    invalid = {key for key in CROSS_SECTION_KEYS if key in raw and key not in fields}
    given = set(raw) & set(CorralConfig.model_fields)
    stand_in = CorralConfig.model_construct(_fields_set=given, **{**fields, "pools": pools})
    problems = [f"pools: {_pool_name_problem(name)}" for name in pool_names if not POOL_NAME_PATTERN.match(name)]
    problems += stand_in.problems_across_sections(pool_names, clouds_valid="clouds" not in invalid)
    return [problem for problem in problems if problem not in refused and problem.partition(": ")[0] not in invalid]


def _resolve_template_path(raw: dict[str, Any], base: Path) -> None:
    """A relative `user_data_template` is taken from the config file's folder, like the secret files."""
    template = raw.get("user_data_template")
    if isinstance(template, str) and not Path(template).is_absolute():
        raw["user_data_template"] = str(base / template)


STAND_IN_GITHUB = {"token": "ghp_" + "0" * 36}
"""What `credentials=False` validates in place of the file's `github` section: a token that names nobody."""


def parse_config(raw: object, base: Path = Path(), *, credentials: bool = True) -> CorralConfig:
    """Validate an already-parsed document; raises ConfigError listing every problem.

    `credentials=False` (for `corral simulate`, which contacts nothing) validates everything but the
    credentials: the `github` section is replaced by a stand-in, so a config whose secrets live in files or
    variables of another machine is still read."""
    if not isinstance(raw, dict):
        raise ConfigError(["(top level): the file must be a YAML mapping with github and pools keys"])
    raw = dict(raw)
    if not credentials:
        raw["github"] = dict(STAND_IN_GITHUB)
    if isinstance(raw.get("github"), dict):
        raw["github"] = dict(raw["github"])
    problems: list[str] = []
    sources = _read_secret_files(raw, base, problems)
    _resolve_template_path(raw, base)
    try:
        config = CorralConfig.model_validate(raw)
    except ValidationError as exc:
        for error in exc.errors():
            problems.extend(_name_source(problem, sources) for problem in _format_error(error))
        if any(error["loc"] for error in exc.errors()):  # a field failed: the rules across sections did not run
            problems.extend(_problems_across_sections(raw, problems))
        raise ConfigError(problems) from None
    if problems:
        raise ConfigError(problems)
    for value in config.secret_values():
        secrets.register(value)
    return config


def load_config(path: Path, *, credentials: bool = True) -> CorralConfig:
    """Read and validate a config file; relative `*_file` paths are taken from the file's folder
    (`credentials`: as `parse_config`'s)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read the config file ({exc.strerror or exc})"]) from None
    try:
        raw = parse_yaml(text)
    except DuplicateKey as exc:
        raise ConfigError([str(exc)]) from None
    except YamlProblem as exc:
        raise ConfigError([f"{path}: {exc}"]) from None
    return parse_config(raw, base=path.parent, credentials=credentials)
