"""One look at both far ends per period, shared by every pool: every owned server in one listing per cloud,
every registration once per scope.

Absence is only evidence about runners that were already in their state when the look began: a runner
created or moved after the listing started may simply not be in it yet. `Observation.started_at` lets the
judge tell the two apart, so a shared, slightly old observation never condemns a runner it could not see.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import sys
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypeVar

from corral.clock import SYSTEM_CLOCK, Clock
from corral.cloud.clouds import CloudSet
from corral.cloud.provider import CloudError, CloudServer, CloudTransientError
from corral.cloud.quota import Headroom
from corral.config import ScopeConfig
from corral.engine.backoff import LogOnce
from corral.engine.running import Running
from corral.engine.supervisor import ActionKind
from corral.executors import call_blocking
from corral.github.client import GitHubClient, GitHubError, RegisteredRunner
from corral.metrics import ACTION_ERRORS, CLOUD_CALLS, GITHUB_ERRORS, OBSERVE_SECONDS
from corral.outages import DependencyHealth, DependencyUnavailable, log_unexpected

logger = logging.getLogger("corral.engine")

T = TypeVar("T")


@dataclass(frozen=True)
class Changes:
    """What one look saw differently from the look before it (generation `since`): the runners whose server
    appeared, left or changed, and the registrations, by scope and name, likewise. A runner in neither, judged
    to stay as it was against the look before, stays against this one too (`RunnerJudge`): at 10,000 runners,
    judging every one each pass was a third of the pass's CPU."""

    since: int
    servers: frozenset[str]
    """Runner ids."""
    registrations: frozenset[tuple[str, str]]
    """(scope key, runner name)."""


def _changed(before: dict[str, T], after: dict[str, T]) -> set[str]:
    """The keys whose value is new, gone or different (an unchanged value is mostly the same object)."""
    changed = {key for key, value in after.items() if (old := before.get(key)) is not value and old != value}
    changed.update(key for key in before if key not in after)
    return changed


def changes_between(before: Observation | None, after: Observation) -> Changes | None:
    """What `after` says differently from `before`; None when the two cannot be compared runner by runner: no
    look before, or the two listed different clouds or scopes (absence means something else in each)."""
    if before is None or before.servers is None or after.servers is None:
        return None
    if before.listed != after.listed or before.registrations.keys() != after.registrations.keys():
        return None
    return Changes(
        since=before.generation,
        servers=frozenset(_changed(before.servers, after.servers)),
        registrations=frozenset(
            (scope, name)
            for scope, named in after.registrations.items()
            for name in _changed(before.registrations[scope], named)
        ),
    )


@dataclass(frozen=True)
class Observation:
    """What the clouds and GitHub said in one look. `servers` holds the servers of the clouds in `listed`
    (None when no cloud could be listed); a scope missing from `registrations` could not be listed either.
    Absence proves nothing about a runner of a cloud, or a scope, that could not be listed."""

    generation: int
    started_at: datetime
    servers: dict[str, CloudServer] | None
    listed: frozenset[str] = frozenset()
    """The clouds whose listing `servers` holds."""
    registrations: dict[str, dict[str, RegisteredRunner]] = field(default_factory=dict)
    headrooms: dict[str, Headroom | None] = field(default_factory=dict)
    """Each cloud's project quota less its usage, read with the servers (None when it could not be read), by
    name, the first cloud first."""
    changes: Changes | None = None
    """What differs from the look before (set by the `Observer`); None: everything may have."""

    @property
    def headroom(self) -> Headroom | None:
        """The first cloud's: what the pools' views, the dashboard and the headroom gauge show."""
        return next(iter(self.headrooms.values()), None)

    def listed_cloud(self, cloud: str) -> bool:
        """Whether this look listed `cloud`, so that a server missing from it is known to be gone."""
        return self.servers is not None and cloud in self.listed

    def server_for(self, runner_id: str) -> CloudServer | None:
        return None if self.servers is None else self.servers.get(runner_id)

    def registration_for(self, scope_key: str, name: str) -> RegisteredRunner | None:
        return self.registrations.get(scope_key, {}).get(name)


CLOUD_MEANWHILE = "judges none of that cloud's runners by their servers, and lists it again every look"
"""What corral does while a cloud cannot be listed, as the line that reports the outage says."""
GITHUB_MEANWHILE = "judges no runner by its registration, and lists them again every look"
"""What corral does while GitHub does not answer, as the line that reports the outage says."""


def github_unreachable(exc: GitHubError) -> bool:
    """No answer at all, or GitHub's own failure (a 5xx): an outage, not a refusal of what corral asked."""
    return exc.status is None or exc.status >= 500


class Outages:
    """The clouds' and GitHub's health, kept from one look to the next (the database's is the store's)."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        """`clock` stamps outages' beginnings and times them; `observe` must read the same one (`began_at`)."""
        self.clock = clock
        self._clouds: dict[str, DependencyHealth] = {}
        self.github = DependencyHealth("github", GITHUB_MEANWHILE, clock=clock)

    def cloud(self, name: str) -> DependencyHealth:
        if name not in self._clouds:
            self._clouds[name] = DependencyHealth(f"cloud:{name}", CLOUD_MEANWHILE, clock=self.clock)
        return self._clouds[name]


async def observe(
    generation: int,
    clouds: CloudSet,
    github: GitHubClient,
    scope_keys: Iterable[str],
    *,
    log_once: LogOnce,
    executor: Executor | None = None,
    volumes: bool = False,
    outages: Outages | None = None,
    clock: Clock | None = None,
) -> Observation:
    """List both sides at once: each cloud in a worker thread, GitHub's scopes concurrently; and read each
    project's headroom (one call to Nova, one to Cinder when a pool has `volumes`). A cloud that cannot be
    listed is left out of `listed`: absence proves nothing about its runners, while the others are judged.
    `outages` is told whether each cloud and GitHub answered (each look is their probe). `clock` (by default
    the outages' own, else the system's) stamps the look's start."""
    clock = clock or (outages.clock if outages is not None else SYSTEM_CLOCK)
    started_at = clock.now()
    began_at = clock.monotonic()

    several = len(clouds.names) > 1

    async def cloud_read(cloud: str, operation: str, call: Callable[[], T], failed: str) -> T | None:
        """One read of a cloud in a worker thread: counted, and its failure logged once (None then)."""
        key = f"cloud:{operation}:{cloud}"
        # The servers' listing is the cloud's probe: while it finds the cloud unreachable, that is one outage,
        # logged when it begins and ends (a refusal, by contrast, is a fault of the request, said each minute).
        health = outages.cloud(cloud) if outages is not None and operation == "list_servers" else None
        try:
            read = await call_blocking(executor, call)
        except CloudError as exc:
            CLOUD_CALLS.labels(operation, type(exc).__name__).inc()
            if health is not None and isinstance(exc, CloudTransientError):
                health.failed(exc, began_at)
            else:
                log_once.warning(key, f"{f'cloud {cloud}: ' if several else ''}{failed}: {exc}")
            return None
        CLOUD_CALLS.labels(operation, "ok").inc()
        log_once.clear(key)
        if health is not None:
            health.succeeded()
        return read

    async def servers() -> dict[str, list[CloudServer] | None]:
        listings = await asyncio.gather(
            *(
                cloud_read(
                    name,
                    "list_servers",
                    functools.partial(clouds.list_servers, name),
                    "cannot list servers, judging no runner by the cloud for now",
                )
                for name in clouds.names
            )
        )
        return dict(zip(clouds.names, listings, strict=True))

    async def headrooms() -> dict[str, Headroom | None]:
        read = await asyncio.gather(
            *(
                cloud_read(
                    name,
                    "read_limits",
                    functools.partial(clouds.headroom, name, volumes),
                    "cannot read the project's limits, planning without them",
                )
                for name in clouds.names
            )
        )
        return dict(zip(clouds.names, read, strict=True))

    unreachable: list[GitHubError] = []
    """Listings that found GitHub unreachable (no answer, or a 5xx) in this look."""

    async def registrations(key: str) -> tuple[str, dict[str, RegisteredRunner] | None]:
        scope = ScopeConfig.from_key(key)
        if github.paused_for(scope) > 0:
            return key, None  # at the rate limit: absent, so nothing is judged by its absence
        try:
            runners = await github.list_runners(scope)
        except GitHubError as exc:
            GITHUB_ERRORS.labels(type(exc).__name__).inc()
            if outages is not None and github_unreachable(exc):
                unreachable.append(exc)
            else:
                log_once.warning(f"github:list:{key}", f"cannot list runners of {key}: {exc}")
            return key, None
        log_once.clear(f"github:list:{key}")
        return key, {runner.name: runner for runner in runners}

    # One task group: an exception none of these expected (a bug, a scope corral cannot read) ends the look
    # with every part of it awaited, none left running unheard; the observer logs and counts it once.
    try:
        async with asyncio.TaskGroup() as group:
            listing = group.create_task(servers())
            limits = group.create_task(headrooms())
            scopes = [group.create_task(registrations(key)) for key in sorted(set(scope_keys))]
    except ExceptionGroup as failed:
        if len(failed.exceptions) == 1:
            raise failed.exceptions[0] from None  # as it was raised: the log reads as for any other error
        raise
    listed = {cloud: found for cloud, found in listing.result().items() if found is not None}
    by_scope = {key: found for key, found in (scope.result() for scope in scopes) if found is not None}
    if outages is not None:
        # GitHub is down when no scope could be listed for want of an answer; one scope listed says it is up.
        if by_scope:
            outages.github.succeeded()
        elif unreachable:
            outages.github.failed(unreachable[0], began_at)
    read = limits.result()
    return Observation(
        generation=generation,
        started_at=started_at,
        servers={server.runner_id: server for found in listed.values() for server in found} if listed else None,
        listed=frozenset(listed),
        registrations=by_scope,
        headrooms=read,
    )


def _unexpected(message: str) -> None:
    """Log the exception being handled once, and count it (`corral_action_errors_total{kind="observe"}`)
    unless it is a dependency's outage, which is logged and counted as one when it begins."""
    if not isinstance(sys.exc_info()[1], DependencyUnavailable):
        ACTION_ERRORS.labels(ActionKind.OBSERVE.value).inc()
    log_unexpected(logger, message)


class Observer:
    """Keeps `latest` fresh: one look every `interval`, or sooner when asked; tells listeners after each."""

    def __init__(
        self,
        look: Callable[[int], Awaitable[Observation]],
        on_observed: Callable[[Observation], Awaitable[None]],
        running: Running,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """Looks every `reconcile_interval` of the configuration in force (a reload changes the next wait)."""
        self._clock = clock
        self._look = look
        self._on_observed = on_observed
        self._running = running
        self._asked = asyncio.Event()
        self.latest: Observation | None = None
        self.generation = 0
        self._begun = 0
        self._acted = 0
        self._done = asyncio.Event()

    def refresh(self) -> None:
        """Look again as soon as the current look (if any) is done."""
        self._asked.set()

    async def look_now(self) -> Observation | None:
        """Ask for a look and wait until one that began after this call has been acted on."""
        wanted = self._begun + 1
        self.refresh()
        while self._acted < wanted:
            self._done.clear()
            await self._done.wait()
        return self.latest

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self._asked.clear()
            self._begun += 1
            started = self._clock.monotonic()
            try:
                observation = await self._look(self.generation + 1)
            except Exception:
                _unexpected("looking at the cloud and GitHub failed unexpectedly; trying again shortly")
                observation = None
            if observation is not None:
                observation = dataclasses.replace(observation, changes=changes_between(self.latest, observation))
                self.generation = observation.generation
                self.latest = observation
                OBSERVE_SECONDS.observe(self._clock.monotonic() - started)
                try:
                    await self._on_observed(observation)
                except Exception:
                    _unexpected("acting on an observation failed unexpectedly")
            self._acted = self._begun
            self._done.set()
            waiters = [asyncio.ensure_future(self._asked.wait()), asyncio.ensure_future(stop.wait())]
            try:
                await asyncio.wait(
                    waiters, timeout=self._running.config.reconcile_interval, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                for waiter in waiters:
                    waiter.cancel()
