"""Scale-set pools: a runner scale set per pool and one message session on it, held by the pool's holder.

A pool with `intake: scale_set` hears of its jobs from GitHub's Actions service instead of webhooks. Its
listener (one task per such pool, on the replica holding the pool's lease) finds or creates the scale set,
opens the one session GitHub allows on it, and long-polls the session's queue. Each message carries the
scale set's statistics; the pool then wants `min(max_runners, min_idle + assigned jobs)` runners, which
the scaler reads from `statistics`. Statistics are absolute, so a message handled twice (it came again
before its acknowledgement landed) changes nothing twice.

Recovery is the point of this module, because it is where the other managers fail:
- a session conflict (409) is most often this pool's own session left by a corral killed -9 or a replica
  that lost the lease: its id is kept in the pool's status row, so it is deleted and the session opened
  again at once; an unknown one is waited out with backoff (it ends when its owner stops polling), counted
  in `corral_scale_set_recoveries_total{kind="session_conflict"}` and logged once a minute;
- an expired queue token is refreshed (`PATCH` the session), an evicted session is opened anew, a scale
  set GitHub deleted (it does after days idle) is created again, the admin token is renewed a minute
  before it expires (`ActionsService`);
- any other error from GitHub backs the listener off (1 s doubling to 60 s) and is logged once and counted;
- what has no recovery of its own (a database error, an answer nobody foresaw) would end the listener's task
  silently and leave the pool deaf while its status said `listening`: the listener is supervised, so it is
  logged with its traceback, shown in the pool's status (`failing`, the error and since when), counted in
  `corral_scale_set_listener_restarts_total{pool}`, and the listener starts again after a backoff (1 s
  doubling to 60 s), keeping its scale set and session.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum

from corral import outages, secrets
from corral.clock import SYSTEM_CLOCK, ClockLike, as_clock
from corral.config import PoolConfig, ScopeConfig, scale_set_name
from corral.engine.backoff import Backoff, LogOnce
from corral.engine.running import Running
from corral.github.client import GitHubClient, GitHubError, JitConfig
from corral.github.scaleset import (
    ActionsService,
    NotFound,
    QueueMessage,
    QueueTokenExpired,
    ScaleSet,
    Session,
    SessionConflict,
    Statistics,
)
from corral.metrics import (
    SCALE_SET_LISTENER_RESTARTS,
    SCALE_SET_MESSAGES,
    SCALE_SET_POLLS,
    SCALE_SET_RECOVERIES,
)
from corral.model import CAPACITY_STATES, Reason
from corral.store import Store, pools, runners, scaleset_jobs

logger = logging.getLogger("corral.scalesets")


class SessionState(StrEnum):
    STARTING = "starting"
    LISTENING = "listening"
    CONFLICT = "conflict"
    """Another session holds the scale set; waited out with backoff."""
    FAILING = "failing"
    """The last attempt failed; trying again with backoff (`error` says why)."""


@dataclass(frozen=True)
class ScaleSetStatus:
    """What the API and dashboard show of a scale-set pool's intake."""

    scale_set_id: int | None = None
    state: SessionState = SessionState.STARTING
    statistics: Statistics | None = None
    statistics_at: datetime | None = None
    """When the listener heard `statistics` (the engine's clock)."""
    error: str | None = None
    """Why the listener last failed; kept once it listens again (`state` says whether it still fails)."""
    error_since: datetime | None = None
    """When the listener began failing with `error` (the first of its failures in a row)."""
    restarts: int = 0
    """Times the listener stopped on an error it has no recovery for and was started again, since this
    replica took the pool (`corral_scale_set_listener_restarts_total` counts them too)."""
    job_messages: int = 0
    """Job messages handled since this replica took the pool (each counted once, redeliveries not)."""
    recoveries: int = 0
    """Recoveries since then, of every kind (`corral_scale_set_recoveries_total` has them by kind)."""


def jobs_awaiting_runners(statistics: Statistics | None, busy: int, done_since: int = 0) -> int:
    """The scale set's jobs that want a free runner: assigned to it and not yet running, as of now.

    `statistics` are GitHub's as of the listener's last message; `busy` is how many of the pool's runners
    corral last saw running a job, `done_since` how many it saw end one after those statistics were heard.
    Either view may be ahead of the other, and each skew once cost a runner no job would take (8 runners for
    6 jobs, then 7): a job that ended is still counted assigned and running until its `JobCompleted` comes,
    while its runner may already be gone from corral's count (`assigned - busy` counted it as waiting); a job
    that started is still counted assigned and not running until its `JobStarted` comes, while corral may
    already count its runner busy (`assigned - running` counted it as waiting); and a short job may start and
    end between two messages, its runner seen done by corral while the statistics still count it assigned
    and not running (`assigned - max(running, busy)` counted it as waiting). Each job corral saw running or
    done since is in `assigned` still, once, so the larger of the two counts is the one behind neither.
    """
    if statistics is None:
        return 0
    return max(statistics.assigned - max(statistics.running, busy + done_since), 0)


def scale_set_labels(name: str, pool: PoolConfig) -> tuple[str, ...]:
    """The labels the pool's scale set is registered with: its name first, then the pool's labels, each once
    (GitHub compares labels ignoring case).

    GitHub routes a job to a scale set when every label of its `runs-on` is one of the set's labels: without
    its name among them, `runs-on: <scale set name>` (the form GitHub documents) would never be served. GitHub's
    own listener (actions-runner-controller's `buildRunnerScaleSetLabels`) registers the same."""
    labels: dict[str, str] = {}
    for label in (scale_set_name(name, pool), *pool.labels):
        labels.setdefault(label.lower(), label)
    return tuple(labels.values())


class ScaleSetListener:
    """One pool's scale set and session, for as long as this replica holds the pool."""

    def __init__(
        self,
        pool: str,
        running: Running,
        service: ActionsService,
        store: Store,
        owner: str,
        on_statistics: Callable[[str], None],
        log_once: LogOnce,
        clock: ClockLike = SYSTEM_CLOCK,
    ) -> None:
        self.pool = pool
        self._running = running
        self._service = service
        self._store = store
        self._owner = owner
        self._on_statistics = on_statistics
        self._log_once = log_once
        self._clock = as_clock(clock)
        self._restart_backoff = Backoff(base_s=1.0, cap_s=60.0, clock=self._clock)
        """Between restarts after errors the listener has no recovery for; reset once it handled a message (or
        opened a session): polls that hear nothing do not prove the error gone."""
        self.status = ScaleSetStatus()
        self._scale_set: ScaleSet | None = None
        self._session: Session | None = None
        self._last_message_id = 0
        self._applied: tuple[str, str, tuple[str, ...]] | None = None
        """The name, runner group and labels the scale set was last brought in line with."""
        self.ended_runners: dict[str, Reason] = {}
        """Runners GitHub will hand no (more) job: named in a `JobCompleted` (their job is over, run or not),
        or of a scale set GitHub deleted. The scaler retires those still idle and removes each name it has
        dealt with."""
        self.replaced_at: datetime | None = None
        """When the pool's scale set was last replaced by another (GitHub deleted it, or a reload renamed it):
        a runner created before then has its JIT config from the old one, and GitHub hands it no job."""
        self._known_id: int | None = None
        """The scale set this pool last had, as this listener or (at first) the pool's status row knew it."""
        self._read_known = False
        self._superseded: set[int] = set()
        """Scale sets a new one replaced (a reload renamed the pool's, or moved it to another group): deleted
        once no runner made before the change is left, so their running jobs finish."""

    @property
    def scale_set_id(self) -> int | None:
        return self._scale_set.id if self._scale_set else None

    def _settings(self) -> PoolConfig:
        """The pool's settings in force now: the listener lives across reloads, and each step reads them anew."""
        return self._running.config.pools[self.pool]

    def _wanted(self) -> tuple[str, str, tuple[str, ...]]:
        pool = self._settings()
        return scale_set_name(self.pool, pool), pool.runner_group, scale_set_labels(self.pool, pool)

    async def run(self) -> None:
        """Listen until cancelled, started again after any error (see the module's docstring): an exception
        that ended this task would leave the pool deaf while it showed `listening`."""
        while True:
            try:
                await self._serve()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                wait = self._restart_backoff.failed()
                self._restarted(exc, wait)
                await self._clock.sleep(wait)

    def _restarted(self, exc: Exception, wait: float) -> None:
        """Show, count and log an error the listener had no recovery for; it starts again in `wait` s."""
        SCALE_SET_LISTENER_RESTARTS.labels(self.pool).inc()
        self._failing(outages.describe(exc))
        self.status = replace(self.status, restarts=self.status.restarts + 1)
        logger.error(
            "pool %s: the scale set listener stopped on an error it has no recovery for; starting it again in "
            "%.0fs: %s",
            self.pool,
            wait,
            self.status.error,
            exc_info=exc,
        )

    def _failing(self, error: str, state: SessionState = SessionState.FAILING) -> None:
        """The listener is not listening, for `error`; `error_since` keeps the first failure of a run."""
        failing = self.status.state in (SessionState.FAILING, SessionState.CONFLICT)
        since = self.status.error_since if failing and self.status.error_since is not None else self._clock.now()
        self.status = replace(self.status, state=state, error=error, error_since=since)

    def _listening(self) -> None:
        """The listener listens (again): the next error starts a new run of failures."""
        if self.status.state is not SessionState.LISTENING:
            self.status = replace(self.status, state=SessionState.LISTENING)

    async def _serve(self) -> None:
        """Listen, recovering from whatever the service does; raises only what has no recovery here."""
        backoff = Backoff(base_s=1.0, cap_s=60.0, clock=self._clock)
        # A conflict is most often a session the pool's former holder is closing right now (a lease handed
        # over): asking again costs one call, so it is asked often, not after minutes.
        conflicts = Backoff(base_s=1.0, cap_s=CONFLICT_RETRY_CAP_S, clock=self._clock)
        while True:
            try:
                await self._ensure_scale_set()
                await self._open_session()
                backoff.succeeded()
                conflicts.succeeded()
                self._log_once.clear(f"scaleset:{self.pool}")
                await self._listen()
            except asyncio.CancelledError:
                raise
            except SessionConflict:
                wait = conflicts.failed()
                self._recovered("session_conflict")
                self._failing("another session holds it", SessionState.CONFLICT)
                self._log_once.warning(
                    f"scaleset:{self.pool}",
                    f"pool {self.pool}: scale set {self.scale_set_id} has a session corral does not know "
                    f"(another corral on this scale set, or one that ended without closing it); waiting it out, "
                    f"next try in {wait:.0f}s",
                )
                await self._clock.sleep(wait)
            except NotFound:
                # The scale set went (GitHub deletes idle ones): create it again, at once.
                self._recovered("scale_set_gone")
                logger.warning(
                    "pool %s: scale set %s is gone on GitHub; creating it again", self.pool, self.scale_set_id
                )
                self._scale_set = None
                self._session = None
            except (GitHubError, KeyError, ValueError) as exc:
                wait = backoff.failed()
                self._recovered("error")
                self._failing(secrets.redact(str(exc))[:300])
                self._log_once.warning(
                    f"scaleset:{self.pool}", f"pool {self.pool}: scale set intake failed, again in {wait:.0f}s: {exc}"
                )
                await self._clock.sleep(wait)

    async def _ensure_scale_set(self) -> None:
        """Find or create the pool's scale set; bring its labels and group in line with the config."""
        pool = self._settings()
        name = scale_set_name(self.pool, pool)
        group_id = await self._service.runner_group_id(pool.runner_group)
        labels = list(scale_set_labels(self.pool, pool))
        current = self._scale_set
        if current is None or current.name != name or current.runner_group_id != group_id:
            current = await self._service.find_scale_set(group_id, name)
        if current is None:
            current = await self._service.create_scale_set(name, group_id, labels)
            logger.info("pool %s: scale set %r created (id %d)", self.pool, name, current.id)
        elif list(current.labels) != labels or current.runner_group_id != group_id:
            current = await self._service.update_scale_set(current.id, name, group_id, labels)
            logger.info("pool %s: scale set %r updated (id %d)", self.pool, name, current.id)
        await self._note_scale_set(current)
        self._scale_set = current
        self._applied = (name, pool.runner_group, tuple(labels))
        self.status = replace(self.status, scale_set_id=current.id)

    async def _open_session(self) -> None:
        """Open the scale set's session; a conflict with this pool's own earlier session is taken over."""
        assert self._scale_set is not None
        if self._session is not None:
            self._listening()  # started again after an error, on the session it had
            return
        opening = asyncio.ensure_future(self._new_session(self._scale_set.id))
        try:
            session = await asyncio.shield(opening)
        except asyncio.CancelledError:
            # Stopped (the lease went to another replica) while GitHub may be opening the session: its answer
            # is awaited, so that `close` ends the session. Left open, nobody could name it, and the pool's
            # next holder would meet a conflict until GitHub expired it, minutes later.
            with contextlib.suppress(Exception):
                self._session = await opening
            raise
        self._session = session
        self._last_message_id = 0
        self._take(session.statistics)
        self._listening()
        self._restart_backoff.succeeded()
        logger.info("pool %s: listening on scale set %d (session %s)", self.pool, session.scale_set_id, session.id)

    async def _new_session(self, scale_set_id: int) -> Session:
        """A new session on the scale set, recorded in the pool's status row (where a later holder finds it if
        this replica dies holding it); a conflict with the session the row names is taken over."""
        try:
            session = await self._service.create_session(scale_set_id, self._owner)
        except SessionConflict:
            stale = (await self._store.run(pools.statuses)).get(self.pool)
            stale_id = stale.scale_set_session if stale else None
            if not stale_id:
                raise
            # The session is this pool's own, left by a corral that was killed or lost the lease: this
            # replica holds the pool now, so end that session and open ours.
            self._recovered("session_taken_over")
            logger.warning("pool %s: taking over session %s left by an earlier holder", self.pool, stale_id)
            old = Session(stale_id, scale_set_id, "", "", Statistics())
            with contextlib.suppress(NotFound):
                await self._service.delete_session(old)
            await self._store.run(pools.release_session, self.pool, stale_id, now=self._clock.now())
            session = await self._service.create_session(scale_set_id, self._owner)
        try:
            await self._store.run(pools.set_scale_set, self.pool, scale_set_id, session.id, now=self._clock.now())
        except Exception:
            # Unrecorded, the session would outlive a crash of this replica unnamed: end it, and try again.
            with contextlib.suppress(GitHubError, OSError):
                await self._service.delete_session(session)
            raise
        return session

    async def _listen(self) -> None:
        """Poll, handle and acknowledge messages; returns when the session must be opened anew."""
        while self._session is not None:
            if self._wanted() != self._applied:
                # A reload changed the pool's labels, group or scale set name: bring the scale set in line
                # (within one long poll); another scale set altogether needs a session of its own.
                listened = self.scale_set_id
                await self._ensure_scale_set()
                if self.scale_set_id != listened:
                    await self.close()
                    return
            if self._superseded:
                await self._delete_superseded()
            session = self._session
            try:
                message = await self._service.get_message(session, self._last_message_id, self._settings().max_runners)
            except QueueTokenExpired:
                await self._refresh(session)
                continue
            except NotFound:
                await self._session_ended()
                return
            if message is None:
                SCALE_SET_POLLS.labels("empty").inc()
                self._listening()
                continue
            SCALE_SET_POLLS.labels("message").inc()
            await self._handle(session, message)
            self._listening()
            self._restart_backoff.succeeded()

    async def _delete_superseded(self) -> None:
        """Delete the scale sets a new one replaced, once the last runner made before then is gone (one GitHub
        deleted itself is gone already: fine)."""
        assert self.replaced_at is not None
        oldest = await self._store.run(runners.listing, pool=self.pool, states=CAPACITY_STATES, limit=1)
        if oldest and oldest[0].created_at < self.replaced_at:
            return
        for scale_set_id in sorted(self._superseded):
            with contextlib.suppress(NotFound):
                await self._service.delete_scale_set(scale_set_id)
                logger.info("pool %s: scale set %d, which another replaced, deleted", self.pool, scale_set_id)
            self._superseded.discard(scale_set_id)

    async def _refresh(self, session: Session) -> Session | None:
        """A new queue token for the session; None (and the session forgotten) if GitHub ended it meanwhile
        (an evicted session's calls answer 401, and its refresh 404)."""
        try:
            self._session = await self._service.refresh_session(session)
        except NotFound:
            await self._session_ended()
            return None
        self._recovered("queue_token_refreshed")
        return self._session

    async def _session_ended(self) -> None:
        self._recovered("session_evicted")
        logger.warning("pool %s: the session was ended on GitHub's side; opening a new one", self.pool)
        ended, self._session = self._session, None
        if ended is not None:
            await self._store.run(pools.release_session, self.pool, ended.id, now=self._clock.now())

    async def _handle(self, session: Session, message: QueueMessage) -> None:
        """Acknowledge first (as GitHub's own listener does), then acquire what is available, then scale."""
        fresh = message.id > self._last_message_id
        try:
            await self._service.delete_message(session, message.id)
        except QueueTokenExpired:
            refreshed = await self._refresh(session)
            if refreshed is None:
                return  # the message comes again on the new session, or its jobs show in its statistics
            session = refreshed
            await self._service.delete_message(session, message.id)
        self._last_message_id = max(self._last_message_id, message.id)
        if not fresh:
            return
        for job in message.jobs:
            SCALE_SET_MESSAGES.labels(job.kind if job.kind in KNOWN_KINDS else "other").inc()
            if job.kind == "JobCompleted" and job.runner_name:
                self._ended(job.runner_name, Reason.ABANDONED_JOB)
        self.status = replace(self.status, job_messages=self.status.job_messages + len(message.jobs))
        available = [job.runner_request_id for job in message.jobs if job.kind == "JobAvailable"]
        if available:
            await self._service.acquire_jobs(session, available)
        self._take(message.statistics)
        # Last: the jobs' rows are for their story and usage; scaling must not wait on them.
        await self._store.run(scaleset_jobs.record, self.pool, message.jobs, now=self._clock.now())

    def _recovered(self, kind: str) -> None:
        SCALE_SET_RECOVERIES.labels(kind).inc()
        self.status = replace(self.status, recoveries=self.status.recoveries + 1)

    def _take(self, statistics: Statistics) -> None:
        self.status = replace(self.status, statistics=statistics, statistics_at=self._clock.now())
        self._on_statistics(self.pool)

    async def close(self) -> None:
        """A clean stop: end the session, so the next holder opens one at once."""
        if self._session is None:
            return
        session, self._session = self._session, None
        try:
            await self._service.delete_session(session)
            await self._store.run(pools.release_session, self.pool, session.id, now=self._clock.now())
        except (GitHubError, OSError) as exc:
            logger.warning("pool %s: could not close the scale set session: %s", self.pool, exc)

    async def delete_scale_set(self) -> None:
        """The pool is gone and so are its runners: its scale set goes too, with any it replaced (one already
        gone is fine)."""
        doomed = self._superseded | ({self._scale_set.id} if self._scale_set else set())
        for scale_set_id in sorted(doomed):
            with contextlib.suppress(NotFound):
                await self._service.delete_scale_set(scale_set_id)
            logger.info("pool %s: scale set %d deleted", self.pool, scale_set_id)
        self._superseded.clear()
        self._scale_set = None

    async def jit_config(self, runner_name: str) -> JitConfig:
        """A JIT config from the scale set itself: its runners belong to the scale set."""
        if self._scale_set is None:
            await self._ensure_scale_set()
        assert self._scale_set is not None
        return await self._service.generate_jit_config(self._scale_set.id, runner_name)

    def _ended(self, runner_name: str, reason: Reason) -> None:
        """Note the newest ended runner, forgetting the oldest beyond MAX_ENDED_RUNNERS."""
        self.ended_runners.pop(runner_name, None)
        self.ended_runners[runner_name] = reason
        while len(self.ended_runners) > MAX_ENDED_RUNNERS:
            del self.ended_runners[next(iter(self.ended_runners))]

    async def _note_scale_set(self, scale_set: ScaleSet) -> None:
        """Remember the pool's scale set; one that replaces another (across restarts too: the status row keeps
        the last id) makes the runners created before now useless."""
        if not self._read_known:
            stored = (await self._store.run(pools.statuses)).get(self.pool)
            self._known_id = stored.scale_set_id if stored else None
            self._read_known = True
        if self._known_id is not None and self._known_id != scale_set.id:
            self.replaced_at = self._clock.now()
            self._superseded.add(self._known_id)
            logger.warning(
                "pool %s: scale set %d replaces %d; the runners made for the old one are retired",
                self.pool,
                scale_set.id,
                self._known_id,
            )
        self._known_id = scale_set.id


KNOWN_KINDS = frozenset({"JobAvailable", "JobAssigned", "JobStarted", "JobCompleted"})

CONFLICT_RETRY_CAP_S = 10.0
"""The longest wait between two tries to open a session while another holds the scale set."""
MAX_ENDED_RUNNERS = 10_000
"""Ended runners remembered per pool at most (the oldest are forgotten first; a pass drops every name but
those of runners still starting, so the bound matters only if no pass runs)."""


class ScaleSetIntake:
    """The listeners of the scale-set pools this replica holds, and the Actions service connections."""

    def __init__(
        self,
        running: Running,
        github: GitHubClient,
        store: Store,
        owner: str,
        on_statistics: Callable[[str], None],
        log_once: LogOnce,
        clock: ClockLike = SYSTEM_CLOCK,
    ) -> None:
        self._running = running
        self._github = github
        self._store = store
        self._owner = owner
        self._on_statistics = on_statistics
        self._log_once = log_once
        self._clock = clock
        """What the listeners read time from and wait by."""
        self._services: dict[str, ActionsService] = {}
        self.listeners: dict[str, ScaleSetListener] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._retiring: dict[str, ScaleSetListener] = {}
        """Listeners of pools taken out of scale-set intake, kept to delete their scale set at the end."""
        self._closing: set[asyncio.Task[None]] = set()
        """Listeners being stopped: their task ends, then their session (`_stop`)."""

    def _service(self, scope: ScopeConfig) -> ActionsService:
        service = self._services.get(scope.key)
        if service is None:
            service = self._services[scope.key] = ActionsService(self._github, scope)
        return service

    def ensure(self, held: set[str]) -> None:
        """A listener for every scale-set pool in `held`; those of other pools are stopped. A pool removed
        from the configuration keeps its scale set until its last runner is gone (`forget`)."""
        config = self._running.config
        wanted = {name for name in held if name in config.pools and config.pools[name].intake == "scale_set"}
        for name in set(self.listeners) - wanted:
            if name not in config.pools or config.pools[name].intake != "scale_set":
                self._retiring[name] = self.listeners[name]
        for name in wanted - set(self.listeners):
            listener = ScaleSetListener(
                name,
                self._running,
                self._service(config.pools[name].scope),
                self._store,
                self._owner,
                self._on_statistics,
                self._log_once,
                clock=self._clock,
            )
            self.listeners[name] = listener
            self._tasks[name] = asyncio.get_running_loop().create_task(listener.run(), name=f"corral-scaleset-{name}")
        for name in set(self.listeners) - wanted:
            self._stop(name)

    def _stop(self, name: str) -> None:
        """Stop the pool's listener and end its session, in the background (a lease handed over must not wait
        on GitHub)."""
        listener = self.listeners.pop(name)
        closing = asyncio.get_running_loop().create_task(
            _stop_and_close(listener, self._tasks.pop(name)), name=f"corral-scaleset-close-{name}"
        )
        self._closing.add(closing)
        closing.add_done_callback(self._closing.discard)

    @property
    def retiring(self) -> set[str]:
        return set(self._retiring)

    async def forget(self, name: str) -> None:
        """A pool removed from scale-set intake has no runner left: delete its scale set on GitHub."""
        listener = self._retiring.pop(name, None)
        if listener is not None:
            await listener.delete_scale_set()

    def statistics(self, name: str) -> Statistics | None:
        listener = self.listeners.get(name)
        return listener.status.statistics if listener else None

    def statistics_at(self, name: str) -> datetime | None:
        listener = self.listeners.get(name)
        return listener.status.statistics_at if listener else None

    def ended_runners(self, name: str) -> dict[str, Reason]:
        listener = self.listeners.get(name)
        return listener.ended_runners if listener else {}

    def replaced_at(self, name: str) -> datetime | None:
        listener = self.listeners.get(name)
        return listener.replaced_at if listener else None

    def status(self, name: str) -> ScaleSetStatus | None:
        listener = self.listeners.get(name)
        return listener.status if listener else None

    async def jit_config(self, name: str, runner_name: str) -> JitConfig:
        listener = self.listeners.get(name)
        if listener is None:
            raise GitHubError(f"pool {name}: its scale set is not being listened to on this replica")
        return await listener.jit_config(runner_name)

    async def close(self) -> None:
        """Stop every listener and end its session, including those being stopped already."""
        for name in list(self.listeners):
            await _stop_and_close(self.listeners.pop(name), self._tasks.pop(name))
        await asyncio.gather(*self._closing, return_exceptions=True)
        for service in self._services.values():
            await service.aclose()


async def _stop_and_close(listener: ScaleSetListener, task: asyncio.Task[None]) -> None:
    """Cancel the listener's task and wait for it to end before ending its session: a session GitHub was
    opening when the task was cancelled is known only once the task has its answer."""
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await listener.close()
