"""Runner queries: intent written before acting, guarded transitions, and the reads the engine and API make.

Each function takes the connection of one transaction (see `Database.run`). A transition is one guarded
`UPDATE ... RETURNING` (it only applies if the runner is still in the state it was read in, so two workers
or two replicas can never both move one runner) and its event, in the same transaction; a group of
transitions shares one transaction.
"""

from __future__ import annotations

import functools
import json
import secrets
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Connection,
    Select,
    String,
    Text,
    bindparam,
    cast,
    func,
    insert,
    select,
    text,
    update,
)

from corral.model import (
    CAPACITY_STATES,
    LIVE_STATES,
    RUNNER_ID_LENGTH,
    JobState,
    Reason,
    Runner,
    RunnerEvent,
    RunnerState,
    Transition,
)
from corral.store import leases
from corral.store.leases import Fence
from corral.store.schema import JOBS, RUNNERS, UTCDateTime, one_of
from corral.store.schema import RUNNER_EVENTS as EVENTS

COLUMNS = (
    RUNNERS.c.id,
    RUNNERS.c.pool,
    RUNNERS.c.scope,
    RUNNERS.c.state,
    RUNNERS.c.name,
    cast(RUNNERS.c.labels, Text).label("labels"),  # as text: decoded once per distinct list (`_labels`)
    RUNNERS.c.reason,
    RUNNERS.c.message,
    RUNNERS.c.created_at,
    RUNNERS.c.state_changed_at,
    RUNNERS.c.server_id,
    RUNNERS.c.github_runner_id,
    RUNNERS.c.job_id,
    RUNNERS.c.registered_at,
    RUNNERS.c.image_id,
    RUNNERS.c.cloud,
    RUNNERS.c.cache,
)
LIVE = [state.value for state in LIVE_STATES]
CAPACITY = [state.value for state in CAPACITY_STATES]
POOL_LOCK_NAMESPACE = 0x636F72  # first key of the per-pool advisory lock; the second is hashtext(pool)


def new_runner_id() -> str:
    """Ten lowercase hex characters: short enough for server names, unguessable enough."""
    return secrets.token_hex(RUNNER_ID_LENGTH // 2)


def _reason(value: str) -> Reason:
    try:
        return Reason(value)
    except ValueError:
        return Reason.UNKNOWN


@functools.lru_cache(maxsize=1024)
def _labels(stored: str | None) -> tuple[str, ...]:
    """A runner's labels from their stored JSON text. A pool's runners share one list, so a pass over thousands
    of them decodes it once: decoding every row's was a quarter of a 10,000-runner pass's CPU."""
    return tuple(json.loads(stored) or ()) if stored else ()


def to_runner(row: Any) -> Runner:
    return Runner(
        id=row[0],
        pool=row[1],
        scope=row[2],
        state=RunnerState(row[3]),
        name=row[4],
        labels=_labels(row[5]),
        reason=_reason(row[6]),
        message=row[7],
        created_at=row[8],
        state_changed_at=row[9],
        server_id=row[10],
        github_runner_id=row[11],
        job_id=row[12],
        registered_at=row[13],
        image_id=row[14],
        cloud=row[15],
        cache=row[16],
    )


@dataclass(frozen=True, slots=True)
class NewRunner:
    """The intent to start one runner: written (state `pending`) before anything is asked of GitHub or the cloud."""

    pool: str
    scope: str
    labels: tuple[str, ...]
    reason: Reason
    message: str | None = None
    job_id: int | None = None
    cloud: str | None = None
    """The cloud its server is to be made in (the pool's placement that had room)."""


def add(
    connection: Connection,
    name_prefix: str,
    intents: Sequence[NewRunner],
    *,
    max_runners: int | None = None,
    fence: Fence | None = None,
    room: Callable[[Connection, int], int] | None = None,
    now: datetime,
) -> list[Runner]:
    """Write the intents as `pending` runners with their first events; count them on the jobs they serve.

    With `max_runners` (all intents then name one pool), only as many are written as keep the pool's runners
    that hold capacity (starting, idle, busy) within it, counted in this same transaction: the earliest
    intents first. On PostgreSQL the pool's adds take turns under an advisory lock for the transaction, so
    two writers that each read the pool before the other wrote (two replicas in a split-brain moment) cannot
    both fill its last places. With `fence`, nothing is written unless it is still the pool's lease. `room`
    says how many of that many intents the project's quota has room for, read in this transaction (replicas
    sharing a project count each other's creates there: `store.quota`); the earliest are written. `now` stamps
    the rows (the caller's clock).
    """
    if fence is not None:
        leases.verify(connection, [fence])
    if max_runners is not None and intents:
        intents = intents[: room_in_pool(connection, intents[0].pool, max_runners)]
    if room is not None and intents:
        intents = intents[: room(connection, len(intents))]
    if not intents:
        return []
    runners = []
    for intent in intents:
        runner_id = new_runner_id()
        runners.append(
            Runner(
                id=runner_id,
                pool=intent.pool,
                scope=intent.scope,
                state=RunnerState.PENDING,
                name=f"{name_prefix}-{intent.pool}-{runner_id}",
                labels=intent.labels,
                reason=intent.reason,
                message=intent.message,
                created_at=now,
                state_changed_at=now,
                job_id=intent.job_id,
                cloud=intent.cloud,
            )
        )
    connection.execute(
        insert(RUNNERS),
        [
            {
                "id": r.id,
                "pool": r.pool,
                "scope": r.scope,
                "state": r.state.value,
                "name": r.name,
                "labels": list(r.labels),
                "reason": r.reason.value,
                "message": r.message,
                "created_at": now,
                "state_changed_at": now,
                "job_id": r.job_id,
                "cloud": r.cloud,
            }
            for r in runners
        ],
    )
    _add_events(connection, [(r.id, None, r.state, r.reason, r.message, now) for r in runners])
    started = Counter(r.job_id for r in runners if r.job_id is not None)
    for job_id, count in started.items():
        connection.execute(
            update(JOBS).where(JOBS.c.id == job_id).values(runners_started=JOBS.c.runners_started + count)
        )
    return runners


_HELD_IN_POOL = (
    select(func.count())
    .select_from(RUNNERS)
    .where(RUNNERS.c.pool == bindparam("pool"), one_of(RUNNERS.c.state, CAPACITY))
)


def room_in_pool(connection: Connection, pool: str, max_runners: int) -> int:
    """How many more runners `pool` may start now; on PostgreSQL, holds the pool's add lock until commit."""
    if connection.dialect.name == "postgresql":
        connection.execute(
            text("SELECT pg_advisory_xact_lock(:namespace, hashtext(:pool))"),
            {"namespace": POOL_LOCK_NAMESPACE, "pool": pool},
        )
    held = connection.execute(_HELD_IN_POOL, {"pool": pool}).scalar_one()
    return max(max_runners - int(held), 0)


_NEW_EVENT = insert(EVENTS)


def _add_events(
    connection: Connection,
    moves: Sequence[tuple[str, RunnerState | None, RunnerState, Reason, str | None, datetime]],
) -> None:
    connection.execute(
        _NEW_EVENT,
        [
            {
                "runner_id": runner_id,
                "from_state": source.value if source else None,
                "to_state": target.value,
                "code": reason.value,
                "message": message,
                "at": at,
            }
            for runner_id, source, target, reason, message, at in moves
        ],
    )


MOVE = (
    update(RUNNERS)
    .where(RUNNERS.c.id == bindparam("runner_id"), RUNNERS.c.state == bindparam("from_state"))
    .values(
        state=bindparam("to_state"),
        state_changed_at=bindparam("now"),
        reason=bindparam("code"),
        message=func.coalesce(bindparam("new_message", type_=Text()), RUNNERS.c.message),
        server_id=func.coalesce(bindparam("new_server_id", type_=String()), RUNNERS.c.server_id),
        image_id=func.coalesce(bindparam("new_image_id", type_=String()), RUNNERS.c.image_id),
        github_runner_id=func.coalesce(
            bindparam("new_github_runner_id", type_=BigInteger()), RUNNERS.c.github_runner_id
        ),
        registered_at=func.coalesce(bindparam("new_registered_at", type_=UTCDateTime()), RUNNERS.c.registered_at),
        cache=func.coalesce(bindparam("new_cache", type_=String()), RUNNERS.c.cache),
    )
    .returning(*COLUMNS)
)
"""One guarded move, built once: it applies only if the runner is still in the state it was read in."""


def apply(
    connection: Connection,
    transitions: Sequence[Transition],
    fences: Sequence[Fence] = (),
    *,
    now: datetime,
) -> list[Runner | None]:
    """Apply each transition that still holds; None in place of one whose runner someone else moved first.

    `fences` (PostgreSQL replicas): the leases of the pools these runners belong to, checked first in this
    transaction; a stale one refuses the whole group (LeaseLost), nothing written."""
    leases.verify(connection, fences)
    applied: list[Runner | None] = []
    moves: list[tuple[str, RunnerState | None, RunnerState, Reason, str | None, datetime]] = []
    diverted: Counter[int] = Counter()
    presumed: set[int] = set()
    lost: dict[int, str] = {}
    for move in transitions:
        # A move that happened before corral saw it (a job that started before the pass) is stamped with when
        # it happened, never before the runner's last move nor after now.
        at = now if move.at is None else max(move.runner.state_changed_at, min(move.at, now))
        row = connection.execute(
            MOVE,
            {
                "runner_id": move.runner.id,
                "from_state": move.runner.state.value,
                "to_state": move.target.value,
                "now": at,
                "code": move.reason.value,
                "new_message": move.message,
                "new_server_id": move.server_id,
                "new_image_id": move.image_id,
                "new_github_runner_id": move.github_runner_id,
                "new_registered_at": move.registered_at,
                "new_cache": move.cache.value if move.cache is not None else None,
            },
        ).first()
        if row is None:
            applied.append(None)
            continue
        applied.append(to_runner(row))
        moves.append((move.runner.id, move.runner.state, move.target, move.reason, move.message, at))
        if move.lost_job is not None:
            lost[move.lost_job] = f"runner {move.runner.name}: {move.message or move.reason.value}"
        if move.diverted_job is not None:
            diverted[move.diverted_job] += 1
            if move.presumed_taken:
                presumed.add(move.diverted_job)
    if moves:
        _add_events(connection, moves)
    for job_id, count in diverted.items():
        counted: dict[str, Any] = {"runners_diverted": JOBS.c.runners_diverted + count, "diverted_at": now}
        if job_id in presumed:
            counted["maybe_taken_at"] = now
        connection.execute(update(JOBS).where(JOBS.c.id == job_id).values(**counted))
    for job_id, why in lost.items():
        connection.execute(
            update(JOBS).where(JOBS.c.id == job_id, JOBS.c.lost_at.is_(None)).values(lost_at=now, lost_reason=why)
        )
    return applied


def note(connection: Connection, runner: Runner, reason: Reason, message: str, *, now: datetime) -> None:
    """Record something that happened to a runner without moving it (an action on it failed unexpectedly):
    on the runner, where its view shows it, and in its history."""
    connection.execute(update(RUNNERS).where(RUNNERS.c.id == runner.id).values(message=message))
    _add_events(connection, [(runner.id, runner.state, runner.state, reason, message, now)])


def mark_active(connection: Connection, runner_ids: Sequence[str], *, now: datetime) -> None:
    """Note, once each, that these booting runners' servers were seen ACTIVE: a step of their boot, for the
    job timeline (the cloud's part of a slow boot, told apart from the guest's)."""
    if not runner_ids:
        return
    noted = select(EVENTS.c.runner_id).where(
        EVENTS.c.runner_id.in_(runner_ids), EVENTS.c.code == Reason.SERVER_ACTIVE.value
    )
    booting = select(RUNNERS.c.id).where(RUNNERS.c.id.in_(runner_ids), RUNNERS.c.state == RunnerState.BOOTING.value)
    fresh = set(connection.execute(booting).scalars()) - set(connection.execute(noted).scalars())
    if fresh:
        booted = RunnerState.BOOTING
        _add_events(
            connection,
            [(runner_id, booted, booted, Reason.SERVER_ACTIVE, None, now) for runner_id in fresh],
        )


def get(connection: Connection, runner_id: str) -> Runner | None:
    row = connection.execute(select(*COLUMNS).where(RUNNERS.c.id == runner_id)).first()
    return to_runner(row) if row else None


def by_name(connection: Connection, name: str) -> Runner | None:
    row = connection.execute(select(*COLUMNS).where(RUNNERS.c.name == name)).first()
    return to_runner(row) if row else None


@dataclass(frozen=True, slots=True)
class RunnerAndJob:
    """A live runner with what the job table says of the job that names it (a webhook saw it take one)."""

    runner: Runner
    job_id: int | None
    job_status: JobState | None
    job_had_runner: bool = False
    """Whether corral started a runner for that job too (a swap: that runner takes the next job)."""
    job_started_at: datetime | None = None
    """When that job started on this runner, as its `in_progress` webhook (or GitHub) said: where the runner's
    busy time begins, however much later corral's pass saw it."""


UNDELETED = [state for state in LIVE if state != RunnerState.DELETING.value]


def of_pool_with_jobs(columns: Sequence[Any], deleting: bool) -> Select[Any]:
    """`columns` of the pool's (`pool` parameter) live runners, each with the jobs naming it, oldest first;
    `deleting=False` leaves out runners being deleted. What the pass reads, whole or by fingerprint
    (`store.known_runners`)."""
    return (
        select(*columns)
        .select_from(RUNNERS.outerjoin(JOBS, JOBS.c.runner_name == RUNNERS.c.name))
        .where(RUNNERS.c.pool == bindparam("pool"), one_of(RUNNERS.c.state, LIVE if deleting else UNDELETED))
        .order_by(RUNNERS.c.created_at, RUNNERS.c.id, JOBS.c.id)
    )


@functools.cache
def _live_of_pool_query(deleting: bool, by_id: bool = False) -> Select[Any]:
    """Built once per variant: a statement is costlier to build than to run (the pool is a bound parameter).
    `by_id`: only the runners named by the `ids` parameter."""
    query = of_pool_with_jobs((*COLUMNS, JOBS.c.id, JOBS.c.status, JOBS.c.runners_started, JOBS.c.started_at), deleting)
    return query.where(RUNNERS.c.id.in_(bindparam("ids", expanding=True))) if by_id else query


def live_of_pool(
    connection: Connection, pool: str, *, deleting: bool = True, ids: Sequence[str] | None = None
) -> list[RunnerAndJob]:
    """A pool's runners not yet deleted, oldest first, each with the status of the job run on it, if any.

    `deleting=False` leaves out runners being deleted: only a new look at the far ends can tell anything
    about them, and under load they are most of a pool's rows. `ids`: only these runners (a few hundred at
    most: they are bound one parameter each); the pool's holder reads only those that changed
    (`store.known_runners`).
    """
    parameters: dict[str, Any] = {"pool": pool} if ids is None else {"pool": pool, "ids": list(ids)}
    found: dict[str, RunnerAndJob] = {}
    for row in connection.execute(_live_of_pool_query(deleting, ids is not None), parameters):
        runner = to_runner(row)
        job_id, job_status, runners_started, job_started_at = row[len(COLUMNS) :]
        status = JobState(job_status) if job_status is not None else None
        known = found.get(runner.id)
        # A runner takes one job; should two rows name it, the furthest along says the most.
        if known is None or (status is not None and (known.job_status is None or status.rank > known.job_status.rank)):
            found[runner.id] = RunnerAndJob(runner, job_id, status, bool(runners_started), job_started_at)
    return list(found.values())


def listing(
    connection: Connection,
    *,
    pool: str | None = None,
    states: Iterable[RunnerState] | None = None,
    limit: int | None = None,
) -> list[Runner]:
    query = select(*COLUMNS).order_by(RUNNERS.c.created_at, RUNNERS.c.id)
    if pool is not None:
        query = query.where(RUNNERS.c.pool == pool)
    if states is not None:
        query = query.where(RUNNERS.c.state.in_([state.value for state in states]))
    if limit is not None:
        query = query.limit(limit)
    return [to_runner(row) for row in connection.execute(query)]


_EVERY_LIVE_ID = select(RUNNERS.c.id).where(one_of(RUNNERS.c.state, LIVE))
_DELETED_NAMED = select(*COLUMNS).where(
    RUNNERS.c.name.in_(bindparam("names", expanding=True)), RUNNERS.c.state == RunnerState.DELETED.value
)


def live_ids(connection: Connection, ids: Iterable[str]) -> set[str]:
    """Which of `ids` are runners not yet deleted.

    Every live runner's id is read in one narrow statement and intersected here. A look asks this of every
    server of the installation, and live runners are about as many as servers: binding the ids 500 to a
    statement cost 20 statements at 10,000 servers, each rendered anew (`bench/reconcile.py`)."""
    wanted = set(ids)
    if not wanted:
        return set()
    return {runner_id for runner_id in connection.execute(_EVERY_LIVE_ID).scalars() if runner_id in wanted}


def deleted_named(connection: Connection, names: Iterable[str]) -> dict[str, Runner]:
    """Of these runner names, those whose runner corral already counts as deleted, by name."""
    wanted = sorted(set(names))
    found: dict[str, Runner] = {}
    for start in range(0, len(wanted), 500):
        rows = connection.execute(_DELETED_NAMED, {"names": wanted[start : start + 500]})
        found.update((runner.name, runner) for runner in map(to_runner, rows))
    return found


def events(connection: Connection, runner_id: str) -> list[RunnerEvent]:
    return events_of(connection, [runner_id])


def events_of(connection: Connection, runner_ids: Sequence[str]) -> list[RunnerEvent]:
    """These runners' events, in the order they happened."""
    query = select(
        EVENTS.c.runner_id, EVENTS.c.from_state, EVENTS.c.to_state, EVENTS.c.code, EVENTS.c.message, EVENTS.c.at
    ).where(EVENTS.c.runner_id.in_(runner_ids))
    return [_event(row) for row in connection.execute(query.order_by(EVENTS.c.id))]


def _event(row: Any) -> RunnerEvent:
    return RunnerEvent(
        runner_id=row[0],
        from_state=RunnerState(row[1]) if row[1] else None,
        to_state=RunnerState(row[2]),
        reason=_reason(row[3]),
        message=row[4],
        at=row[5],
    )


def recent_failures(connection: Connection, limit: int = 20) -> list[tuple[RunnerEvent, Runner]]:
    """The latest moves to `failed`, newest first, each with its runner: the dashboard's failure list,
    which must outlive the runner itself (a failed runner is cleaned up and deleted within seconds)."""
    query = (
        select(
            EVENTS.c.runner_id,
            EVENTS.c.from_state,
            EVENTS.c.to_state,
            EVENTS.c.code,
            EVENTS.c.message,
            EVENTS.c.at,
            *COLUMNS,
        )
        .select_from(EVENTS.join(RUNNERS, RUNNERS.c.id == EVENTS.c.runner_id))
        .where(EVENTS.c.to_state == RunnerState.FAILED.value)
        .order_by(EVENTS.c.id.desc())
        .limit(limit)
    )
    return [(_event(row[:6]), to_runner(row[6:])) for row in connection.execute(query)]


def counts(connection: Connection) -> Counter[tuple[str, RunnerState]]:
    """Live runners by pool and state."""
    query = (
        select(RUNNERS.c.pool, RUNNERS.c.state, func.count())
        .where(one_of(RUNNERS.c.state, LIVE))
        .group_by(RUNNERS.c.pool, RUNNERS.c.state)
    )
    return Counter({(pool, RunnerState(state)): count for pool, state, count in connection.execute(query)})


def jobs_succeeded_on(connection: Connection, pool: str, image_id: str, since: datetime) -> int:
    """Jobs that succeeded on the pool's runners made from `image_id` since `since` (what promotes a canary)."""
    query = (
        select(func.count())
        .select_from(JOBS.join(RUNNERS, JOBS.c.runner_name == RUNNERS.c.name))
        .where(
            RUNNERS.c.pool == pool,
            RUNNERS.c.image_id == image_id,
            RUNNERS.c.created_at >= since,
            JOBS.c.conclusion == "success",
        )
    )
    return int(connection.execute(query).scalar_one())


_LIVE_POOLS = select(RUNNERS.c.pool).where(one_of(RUNNERS.c.state, LIVE)).distinct()
_LIVE_CLOUDS = select(RUNNERS.c.cloud).where(one_of(RUNNERS.c.state, LIVE)).distinct()
_LIVE_SCOPES = select(RUNNERS.c.scope).where(one_of(RUNNERS.c.state, LIVE)).distinct()


def live_pools(connection: Connection) -> set[str]:
    """Pools that still have runners not yet deleted (including pools removed from the config)."""
    return set(connection.execute(_LIVE_POOLS).scalars())


def live_clouds(connection: Connection) -> set[str | None]:
    """Clouds runners not yet deleted were made in (None: the first, for runners older than the record)."""
    return set(connection.execute(_LIVE_CLOUDS).scalars())


def live_scopes(connection: Connection) -> set[str]:
    """Scopes runners not yet deleted registered at (a removed pool's runners still need deregistering)."""
    return set(connection.execute(_LIVE_SCOPES).scalars())


def boot_seconds(connection: Connection, since: datetime) -> dict[str, list[float]]:
    """Per pool, how long each runner created since `since` took from its row's creation until corral saw it
    online (`registered_at`): the boots `corral simulate` replays when told to take them from history."""
    query = (
        select(RUNNERS.c.pool, RUNNERS.c.created_at, RUNNERS.c.registered_at)
        .where(RUNNERS.c.created_at >= since, RUNNERS.c.registered_at.is_not(None))
        .order_by(RUNNERS.c.created_at, RUNNERS.c.id)
    )
    found: dict[str, list[float]] = {}
    for pool, created_at, registered_at in connection.execute(query):
        found.setdefault(pool, []).append(max((registered_at - created_at).total_seconds(), 0.0))
    return found


_BOOTS_SINCE = (
    select(RUNNERS.c.id, RUNNERS.c.created_at, RUNNERS.c.registered_at)
    .where(RUNNERS.c.pool == bindparam("pool"), RUNNERS.c.registered_at >= bindparam("since"))
    .order_by(RUNNERS.c.registered_at, RUNNERS.c.id)
)


_WAITED_BOOTS = (
    select(JOBS.c.pool, JOBS.c.id, JOBS.c.started_at, JOBS.c.queued_at, RUNNERS.c.created_at, RUNNERS.c.pool)
    .join(RUNNERS, RUNNERS.c.name == JOBS.c.runner_name)
    .where(JOBS.c.started_at >= bindparam("since"), JOBS.c.queued_at.is_not(None))
    .order_by(JOBS.c.started_at, JOBS.c.id)
)
"""Jobs started since, with the creation of the runner that ran them. A runner of another pool (whose labels
the job's also fit) timed that pool's boot, not the job's: left out by the caller, not by the query, where
`runners.pool = jobs.pool` made SQLite walk every runner the pool ever had (its index on runners by pool) and
look each one's job up, 0.9 ms a read after a few days, instead of the jobs started since."""
WAITED_S = 1.0
"""A job that started this long after it was queued waited for its runner to come online."""


def _waited_boot(started_at: datetime, queued_at: datetime, created_at: datetime) -> float | None:
    """The boot a job timed, in seconds: from its runner's creation to its start, if it waited for that runner
    (None if it did not: it found the runner online)."""
    if (started_at - queued_at).total_seconds() >= WAITED_S and started_at > created_at:
        return (started_at - created_at).total_seconds()
    return None


def waited_boots_since(connection: Connection, pool: str, since: datetime) -> list[tuple[int, datetime, float | None]]:
    """Every job of the pool started at or after `since`, in that order, with the boot it timed: (job id, when
    it started, seconds from its runner's creation to the job's start, or None when the job did not wait for
    its runner). The caller's cursor moves past them all, so a pool whose jobs mostly find a warm runner is not
    read again from its last job that waited (that re-read grew through the day: 0.9 ms a pass).

    A job that was waiting when its runner came online starts at that moment (GitHub hands a new runner the
    oldest job waiting for it), so these boots are exact. `boots_since` times a boot to the pass that first
    saw the runner online, which is up to a look interval (30 s by default) later: taken at p95, that lag
    made a 60 s boot count as 88 s and `min_idle: {auto: ...}` keep a plan for jobs 59 s apart instead of 31.
    """
    rows = connection.execute(_WAITED_BOOTS.where(JOBS.c.pool == pool), {"since": since})
    return [
        (job_id, started_at, _waited_boot(started_at, queued_at, created_at) if runner_pool == pool else None)
        for _, job_id, started_at, queued_at, created_at, runner_pool in rows
    ]


def waited_boot_seconds(connection: Connection, since: datetime) -> dict[str, list[float]]:
    """Per pool, the boots timed by the jobs that waited for them (`waited_boots_since`), of jobs started since
    `since`: what `corral simulate --database-url` prefers to replay."""
    found: dict[str, list[float]] = {}
    for pool, _, started_at, queued_at, created_at, runner_pool in connection.execute(_WAITED_BOOTS, {"since": since}):
        seconds = _waited_boot(started_at, queued_at, created_at)
        if seconds is not None and runner_pool == pool:
            found.setdefault(pool, []).append(seconds)
    return found


def boots_since(connection: Connection, pool: str, since: datetime) -> list[tuple[str, datetime, float]]:
    """The pool's runners that came online at or after `since`, in that order: (id, when, seconds from the
    row's creation to online). What `min_idle: {auto: ...}` takes the pool's boot time from."""
    return [
        (runner_id, registered_at, max((registered_at - created_at).total_seconds(), 0.0))
        for runner_id, created_at, registered_at in connection.execute(_BOOTS_SINCE, {"pool": pool, "since": since})
    ]
