"""Queries and the transactions that keep runner state honest.

Every runner transition is checked against the state machine, guarded by the state it was read in
(so two passes or two replicas cannot both move the same runner), and written together with its event.
"""

from __future__ import annotations

import hashlib
import secrets
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config as AlembicConfig
from sqlalchemy import Engine, create_engine, event, func, make_url, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from corral.clock import utcnow
from corral.files import create_private
from corral.model import JobState, RunnerState
from corral.store.schema import ApiToken, Delivery, Job, PoolStatus, Runner, RunnerEvent

MIGRATIONS = Path(__file__).with_name("migrations")
SQLITE_BUSY_TIMEOUT_MS = 30_000


@dataclass(frozen=True)
class QueuedJob:
    id: int
    received_at: datetime
    checked_at: datetime | None
    runners_diverted: int
    diverted_at: datetime | None


class StaleRunner(Exception):
    """The runner is no longer in the state the caller read: someone else moved it first."""


def hash_token(text: str) -> str:
    """Tokens are 256 random bits, so a plain SHA-256 is the right hash: fast to check, useless to invert."""
    return hashlib.sha256(text.encode()).hexdigest()


def new_runner_id() -> str:
    """Ten lowercase base-32-ish characters: short enough for server names, unguessable enough."""
    return secrets.token_hex(5)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def sqlite_file(url: str) -> Path | None:
    """The database file of a SQLite URL, or None for an in-memory or `file:` URI database."""
    database = make_url(url).database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database)


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        path = sqlite_file(url)
        if path is not None and path.parent.is_dir():
            # Before SQLite sees it: SQLite creates a missing file with the umask's mode (often 0644),
            # and gives the -wal and -shm files it makes later the mode of the database file.
            create_private(path)
        engine = create_engine(url, connect_args={"check_same_thread": False})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)


class Store:
    """All database access goes through here; methods are short transactions, safe from any thread."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    def migrate(self) -> None:
        """Bring the schema to the newest migration; safe to run on every start."""
        config = AlembicConfig()
        config.set_main_option("script_location", str(MIGRATIONS))
        with self.engine.begin() as connection:
            config.attributes["connection"] = connection
            command.upgrade(config, "head")

    def close(self) -> None:
        self.engine.dispose()

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A transaction: committed when the block ends, rolled back if it raises."""
        with self._sessions.begin() as session:
            yield session

    # -- runners ----------------------------------------------------------------------------------

    def add_runner(
        self,
        pool: str,
        name_prefix: str,
        labels: list[str],
        *,
        scope: str,
        job_id: int | None = None,
        reason: str,
    ) -> Runner:
        """Write the intent to create a runner (state `pending`) before anything is asked of the cloud."""
        now = utcnow()
        runner_id = new_runner_id()
        runner = Runner(
            id=runner_id,
            pool=pool,
            scope=scope,
            state=RunnerState.PENDING.value,
            name=f"{name_prefix}-{pool}-{runner_id}",
            labels=labels,
            job_id=job_id,
            created_at=now,
            state_changed_at=now,
        )
        with self.session() as session:
            session.add(runner)
            session.flush()
            session.add(RunnerEvent(runner_id=runner_id, from_state=None, to_state=runner.state, reason=reason, at=now))
        return runner

    def transition(
        self, runner_id: str, target: RunnerState, reason: str, *, expect: RunnerState | None = None, **fields: Any
    ) -> Runner:
        """Move a runner to `target`, recording why; `fields` are set in the same transaction.

        Raises StaleRunner if the runner is gone or not in `expect` (or moved since it was read), and
        InvalidTransition if the state machine forbids the move.
        """
        now = utcnow()
        with self.session() as session:
            runner = session.get(Runner, runner_id)
            if runner is None:
                raise StaleRunner(f"runner {runner_id} does not exist")
            current = RunnerState(runner.state)
            if expect is not None and current is not expect:
                raise StaleRunner(f"runner {runner_id} is {current.value}, not {expect.value}")
            current.check_transition(target)
            result = session.execute(
                update(Runner)
                .where(Runner.id == runner_id, Runner.state == current.value)
                .values(state=target.value, state_changed_at=now, **fields)
            )
            if result.rowcount != 1:  # type: ignore[attr-defined]
                raise StaleRunner(f"runner {runner_id} changed state concurrently")
            session.add(
                RunnerEvent(runner_id=runner_id, from_state=current.value, to_state=target.value, reason=reason, at=now)
            )
            session.expire(runner)
            session.refresh(runner)
            return runner

    def update_runner(self, runner_id: str, **fields: Any) -> None:
        """Set facts about a runner that are not state changes (server id, GitHub runner id)."""
        with self.session() as session:
            session.execute(update(Runner).where(Runner.id == runner_id).values(**fields))

    def runner_by_name(self, name: str) -> Runner | None:
        with self.session() as session:
            return session.scalar(select(Runner).where(Runner.name == name))

    def runner(self, runner_id: str) -> Runner | None:
        with self.session() as session:
            return session.get(Runner, runner_id)

    def runners(self, *, pool: str | None = None, states: Iterable[RunnerState] | None = None) -> list[Runner]:
        query = select(Runner).order_by(Runner.created_at, Runner.id)
        if pool is not None:
            query = query.where(Runner.pool == pool)
        if states is not None:
            query = query.where(Runner.state.in_([state.value for state in states]))
        with self.session() as session:
            return list(session.scalars(query))

    def events(self, runner_id: str) -> list[RunnerEvent]:
        query = select(RunnerEvent).where(RunnerEvent.runner_id == runner_id).order_by(RunnerEvent.id)
        with self.session() as session:
            return list(session.scalars(query))

    # -- webhooks and jobs ------------------------------------------------------------------------

    def record_job_event(
        self, *, delivery_id: str | None, event: str, action: str | None, job: dict[str, Any] | None
    ) -> bool:
        """Record a delivery and the job update it carries in one transaction.

        Returns False for a delivery already recorded (GitHub retries and redeliveries reuse the id),
        in which case nothing changes. A job never moves backwards: `completed` that arrives before
        `queued` stays completed.
        """
        now = utcnow()
        try:
            with self.session() as session:
                if delivery_id is not None:
                    session.add(Delivery(id=delivery_id, event=event, action=action, received_at=now))
                    session.flush()
                if job is not None:
                    self._merge_job(session, job, now)
        except IntegrityError:
            return False
        return True

    def _merge_job(self, session: Session, update_: dict[str, Any], now: datetime) -> None:
        existing = session.get(Job, update_["id"], with_for_update=True)
        if existing is None:
            session.add(Job(received_at=now, runners_started=0, **update_))
            return
        if JobState(update_["status"]).rank < JobState(existing.status).rank:
            return
        for key, value in update_.items():
            if value is not None or key in ("conclusion",):
                setattr(existing, key, value)

    def job(self, job_id: int) -> Job | None:
        with self.session() as session:
            return session.get(Job, job_id)

    def jobs(self, *, status: JobState | None = None, pool: str | None = None, limit: int = 1000) -> list[Job]:
        query = select(Job).order_by(Job.received_at.desc(), Job.id.desc()).limit(limit)
        if status is not None:
            query = query.where(Job.status == status.value)
        if pool is not None:
            query = query.where(Job.pool == pool)
        with self.session() as session:
            return list(session.scalars(query))

    def demand(self, pool: str) -> list[QueuedJob]:
        """Queued jobs of a pool, oldest first, with what the engine needs to judge whether each is demand.

        Plain rows, not ORM objects: this runs for every webhook, and hydrating hundreds of queued jobs
        each time is what a backlog would spend its CPU on.
        """
        query = (
            select(Job.id, Job.received_at, Job.checked_at, Job.runners_diverted, Job.diverted_at)
            .where(Job.status == JobState.QUEUED.value, Job.pool == pool)
            .order_by(Job.queued_at, Job.id)
        )
        with self.session() as session:
            return [QueuedJob(*row) for row in session.execute(query)]

    def runner_diverted(self, job_id: int) -> None:
        """A runner started for `job_id` came online and took another job (or one we cannot name)."""
        with self.session() as session:
            session.execute(
                update(Job)
                .where(Job.id == job_id)
                .values(runners_diverted=Job.runners_diverted + 1, diverted_at=utcnow())
            )

    def runner_states(self, pool: str) -> Counter[RunnerState]:
        """Live runners of a pool by state, counted by the database."""
        live = [state.value for state in RunnerState if state is not RunnerState.DELETED]
        query = (
            select(Runner.state, func.count()).where(Runner.pool == pool, Runner.state.in_(live)).group_by(Runner.state)
        )
        with self.session() as session:
            return Counter({RunnerState(state): count for state, count in session.execute(query)})

    def live_pools(self) -> set[str]:
        """Pools that still have runners not yet deleted (including pools removed from the config)."""
        query = select(Runner.pool).where(Runner.state != RunnerState.DELETED.value).distinct()
        with self.session() as session:
            return set(session.scalars(query))

    def jobs_of_runners(
        self, pool: str, states: Iterable[RunnerState], *, changed_since: datetime | None = None
    ) -> set[int]:
        """The jobs that runners of a pool in `states` were started for."""
        query = select(Runner.job_id).where(
            Runner.pool == pool, Runner.state.in_([state.value for state in states]), Runner.job_id.is_not(None)
        )
        if changed_since is not None:
            query = query.where(Runner.state_changed_at >= changed_since)
        with self.session() as session:
            return {job_id for job_id in session.scalars(query) if job_id is not None}

    def runner_started_for(self, job_id: int) -> None:
        with self.session() as session:
            session.execute(update(Job).where(Job.id == job_id).values(runners_started=Job.runners_started + 1))

    def stale_queued_jobs(self, *, queued_before: datetime, checked_before: datetime, limit: int) -> list[Job]:
        """Queued jobs old enough to be worth asking GitHub about, not asked recently."""
        query = (
            select(Job)
            .where(
                Job.status == JobState.QUEUED.value,
                Job.received_at < queued_before,
                (Job.checked_at.is_(None)) | (Job.checked_at < checked_before),
            )
            .order_by(Job.checked_at.nulls_first(), Job.received_at)
            .limit(limit)
        )
        with self.session() as session:
            return list(session.scalars(query))

    def unfinished_jobs_without_runner(
        self, *, started_before: datetime, checked_before: datetime, limit: int
    ) -> list[Job]:
        """Jobs of corral's pools still `in_progress` whose runner is no longer live, not asked recently.

        Their `completed` webhook may have been lost: only GitHub can say, and until asked they would count
        as running on the API and dashboard for ever.
        """
        live = [RunnerState.BOOTING.value, RunnerState.IDLE.value, RunnerState.BUSY.value]
        running = select(Runner.id).where(Runner.name == Job.runner_name, Runner.state.in_(live)).exists()
        query = (
            select(Job)
            .where(
                Job.status == JobState.IN_PROGRESS.value,
                Job.pool.is_not(None),
                Job.received_at < started_before,
                (Job.checked_at.is_(None)) | (Job.checked_at < checked_before),
                ~running,
            )
            .order_by(Job.checked_at.nulls_first(), Job.received_at)
            .limit(limit)
        )
        with self.session() as session:
            return list(session.scalars(query))

    def job_checked(
        self,
        job_id: int,
        *,
        status: JobState,
        conclusion: str | None,
        runner_name: str | None = None,
        completed_at: datetime | None = None,
    ) -> None:
        """Record what GitHub said of a job when asked directly; it never moves backwards either."""
        with self.session() as session:
            job = session.get(Job, job_id, with_for_update=True)
            if job is None:
                return
            job.checked_at = utcnow()
            if status.rank > JobState(job.status).rank:
                job.status = status.value
                job.conclusion = conclusion
                job.runner_name = runner_name or job.runner_name
                job.completed_at = completed_at or job.completed_at

    def recent_repositories(self, *, since: datetime) -> list[str]:
        query = select(Job.repository).where(Job.received_at >= since).distinct()
        with self.session() as session:
            return list(session.scalars(query))

    def recent_failures(self, limit: int = 20) -> list[tuple[RunnerEvent, Runner]]:
        """The latest moves to `failed`, newest first, each with its runner: the dashboard's failure list,
        which must outlive the runner itself (a failed runner is cleaned up and deleted within seconds)."""
        query = (
            select(RunnerEvent, Runner)
            .join(Runner, Runner.id == RunnerEvent.runner_id)
            .where(RunnerEvent.to_state == RunnerState.FAILED.value)
            .order_by(RunnerEvent.id.desc())
            .limit(limit)
        )
        with self.session() as session:
            return [(event, runner) for event, runner in session.execute(query)]

    def job_counts(self) -> dict[str, int]:
        """Jobs known to corral by status, counted by the database rather than by listing them."""
        query = select(Job.status, func.count()).group_by(Job.status)
        with self.session() as session:
            return {status: count for status, count in session.execute(query)}

    # -- API tokens -------------------------------------------------------------------------------

    def create_token(self, name: str, scope: str) -> tuple[ApiToken, str]:
        """A new token; returns the row and the token text, which is never stored and never shown again."""
        token_id = secrets.token_hex(4)
        text = f"corral_{token_id}_{secrets.token_urlsafe(32)}"
        token = ApiToken(id=token_id, name=name, scope=scope, token_hash=hash_token(text), created_at=utcnow())
        with self.session() as session:
            session.add(token)
        return token, text

    def tokens(self) -> list[ApiToken]:
        with self.session() as session:
            return list(session.scalars(select(ApiToken).order_by(ApiToken.created_at)))

    def revoke_token(self, token_id: str) -> bool:
        with self.session() as session:
            result = session.execute(
                update(ApiToken)
                .where(ApiToken.id == token_id, ApiToken.revoked_at.is_(None))
                .values(revoked_at=utcnow())
            )
            return bool(result.rowcount)  # type: ignore[attr-defined]

    def authenticate(self, text: str) -> ApiToken | None:
        """The live token with this text, if any; `last_used_at` is refreshed at most once a minute."""
        now = utcnow()
        with self.session() as session:
            token = session.scalar(select(ApiToken).where(ApiToken.token_hash == hash_token(text)))
            if token is None or token.revoked_at is not None:
                return None
            if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
                token.last_used_at = now
            return token

    # -- pools ------------------------------------------------------------------------------------

    def set_pool_status(
        self, name: str, *, generation: int, ready: bool, reason: str | None, removed: bool = False
    ) -> None:
        with self.session() as session:
            status = session.get(PoolStatus, name)
            if status is None:
                status = PoolStatus(name=name)
                session.add(status)
            status.applied_generation = generation
            status.ready = ready
            status.reason = reason
            status.removed = removed
            status.updated_at = utcnow()

    def set_drained(self, name: str, drained: bool) -> None:
        with self.session() as session:
            status = session.get(PoolStatus, name)
            if status is None:
                status = PoolStatus(name=name, applied_generation=0, ready=False, removed=False)
                session.add(status)
            status.drained = drained
            status.updated_at = utcnow()

    def pool_statuses(self) -> dict[str, PoolStatus]:
        with self.session() as session:
            return {status.name: status for status in session.scalars(select(PoolStatus))}
