"""Self-hosted runners and the jobs they run, as GitHub's Actions service schedules them.

A JIT runner is registered (listed offline) when its configuration is generated. When its guest starts
it, the runner comes online and GitHub hands it the oldest queued job it can serve: the runner's scope
covers the job's repository and every label the job asks for is one of the runner's (case-insensitive).
A job submitted while fitting runners idle starts at once, on the one idle longest (the world fault
`runner_choice: newest` picks the one online last instead: GitHub promises no order). The ephemeral
runner runs that one job, reports completion (its job's `outcome`: a job may fail on its own), deregisters
and exits. If its machine vanishes the runner goes offline and a job it was running fails, `lost_contact_delay`
later (the world fault `lost_mid_job_rate` takes the machine away halfway through a job). A completed job can
be re-run: a new job, with a new id, in its run's next attempt. Every job transition is reported through
`on_job_event` (the webhook source).

Runner scale sets (`github/actions/`) route their jobs themselves: the `delegate` is offered every new job
first and told when one of its runners comes online; it hands jobs to runners through `start`. A scale
set's runner never takes a job from the queue here, and a job a scale set claimed never enters it.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from itertools import count
from typing import TYPE_CHECKING, Any, Protocol

from corral_sandbox.github import jitconfig
from corral_sandbox.github.clock import isoformat, utcnow
from corral_sandbox.github.errors import GitHubError
from corral_sandbox.github.model import (
    DEFAULT_GROUP_NAME,
    READ_ONLY_LABELS,
    Job,
    Repository,
    Runner,
    RunnerLabel,
    Scope,
    WorkflowRun,
)
from corral_sandbox.github.payloads import sha

if TYPE_CHECKING:
    from corral_sandbox.world import World

JobEvent = Callable[[Job, str], None]


class ScaleSetDelegate(Protocol):
    def claim(self, job: Job) -> bool:
        """Take a newly queued job whose labels name a scale set; False leaves it to classic runners."""

    def runner_online(self, runner: Runner) -> None:
        """A scale set's runner came online and may be handed a job."""


class Scheduler:
    def __init__(self, world: World, on_job_event: JobEvent) -> None:
        self.world = world
        self.on_job_event = on_job_event
        self.runners: dict[int, Runner] = {}
        self.by_scope: dict[Scope, dict[int, Runner]] = {}
        self.jobs: dict[int, Job] = {}
        self.runs: dict[int, WorkflowRun] = {}
        self.runs_by_repo: dict[int, list[WorkflowRun]] = {}
        self._by_secret: dict[str, int] = {}
        self._names: dict[Scope, set[str]] = {}
        self._queued: dict[int, Job] = {}
        self._idle: dict[int, Runner] = {}
        self._runner_ids = count(1)
        self._label_ids = count(1 + len(READ_ONLY_LABELS))
        self._run_ids = count(12_000_000_001)
        self._job_ids = count(34_000_000_001)
        self._run_numbers: dict[int, int] = {}
        self.registered_total = 0
        self.delegate: ScaleSetDelegate | None = None

    # -- runners -----------------------------------------------------------------------------

    def register(self, scope: Scope, name: str, group_id: int, labels: list[str], work_folder: str) -> Runner:
        """A JIT runner, listed offline with the read-only labels plus `labels`; 409 if the name is taken."""
        names = self._names.setdefault(scope, set())
        if name.lower() in names:
            raise GitHubError(409, f"Already exists - A runner with the name {name} already exists.")
        runner = Runner(
            id=next(self._runner_ids),
            name=name,
            scope=scope,
            group_id=group_id,
            labels=[RunnerLabel(i, n, "read-only") for i, n in enumerate(READ_ONLY_LABELS, start=1)],
            work_folder=work_folder,
            secret=jitconfig.new_secret(),
            created_at=utcnow(),
        )
        self.add_labels(runner, labels)
        self.runners[runner.id] = runner
        self.by_scope.setdefault(scope, {})[runner.id] = runner
        names.add(name.lower())
        self._by_secret[runner.secret] = runner.id
        self.registered_total += 1
        return runner

    def add_labels(self, runner: Runner, names: list[str]) -> None:
        have = {label.name.lower() for label in runner.labels}
        for name in names:
            if name.lower() not in have:
                runner.labels.append(RunnerLabel(next(self._label_ids), name, "custom"))
                have.add(name.lower())

    def in_scope(self, scope: Scope) -> list[Runner]:
        return list(self.by_scope.get(scope, {}).values())

    def get(self, scope: Scope, runner_id: int) -> Runner | None:
        return self.by_scope.get(scope, {}).get(runner_id)

    def delete(self, runner: Runner) -> None:
        """`DELETE .../runners/{id}`: refused while busy; a connected runner then exits."""
        if runner.busy:
            raise GitHubError(422, f'Bad request - Runner "{runner.name}" is still running a job')
        was_online = runner.status == "online"
        self._deregister(runner)
        if was_online:
            self.world.runner_exited(runner.id)

    def _deregister(self, runner: Runner) -> None:
        self.runners.pop(runner.id, None)
        self.by_scope.get(runner.scope, {}).pop(runner.id, None)
        self._names.get(runner.scope, set()).discard(runner.name.lower())
        self._by_secret.pop(runner.secret, None)
        self._idle.pop(runner.id, None)

    def consume(self, secrets_found: list[str]) -> int | None:
        """The registered runner whose unused configuration is among `secrets_found`; marks it used."""
        for secret in secrets_found:
            runner_id = self._by_secret.get(secret)
            runner = self.runners.get(runner_id) if runner_id is not None else None
            if runner is not None and not runner.consumed:
                runner.consumed = True
                return runner.id
        return None

    def connect(self, runner_id: int) -> None:
        runner = self.runners.get(runner_id)
        if runner is None or runner.status == "online":
            return
        runner.status = "online"
        runner.os = "Linux"
        if runner.scale_set_id is not None and self.delegate is not None:
            self.delegate.runner_online(runner)
            return
        job = next((j for j in self._queued.values() if self._fits(runner, j)), None)
        if job is not None:
            self._start(job, runner)
        else:
            self._idle[runner.id] = runner

    def disconnect(self, runner_id: int) -> None:
        runner = self.runners.get(runner_id)
        if runner is None:
            return
        runner.status = "offline"
        self._idle.pop(runner.id, None)
        job = self.jobs.get(runner.job_id) if runner.job_id is not None else None
        if job is not None and job.status == "in_progress":
            if job.timer is not None:  # it will not finish: its runner is gone
                job.timer.cancel()
                job.timer = None
            job.runner_lost = True
            delay = self.world.timings.lost_contact_delay
            if delay > 0:
                job.timer = self.world.call_later(delay, self._lost, job.id)
            else:
                self._complete(job, "failure", runner_exits=False)

    def _lost(self, job_id: int) -> None:
        """GitHub gives up on a job whose runner stopped answering."""
        job = self.jobs.get(job_id)
        if job is not None and job.status == "in_progress":
            job.timer = None
            self._complete(job, "failure", runner_exits=False)

    @staticmethod
    def _fits(runner: Runner, job: Job) -> bool:
        return runner.scale_set_id is None and runner.scope.serves(job.repo) and runner.fits(job.labels)

    # -- jobs --------------------------------------------------------------------------------

    def submit(
        self,
        repo: Repository,
        labels: list[str],
        duration: float,
        workflow_name: str | None,
        outcome: str = "success",
    ) -> Job:
        now = utcnow()
        name = workflow_name or "CI"
        run_number = self._run_numbers.get(repo.id, 0) + 1
        self._run_numbers[repo.id] = run_number
        run = WorkflowRun(
            id=next(self._run_ids),
            repo=repo,
            name=name,
            run_number=run_number,
            head_sha=sha(f"{repo.full_name}-{run_number}-{secrets.token_hex(4)}"),
            created_at=now,
            updated_at=now,
        )
        job = Job(
            id=next(self._job_ids),
            run=run,
            name="build",
            labels=list(labels),
            duration=duration,
            created_at=now,
            outcome=outcome,
        )
        self.runs[run.id] = run
        self.runs_by_repo.setdefault(repo.id, []).append(run)
        self._queue(job)
        return job

    def rerun(self, job: Job) -> Job:
        """`POST .../actions/jobs/{id}/rerun`: the job again, as a new job (new id) in the run's next attempt;
        403 while the run is not completed, as GitHub refuses it."""
        run = job.run
        if run.status != "completed":
            raise GitHubError(403, "This workflow run is not completed")
        now = utcnow()
        run.run_attempt += 1
        run.status, run.conclusion, run.updated_at = "queued", None, now
        again = Job(
            id=next(self._job_ids),
            run=run,
            name=job.name,
            labels=list(job.labels),
            duration=job.duration,
            created_at=now,
            run_attempt=run.run_attempt,
            outcome=job.outcome,
        )
        self._queue(again)
        return again

    def _queue(self, job: Job) -> None:
        """A new job: listed in its run, announced (`queued`), then offered to a scale set or queued."""
        job.run.job_ids.append(job.id)
        self.jobs[job.id] = job
        self.on_job_event(job, "queued")
        if self.delegate is None or not self.delegate.claim(job):
            self.enqueue(job)

    def enqueue(self, job: Job) -> None:
        """Queue `job` for classic runners; an idle one that fits takes it at once: the one idle longest, or
        the one that came online last with the world fault `runner_choice: newest` (GitHub promises no order)."""
        self._queued[job.id] = job
        idle = list(self._idle.values())
        if self.world.faults.world.runner_choice == "newest":
            idle.reverse()
        runner = next((r for r in idle if self._fits(r, job)), None)
        if runner is not None:
            self._start(job, runner)

    def queued(self) -> list[Job]:
        """Jobs waiting for a classic runner, oldest first."""
        return list(self._queued.values())

    def withdraw(self, job: Job) -> None:
        """Take a waiting job off the classic queue (a scale set that fits it appeared)."""
        self._queued.pop(job.id, None)

    def start(self, job: Job, runner: Runner) -> None:
        """`runner` picks `job` up: how a scale set hands over the jobs GitHub assigned it."""
        self._start(job, runner)

    def fail_unstarted(self, job: Job) -> None:
        """Close a job no runner ever picked up as failed."""
        if job.status != "completed":
            self._complete(job, "failure", runner_exits=False)

    def _start(self, job: Job, runner: Runner) -> None:
        self._queued.pop(job.id, None)
        self._idle.pop(runner.id, None)
        now = utcnow()
        runner.busy = True
        runner.job_id = job.id
        job.status = "in_progress"
        job.started_at = now
        job.runner_id = runner.id
        job.runner_name = runner.name
        job.runner_group_id = runner.group_id
        job.runner_group_name = job.runner_group_name or DEFAULT_GROUP_NAME  # a scale set names its group
        job.run.status = "in_progress"
        job.run.run_started_at = now
        job.run.updated_at = now
        self.on_job_event(job, "in_progress")
        job.timer = self.world.call_later(job.duration, self._finish, job.id)
        if self.world.faults.chance(self.world.faults.world.lost_mid_job_rate):
            self.world.call_later(job.duration / 2, self._lose_machine, runner.id, job.id)

    def _lose_machine(self, runner_id: int, job_id: int) -> None:
        """`lost_mid_job_rate`: the server of the runner still running `job_id` dies under it."""
        runner = self.runners.get(runner_id)
        server_id = self.world.server_of_runner(runner_id)
        if runner is not None and runner.job_id == job_id and server_id is not None:
            self.world.stats.incr("servers_lost_mid_job")
            self.world.crash_server(server_id)

    def _finish(self, job_id: int) -> None:
        job = self.jobs.get(job_id)
        if job is not None and job.status == "in_progress":
            self._complete(job, job.outcome, runner_exits=True)

    def _complete(self, job: Job, conclusion: str, *, runner_exits: bool) -> None:
        """Close `job`; its ephemeral runner, if it is still alive, deregisters and exits."""
        if job.timer is not None:
            job.timer.cancel()
            job.timer = None
        self._queued.pop(job.id, None)
        now = utcnow()
        job.status = "completed"
        job.conclusion = conclusion
        job.completed_at = now
        job.run.status = "completed"
        job.run.conclusion = conclusion
        job.run.updated_at = now
        self.on_job_event(job, "completed")
        runner = self.runners.get(job.runner_id) if job.runner_id is not None else None
        if runner is None:
            return
        runner.busy = False
        runner.job_id = None
        if runner_exits:
            self._deregister(runner)
            self.world.runner_exited(runner.id)

    def cancel(self, job: Job) -> None:
        if job.status != "completed":
            self._complete(job, "cancelled", runner_exits=True)

    # -- views -------------------------------------------------------------------------------

    def job_view(self, job: Job) -> dict[str, Any]:
        return {
            "id": job.id,
            "run_id": job.run.id,
            "repo": job.repo.full_name,
            "labels": list(job.labels),
            "workflow_name": job.run.name,
            "status": job.status,
            "conclusion": job.conclusion,
            "run_attempt": job.run_attempt,
            "runner_lost": job.runner_lost,
            "runner_id": job.runner_id,
            "runner_name": job.runner_name,
            "queued_at": isoformat(job.created_at),
            "started_at": isoformat(job.started_at),
            "completed_at": isoformat(job.completed_at),
            # GitHub's timestamps have one-second resolution; these (epoch seconds) are for measuring.
            "queued_at_s": job.created_at.timestamp(),
            "started_at_s": job.started_at.timestamp() if job.started_at else None,
            "completed_at_s": job.completed_at.timestamp() if job.completed_at else None,
        }

    def snapshot(self) -> dict[str, Any]:
        online = sum(1 for r in self.runners.values() if r.status == "online")
        busy = sum(1 for r in self.runners.values() if r.busy)
        by_status = {"queued": 0, "in_progress": 0, "completed": 0}
        for job in self.jobs.values():
            by_status[job.status] += 1
        return {
            "runners": {
                "registered_total": self.registered_total,
                "registered": len(self.runners),
                "online": online,
                "busy": busy,
            },
            "jobs": by_status,
        }
