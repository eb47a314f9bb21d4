"""Jobs for runner scale sets: routing, assignment, acquisition, runner hand-off, and the messages they make.

A job whose labels are all labels of a scale set that serves its repository (the set's name counts only if
registered as one of them, as GitHub's listener does; a set created with none is labelled with its name)
belongs to scale sets, not to classic runners; one queued before such a set exists moves to it when the set
appears, and goes back to classic runners if every set that fitted it is deleted before it started.

On github.com (the default) GitHub assigns the job to a set itself, filling each fitting set up to the
capacity its listener last advertised (`X-ScaleSetMaxCapacity`; no limit before it advertises one), oldest
set first: `JobAssigned`. With `requires_acquire` (Enterprise Server) the job is announced to every fitting
set with a live session (`JobAvailable`) and the first `acquirejobs` for it wins: `JobAssigned`.

GitHub then picks an idle runner of the set and assigns it the job; the runner picks it up (`JobStarted`),
runs it and the job completes (`JobCompleted` with `succeeded`, `failed` or `canceled`). A runner that does
not pick its job up within `reassign_after_s` (the `scaleset_pickup_stall_rate` fault makes one hang) costs
that attempt: `JobCompleted` `canceled` for it, and the job is requeued to the scale sets with a new runner
request, three times at most; when the fourth assignment is not picked up either, the job fails. The
workflow_job webhooks are those of any job: queued, in_progress when a runner picks it up, completed.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from itertools import count
from typing import TYPE_CHECKING, Any

from corral_sandbox.github.actions import views
from corral_sandbox.github.actions.model import ScaleSet, ScaleSetJob, Tenant
from corral_sandbox.github.actions.registry import Registry
from corral_sandbox.github.actions.sessions import Sessions
from corral_sandbox.github.actions.settings import MAX_REQUEUES, ActionsSettings
from corral_sandbox.github.clock import utcnow
from corral_sandbox.github.model import Job, Runner
from corral_sandbox.github.scheduler import Scheduler

if TYPE_CHECKING:
    from corral_sandbox.world import World

RESULTS = {"success": "succeeded", "failure": "failed", "cancelled": "canceled"}
"""A REST conclusion as a `JobCompleted` result (the service's TaskResult names)."""

ACQUIRE_PATH = "_apis/runtime/runnerscalesets/{}/acquirejobs"

JOB_ID_NAMESPACE = uuid.UUID("7d3c8a1e-5b2f-4c6d-9e0a-1f2b3c4d5e6f")


class JobRouter:
    """Everything here runs on the world's loop. The indexes (`waiting`, `assigned`, `held`) keep each event's
    work proportional to what it changes, so a backlog of thousands of jobs stays cheap to route."""

    def __init__(
        self,
        world: World,
        scheduler: Scheduler,
        registry: Registry,
        sessions: Sessions,
        settings: Callable[[], ActionsSettings],
        service_url: Callable[[Tenant], str],
    ) -> None:
        self.world = world
        self.scheduler = scheduler
        self.registry = registry
        self.sessions = sessions
        self._settings = settings
        self._service_url = service_url
        self.tracked: dict[int, ScaleSetJob] = {}
        """Unfinished scale-set jobs by REST job id."""
        self.finished: dict[int, ScaleSetJob] = {}
        """Completed ones, as they last were (for the control API)."""
        self.waiting: dict[int, ScaleSetJob] = {}
        """Tracked jobs no scale set holds yet (pending or available)."""
        self.assigned: dict[int, dict[int, ScaleSetJob]] = {}
        """Scale set id -> the jobs it holds that no runner was handed yet, oldest first."""
        self.held: Counter[int] = Counter()
        """Scale set id -> unfinished jobs assigned to it (what its capacity bounds)."""
        self.reserved: dict[int, int] = {}
        """Runner id -> job id: runners handed a job they have not picked up."""
        self.stalled: set[int] = set()
        """Runners that hung on a job they were handed: GitHub hands them nothing more."""
        self._request_ids = count(1)
        self._fresh: list[ScaleSetJob] = []
        self._reconsider = False
        self._fitting: dict[int, tuple[int, list[ScaleSet]]] = {}
        self._scheduling = False
        self._again = False

    # -- the scheduler's delegate ----------------------------------------------------------------

    def claim(self, job: Job) -> bool:
        if not self.registry.matching(job.repo, job.labels):
            return False
        self._wait(self._attempt(job, None, 0))
        self.schedule()
        return True

    def runner_online(self, runner: Runner) -> None:
        self.schedule()

    def adopt_queued(self) -> None:
        """Scale sets changed: classic jobs one now fits move to it, and every waiting job is looked at again."""
        for job in self.scheduler.queued():
            if self.registry.matching(job.repo, job.labels):
                self.scheduler.withdraw(job)
                self._wait(self._attempt(job, None, 0))
        self.reconsider()

    def reconsider(self) -> None:
        """Something every waiting job depends on changed (scale sets, sessions, settings): place them again."""
        self._reconsider = True
        self.schedule()

    # -- attempts --------------------------------------------------------------------------------

    def _attempt(self, job: Job, previous: ScaleSetJob | None, requeues: int) -> ScaleSetJob:
        """A runner request for `job`: its first, or the next after `previous`."""
        guid = previous.job_guid if previous else str(uuid.uuid5(JOB_ID_NAMESPACE, str(job.id)))
        return ScaleSetJob(job=job, job_guid=guid, request_id=next(self._request_ids), requeues=requeues)

    def _wait(self, tracked: ScaleSetJob) -> None:
        self.tracked[tracked.job.id] = tracked
        self.waiting[tracked.job.id] = tracked
        self._fresh.append(tracked)

    def _forget(self, tracked: ScaleSetJob) -> None:
        """Take an attempt out of every index (the job completed, or its next attempt replaces it)."""
        job_id = tracked.job.id
        if self.tracked.get(job_id) is tracked:
            del self.tracked[job_id]
        if self.waiting.get(job_id) is tracked:
            del self.waiting[job_id]
        if tracked.scale_set_id is not None:
            self.held[tracked.scale_set_id] -= 1
            self.assigned.get(tracked.scale_set_id, {}).pop(job_id, None)
        if tracked.runner_id is not None and self.reserved.get(tracked.runner_id) == job_id:
            del self.reserved[tracked.runner_id]

    def _requeue(self, tracked: ScaleSetJob, requeues: int) -> None:
        self._forget(tracked)
        self._wait(self._attempt(tracked.job, tracked, requeues))

    def fitting(self, tracked: ScaleSetJob) -> list[ScaleSet]:
        cached = self._fitting.get(tracked.job.id)
        if cached is None or cached[0] != self.registry.version:
            cached = (self.registry.version, self.registry.matching(tracked.job.repo, tracked.job.labels))
            self._fitting[tracked.job.id] = cached
        return cached[1]

    # -- placement -------------------------------------------------------------------------------

    def schedule(self) -> None:
        """Place waiting jobs on scale sets and assigned jobs on idle runners, until nothing moves."""
        if self._scheduling:
            self._again = True
            return
        self._scheduling = True
        try:
            self._again = True
            while self._again:
                self._again = False
                self._place()
                self._hand_over()
        finally:
            self._scheduling = False

    def _place(self) -> None:
        everything, self._reconsider = self._reconsider, False
        fresh, self._fresh = self._fresh, []
        if everything:
            for tracked in list(self.waiting.values()):
                if not self.fitting(tracked):
                    self._forget(tracked)
                    self._fitting.pop(tracked.job.id, None)
                    self.scheduler.enqueue(tracked.job)
        if not self.waiting:
            return
        if self._settings().requires_acquire:
            for tracked in list(self.waiting.values()) if everything else fresh:
                if self.waiting.get(tracked.job.id) is tracked:
                    self._announce(tracked)
            return
        free = {
            s.id: len(self.waiting) if s.capacity is None else s.capacity - self.held[s.id]
            for s in self.registry.scale_sets.values()
        }
        room = sum(max(n, 0) for n in free.values())
        for tracked in sorted(self.waiting.values(), key=lambda t: t.job.id) if room else ():
            target = next((s for s in self.fitting(tracked) if free[s.id] > 0), None)
            if target is not None:
                self._assign(tracked, target)
                free[target.id] -= 1
                room -= 1
                if not room:
                    break

    def _announce(self, tracked: ScaleSetJob) -> None:
        """Enterprise Server: tell every fitting set's listener the job may be acquired."""
        tracked.state = "available"
        for scale_set in self.fitting(tracked):
            if scale_set.id not in tracked.announced and self.sessions.active(scale_set.id) is not None:
                tracked.announced.add(scale_set.id)
                url = f"{self._service_url(scale_set.tenant)}{ACQUIRE_PATH.format(scale_set.id)}"
                self.sessions.emit(scale_set.id, views.job_message("JobAvailable", tracked, acquireJobUrl=url))

    def _assign(self, tracked: ScaleSetJob, scale_set: ScaleSet) -> None:
        del self.waiting[tracked.job.id]
        tracked.state = "assigned"
        tracked.scale_set_id = scale_set.id
        tracked.scale_set_assign_time = utcnow()
        self.held[scale_set.id] += 1
        self.assigned.setdefault(scale_set.id, {})[tracked.job.id] = tracked
        self.sessions.emit(scale_set.id, views.job_message("JobAssigned", tracked))

    def idle_runners(self, scale_set: ScaleSet) -> list[Runner]:
        return [
            r
            for r in self.scheduler.in_scope(scale_set.scope)
            if r.scale_set_id == scale_set.id
            and r.status == "online"
            and not r.busy
            and r.id not in self.reserved
            and r.id not in self.stalled
        ]

    def _hand_over(self) -> None:
        """GitHub gives each set's assigned jobs, oldest first, to the set's idle runners."""
        for scale_set_id, queue in list(self.assigned.items()):
            scale_set = self.registry.scale_sets.get(scale_set_id)
            if not queue or scale_set is None:
                continue
            for tracked, runner in zip(list(queue.values()), self.idle_runners(scale_set), strict=False):
                del queue[tracked.job.id]
                self._hand_to(tracked, runner, scale_set)

    def _hand_to(self, tracked: ScaleSetJob, runner: Runner, scale_set: ScaleSet) -> None:
        tracked.state = "runner_assigned"
        tracked.runner_id = runner.id
        tracked.runner_name = runner.name
        tracked.runner_assign_time = utcnow()
        if self.world.faults.chance(self.world.faults.world.scaleset_pickup_stall_rate):
            self.world.stats.incr("scaleset_pickups_stalled")
            self.stalled.add(runner.id)
            self.reserved[runner.id] = tracked.job.id
            self.world.call_later(
                self._settings().reassign_after_s, self._not_picked_up, tracked.job.id, tracked.request_id
            )
        else:
            tracked.state = "running"
            tracked.job.runner_group_name = self.registry.group(scale_set.scope, scale_set.group_id).name
            self.scheduler.start(tracked.job, runner)

    def _not_picked_up(self, job_id: int, request_id: int) -> None:
        tracked = self.tracked.get(job_id)
        if tracked is None or tracked.request_id != request_id or tracked.state != "runner_assigned":
            return
        if tracked.requeues >= MAX_REQUEUES:
            self.world.stats.incr("scaleset_jobs_never_picked_up")
            self.scheduler.fail_unstarted(tracked.job)
            return
        self.world.stats.incr("scaleset_jobs_requeued")
        if tracked.scale_set_id is not None:
            canceled = views.job_message(
                "JobCompleted",
                tracked,
                result="canceled",
                runnerId=tracked.runner_id or 0,
                runnerName=tracked.runner_name or "",
                finishTime=views.time(utcnow()),
            )
            self.sessions.emit(tracked.scale_set_id, canceled)
        self._requeue(tracked, tracked.requeues + 1)
        self.schedule()

    # -- acquisition (Enterprise Server) ---------------------------------------------------------

    def acquire(self, scale_set: ScaleSet, request_ids: list[int]) -> list[int]:
        """The requests this set now holds: those it was first to acquire, and those already its own."""
        wanted = set(request_ids)
        acquired = []
        for tracked in list(self.tracked.values()):
            if tracked.request_id not in wanted:
                continue
            if tracked.state == "available" and scale_set.serves(tracked.job.repo, tracked.job.labels):
                tracked.acquired = True
                self._assign(tracked, scale_set)
                acquired.append(tracked.request_id)
            elif tracked.scale_set_id == scale_set.id:
                acquired.append(tracked.request_id)
        self.schedule()
        return acquired

    def session_opened(self, scale_set: ScaleSet) -> None:
        """A new listener is told again about every job still waiting to be acquired."""
        for tracked in self.waiting.values():
            tracked.announced.discard(scale_set.id)
        self.reconsider()

    def scale_set_removed(self, scale_set: ScaleSet) -> None:
        """Jobs the set held but no runner started go back to waiting for a set (or a classic runner)."""
        for tracked in list(self.tracked.values()):
            if tracked.scale_set_id == scale_set.id and tracked.state in ("assigned", "runner_assigned"):
                self._requeue(tracked, tracked.requeues)
            else:
                tracked.announced.discard(scale_set.id)
        self.assigned.pop(scale_set.id, None)
        self.reconsider()

    # -- job events (from the scheduler, through GitHubState) ------------------------------------

    def job_event(self, job: Job, action: str) -> None:
        tracked = self.tracked.get(job.id)
        if tracked is None:
            return
        if action == "completed":
            self._completed(tracked)
            return
        set_id = tracked.scale_set_id
        if action != "in_progress" or set_id is None:
            return
        self.sessions.emit(
            set_id, views.job_message("JobStarted", tracked, runnerId=job.runner_id, runnerName=job.runner_name)
        )

    def _completed(self, tracked: ScaleSetJob) -> None:
        job = tracked.job
        self._forget(tracked)
        self._fitting.pop(job.id, None)
        self.finished[job.id] = tracked
        if tracked.scale_set_id is not None:
            completed = views.job_message(
                "JobCompleted",
                tracked,
                result=RESULTS.get(job.conclusion or "", "failed"),
                runnerId=tracked.runner_id or 0,
                runnerName=tracked.runner_name or "",
            )
            self.sessions.emit(tracked.scale_set_id, completed)
        self.schedule()

    # -- what the service reports ----------------------------------------------------------------

    def statistics(self, scale_set: ScaleSet) -> dict[str, int]:
        """The set's counters, as of now. Assigned: its unfinished jobs (waiting for a runner, handed to one,
        or running), the figure the reference listener scales on; acquired: those of them it acquired;
        available: jobs announced to it and not acquired by anyone yet; registered: its runners, started or
        not; busy: running a job; idle: online, running nothing and not handed a job."""
        mine = [t for t in self.tracked.values() if t.scale_set_id == scale_set.id]
        runners = [r for r in self.scheduler.in_scope(scale_set.scope) if r.scale_set_id == scale_set.id]
        available = sum(
            1 for t in self.waiting.values() if t.state == "available" and scale_set.serves(t.job.repo, t.job.labels)
        )
        return {
            "totalAvailableJobs": available,
            "totalAcquiredJobs": sum(1 for t in mine if t.acquired),
            "totalAssignedJobs": len(mine),
            "totalRunningJobs": sum(1 for t in mine if t.state == "running"),
            "totalRegisteredRunners": len(runners),
            "totalBusyRunners": sum(1 for r in runners if r.busy),
            "totalIdleRunners": len(self.idle_runners(scale_set)),
        }

    def view(self, job_id: int) -> dict[str, Any] | None:
        """What the control API shows of a job's life on the scale-set path."""
        tracked = self.tracked.get(job_id) or self.finished.get(job_id)
        if tracked is None:
            return None
        return {
            "job_id": tracked.job_guid,
            "runner_request_id": tracked.request_id,
            "state": "completed" if job_id in self.finished else tracked.state,
            "scale_set_id": tracked.scale_set_id,
            "requeues": tracked.requeues,
        }
