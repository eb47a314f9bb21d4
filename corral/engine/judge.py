"""Judging a pool's runners: what the newest look at the far ends and the job table say, turned into moves.

`policy.judge_runner` decides, one step at a time; this gathers the facts it decides on, applies its verdicts
(a step's moves share one transaction) and learns from them: a runner coming online ends its pool's backoff,
a server that never became a runner extends it, and a job whose runner took another one is presumed taken.
"""

from __future__ import annotations

from collections.abc import Callable

from corral.clock import SYSTEM_CLOCK, Clock
from corral.config import CorralConfig
from corral.engine.creator import Creator
from corral.engine.observe import Observation
from corral.engine.rollouts import Rollouts
from corral.engine.running import Running
from corral.engine.supervisor import Supervisor
from corral.engine.transitions import Mover
from corral.metrics import RUNNER_BOOT_SECONDS, RUNNERS_JUDGED
from corral.model import JobState, Reason, Runner, RunnerState, Transition
from corral.policy import RunnerFacts, Verdict, judge_runner
from corral.store.runners import RunnerAndJob

MAX_STEPS_PER_PASS = 4
"""Transitions one runner may make in one pass (booting -> idle -> busy -> finished, say), each recorded."""
DEFAULT_BOOTSTRAP_TIMEOUT_S = 600.0
"""For runners of a pool removed from the configuration, whose own timeout is gone with it."""
MAX_NOTED_ACTIVE = 10_000
"""Runners the judge remembers having noted ACTIVE; the store also refuses a second note."""
BOOT_FAILURES = frozenset({Reason.SERVER_ERROR, Reason.SERVER_VANISHED, Reason.BOOTSTRAP_TIMEOUT})
"""Servers the cloud accepted that never became runners: each backs the pool off like a failed create."""
MACHINE_LOST = frozenset({Reason.SERVER_ERROR, Reason.SERVER_VANISHED})
"""A busy runner failing for one of these lost its job with its server: the proof `rerun_lost_jobs` needs (a
server merely SHUTOFF is how a runner that ran its job to the end looks too, so it is not proof)."""

QUIET = frozenset({RunnerState.IDLE, RunnerState.BUSY})
"""States whose verdict depends on nothing but the runner's row and the look (no clock, no configuration, no
action under way): a runner in one, judged to stay, is judged again only when one of those changed."""

ENDED = frozenset({RunnerState.FINISHED, RunnerState.FAILED})
"""Where a runner goes when it leaves its job (done, deregistered, exited, or its server lost)."""


def left_a_running_job(transition: Transition, row: RunnerAndJob) -> bool:
    """Whether a runner just ended while the job table still has its job `in_progress`: the job's end was
    not heard of (a lost webhook), so the job tracker asks GitHub about it (`jobs.unfinished_without_runner`)."""
    return transition.target in ENDED and row.job_status is JobState.IN_PROGRESS


class Staying:
    """A pool's runners one pass judged to stay where they were, in a `QUIET` state, against one look and one
    configuration: the next pass need not judge them again while nothing they were judged by changed."""

    def __init__(self, observation: Observation, config: CorralConfig) -> None:
        self.observation = observation
        self.config = config
        self.rows: dict[str, RunnerAndJob] = {}
        """By runner id: the row (the same object while the runner and its job did not change,
        `store.known_runners`) each was judged on."""

    def add(self, row: RunnerAndJob) -> None:
        runner = row.runner
        # Only a runner already in its state when the look began: for one that moved since, absence from the
        # look proves nothing yet, and proves something the look after (so it must be judged again then).
        if runner.state in QUIET and runner.state_changed_at < self.observation.started_at:
            self.rows[runner.id] = row

    def keep(self, ids: set[str], earlier: Staying) -> None:
        """The runners not judged again this pass, because they still stay."""
        self.rows.update((runner_id, earlier.rows[runner_id]) for runner_id in ids)

    def still(self, rows: dict[str, RunnerAndJob], now: Observation, config: CorralConfig) -> set[str]:
        """Of these rows, the runners that still stay without being judged: their row is the one judged, in the
        same configuration, and the look is the one judged against, or the next one, which saw neither their
        server nor their registration change."""
        if config is not self.config:
            return set()
        if now.generation == self.observation.generation:
            changes = None
        elif now.changes is not None and now.changes.since == self.observation.generation:
            changes = now.changes
        else:
            return set()
        return {
            runner_id
            for runner_id, row in self.rows.items()
            if rows.get(runner_id) is row
            and (
                changes is None
                or (
                    runner_id not in changes.servers
                    and (row.runner.scope, row.runner.name) not in changes.registrations
                )
            )
        }


class RunnerJudge:
    def __init__(
        self,
        running: Running,
        mover: Mover,
        supervisor: Supervisor,
        creator: Creator,
        ask_github: Callable[[float], None],
        rollouts: Rollouts | None = None,
        clock: Clock = SYSTEM_CLOCK,
        lost_a_job: Callable[[], None] = lambda: None,
    ) -> None:
        """`ask_github(after_s)` is called when a job's fate became uncertain: GitHub is asked about it then;
        `lost_a_job()` when a runner's move marked its job lost with its server (the re-runs look at once)."""
        self._lost_a_job = lost_a_job
        self._running = running
        self.mover = mover
        self.supervisor = supervisor
        self.creator = creator
        self._ask_github = ask_github
        self._clock = clock
        """What a runner's `registered_at` is stamped by."""
        self._rollouts = rollouts or Rollouts(running, clock)
        """Told which runners came online or failed to: a rollout judges its new image by them."""
        self._noted_active: dict[str, None] = {}
        """Runners whose ACTIVE server is already noted (insertion-ordered, the oldest forgotten first)."""
        self._staying: dict[str, Staying] = {}
        """Per pool: its runners in a `QUIET` state the last pass judged to stay where they were."""

    async def judge(self, rows: list[RunnerAndJob], observation: Observation | None) -> list[Runner]:
        """Move every runner as far as what is known takes it, a step (one transaction) at a time, all by the
        configuration in force when the judging began."""
        config = self._running.read().config
        await self._note_active(rows, observation)
        by_id = {row.runner.id: row for row in rows}
        current = {row.runner.id: row.runner for row in rows}
        # Runners judged to stay against the look before, or this one, that nothing changed for since.
        pool = rows[0].runner.pool if rows else None
        earlier: Staying | None = None
        still: set[str] = set()
        stays: Staying | None = None
        if pool is not None and observation is not None:
            earlier = self._staying.get(pool)
            still = earlier.still(by_id, observation, config) if earlier is not None else set()
            stays = Staying(observation, config)
        pending = [runner_id for runner_id in current if runner_id not in still]
        if pool is not None:
            RUNNERS_JUDGED.labels(pool).inc(len(pending))
        for step in range(MAX_STEPS_PER_PASS):
            transitions = []
            for runner_id in pending:
                runner = current[runner_id]
                row = by_id[runner_id]
                verdict = judge_runner(self._facts(config, runner, row, observation))
                if verdict is not None:
                    transitions.append(self._transition(runner, row, verdict))
                elif step == 0 and stays is not None:
                    stays.add(row)
            if not transitions:
                break
            moved = await self.mover.apply(transitions)
            pending = []
            for transition, result in zip(transitions, moved, strict=True):
                if result is not None:
                    current[result.id] = result
                    pending.append(result.id)
                    await self._learn(config, transition)
                    if transition.presumed_taken:
                        self._ask_github(config.tuning.confirm_after)
                    if transition.lost_job is not None:
                        self._lost_a_job()
                    if left_a_running_job(transition, by_id[result.id]):
                        # Its `completed` webhook may be lost: GitHub's word now, not `stale_job_check` later.
                        self._ask_github(0.0)
        if pool is not None and stays is not None:
            if earlier is not None:
                stays.keep(still, earlier)
            self._staying[pool] = stays
        return [runner for runner in current.values() if runner.state is not RunnerState.DELETED]

    def forget(self, pool: str) -> None:
        """The pool is gone: what its last pass judged goes with it."""
        self._staying.pop(pool, None)

    async def _note_active(self, rows: list[RunnerAndJob], observation: Observation | None) -> None:
        """Booting runners whose server the look saw ACTIVE: noted once each (one write for them all)."""
        if observation is None or observation.servers is None:
            return
        active = [
            row.runner.id
            for row in rows
            if row.runner.state is RunnerState.BOOTING
            and row.runner.id not in self._noted_active
            and (server := observation.server_for(row.runner.id)) is not None
            and server.status == "ACTIVE"
        ]
        if not active:
            return
        await self.mover.mark_active(active)
        self._noted_active.update(dict.fromkeys(active))
        while len(self._noted_active) > MAX_NOTED_ACTIVE:
            self._noted_active.pop(next(iter(self._noted_active)))

    def _facts(
        self, config: CorralConfig, runner: Runner, row: RunnerAndJob, observation: Observation | None
    ) -> RunnerFacts:
        pool = config.pools.get(runner.pool)
        timeout = pool.bootstrap_timeout if pool else DEFAULT_BOOTSTRAP_TIMEOUT_S
        in_flight = self.supervisor.busy(runner.id)
        if observation is None:
            return RunnerFacts(
                state=runner.state,
                in_flight=in_flight,
                observed_age_s=0.0,
                bootstrap_timeout_s=timeout,
                server_known=False,
                registration_known=False,
                had_registration=runner.github_runner_id is not None,
                job_status=row.job_status,
            )
        # Absence only counts against a runner that was already in its state when the look began.
        seen_before = runner.state_changed_at < observation.started_at
        server = observation.server_for(runner.id)
        registration = observation.registration_for(runner.scope, runner.name)
        return RunnerFacts(
            state=runner.state,
            in_flight=in_flight,
            observed_age_s=(observation.started_at - runner.created_at).total_seconds(),
            bootstrap_timeout_s=timeout,
            server_known=server is not None
            or (seen_before and observation.listed_cloud(config.cloud_of(runner.cloud))),
            server_status=server.status if server else None,
            server_fault=server.fault if server else None,
            registration_known=runner.scope in observation.registrations and (registration is not None or seen_before),
            registered=registration is not None,
            online=bool(registration and registration.online),
            busy=bool(registration and registration.busy),
            had_registration=runner.github_runner_id is not None,
            job_status=row.job_status,
        )

    async def _learn(self, config: CorralConfig, transition: Transition) -> None:
        """What a runner's move says about its pool's way from intent to runner: back off, or carry on."""
        # Came online: seen idle, or (in a busy pool, where a runner takes a job as it registers) seen busy or
        # done from booting, which is when `_transition` sets its `registered_at`.
        if transition.reason is Reason.CAME_ONLINE or transition.registered_at is not None:
            await self.creator.came_online(transition.runner)
            self._rollouts.came_online(transition.runner)
        elif transition.target is RunnerState.FAILED and transition.reason in BOOT_FAILURES:
            await self.creator.booting_failed(transition.runner, transition.reason, transition.message)
            self._rollouts.boot_failed(transition.runner)
        elif transition.target is RunnerState.FAILED and transition.reason is Reason.CLOUD_QUOTA:
            # Nova accepted the create, then its quota recheck put the server in ERROR: the quota failed, not
            # the image (no rollout hears of it) nor the cloud; the pool waits as after a refused create.
            cloud = config.cloud_of(transition.runner.cloud)
            retry = config.cloud_settings().get(cloud, config.cloud).quota_retry
            await self.creator.over_quota(transition.runner, transition.message, retry)

    def _transition(self, runner: Runner, row: RunnerAndJob, verdict: Verdict) -> Transition:
        registered_at = None
        # It came online: seen online, seen busy, or its job was done (which it must have come online for).
        came_online = verdict.target in (RunnerState.IDLE, RunnerState.BUSY) or verdict.reason is Reason.JOB_DONE
        if came_online and runner.registered_at is None:
            registered_at = self._clock.now()
            RUNNER_BOOT_SECONDS.labels(runner.pool).observe((registered_at - runner.created_at).total_seconds())
        # A runner that turned busy, or finished from booting or idle (its job was over before corral saw it
        # busy), took a job; unless the job table says which, it may not be the one it was started for.
        took_a_job = verdict.target is RunnerState.BUSY or (
            verdict.target is RunnerState.FINISHED and runner.state in (RunnerState.BOOTING, RunnerState.IDLE)
        )
        took = row.job_id if row.job_status is not None else None
        diverted = runner.job_id if took_a_job and runner.job_id is not None and took != runner.job_id else None
        lost = (
            row.job_id
            if verdict.target is RunnerState.FAILED
            and verdict.reason in MACHINE_LOST
            and runner.state is RunnerState.BUSY
            and row.job_status is JobState.IN_PROGRESS
            else None
        )
        return Transition(
            runner,
            verdict.target,
            verdict.reason,
            verdict.message,
            registered_at=registered_at,
            diverted_job=diverted,
            # Unless it took a job nobody else was started for, the job it was started for has most likely
            # gone to another of the pool's runners (runners take the oldest fitting job, not their own).
            presumed_taken=diverted is not None and (took is None or row.job_had_runner),
            lost_job=lost,
            # Busy from when its job started (a webhook's news), not from when this pass saw it.
            at=row.job_started_at if verdict.target is RunnerState.BUSY and took is not None else None,
        )
