"""Re-running the jobs lost with their runner's server (`rerun_lost_jobs`): the job tracker's third duty.

A job is marked lost when the judge moves its busy runner to `failed` because the server went to ERROR or
vanished (`store.runners.apply`). Here each lost job is decided once GitHub has failed it: re-run through
GitHub's API, at most the pool's `rerun_lost_jobs` times per job (its attempts share the run and the job's
name), or not, and why (`jobs.rerun`). A re-run is claimed in the database before GitHub is asked
(`store.reruns.claim`): replicas and restarts re-run a lost attempt once.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

from corral.clock import Clock
from corral.config import CorralConfig, ScopeConfig
from corral.engine.backoff import LogOnce
from corral.engine.supervisor import ActionKind
from corral.github.client import GitHubClient, GitHubError
from corral.metrics import ACTION_ERRORS, GITHUB_ERRORS, JOBS_RERUN
from corral.model import Job, JobState
from corral.outages import log_unexpected
from corral.store import Store, reruns
from corral.store import jobs as store_jobs

logger = logging.getLogger("corral.jobs")

LOST_JOBS_PER_UPKEEP = 50
LOST_JOBS_RECHECK_S = 60.0
"""How often the store is asked for lost jobs when none is known to wait: a job another replica's judge lost
is decided within this (GitHub takes minutes to fail it anyway). A job this corral lost is looked at the
next round (`heard`)."""
RETRY_LATER = frozenset({403, 409, 429})
"""GitHub's answers to a re-run that may succeed later: 403 while other jobs of its run still run (a run is
re-run only once completed), 409, and a rate limit. Any other 4xx is final; a 5xx or no answer, retried."""

ScopeFor = Callable[[CorralConfig, str | None, str], ScopeConfig]


class LostJobs:
    def __init__(
        self, store: Store, github: GitHubClient, log_once: LogOnce, clock: Clock, scope_for: ScopeFor
    ) -> None:
        """`scope_for(config, pool, repository)`: whose credentials ask GitHub about a job (the job tracker's)."""
        self._store = store
        self._github = github
        self._log_once = log_once
        self._clock = clock
        self._scope_for = scope_for
        self.waiting = False
        """Some lost job waits for GitHub to fail it (or for its run to complete): ask again soon."""
        self._next_look = 0.0
        """When (the clock's monotonic time) the store is next asked for lost jobs, unless one waits or was just
        heard of: job upkeep runs each time a runner finishes a job, and lost jobs are rare (at one job a
        second, the query was one statement a job for nothing). 0: at the next round (a restart asks at once)."""

    def heard(self) -> None:
        """This corral's judge marked a job lost: decide about it at the next round."""
        self._next_look = 0.0

    async def decide(self, config: CorralConfig) -> None:
        """Decide about each lost job: re-run it if GitHub failed it and its pool allows another re-run, else
        say why not (`jobs.rerun`). Sets `waiting` when one waits on GitHub. Asks the store only when a lost
        job waits, was just heard of, or `LOST_JOBS_RECHECK_S` has passed."""
        now = self._clock.monotonic()
        if not self.waiting and now < self._next_look:
            return
        lost = await self._store.run(reruns.undecided, limit=LOST_JOBS_PER_UPKEEP)
        # A full batch leaves more for the next round; otherwise nothing more until one is heard of (or the
        # recheck: another replica may have lost one).
        self._next_look = 0.0 if len(lost) == LOST_JOBS_PER_UPKEEP else now + LOST_JOBS_RECHECK_S
        waiting = False
        for job in lost:
            try:
                waiting |= not await self._decide(config, job)
            except Exception:
                log_unexpected(
                    logger,
                    "re-running lost job %d failed unexpectedly; trying again later",
                    job.id,
                    counted=ACTION_ERRORS.labels(ActionKind.JOB_UPKEEP.value),
                )
                waiting = True
        self.waiting = waiting

    async def _decide(self, config: CorralConfig, job: Job) -> bool:
        """One lost job: True once decided, False while it waits on GitHub."""
        pool = config.pools.get(job.pool) if job.pool is not None else None
        allowed = pool.rerun_lost_jobs if pool is not None else 0
        if allowed == 0:
            return await self._settle(job, "off", "off")
        scope = self._scope_for(config, job.pool, job.repository)
        if job.status is not JobState.COMPLETED:
            try:
                status = await self._github.get_job(scope, job.repository, job.id)
            except GitHubError as exc:
                GITHUB_ERRORS.labels(type(exc).__name__).inc()
                self._log_once.warning("jobs:lost", f"cannot ask GitHub about lost job {job.id}: {exc}")
                return False
            if status.status != "completed":
                return False  # GitHub has not given up on its runner yet
            job = dataclasses.replace(job, status=JobState.COMPLETED, conclusion=status.conclusion)
            await self._store.run(
                store_jobs.checked,
                job.id,
                status=JobState.COMPLETED,
                conclusion=status.conclusion,
                completed_at=status.completed_at,
                now=self._clock.now(),
            )
        if job.conclusion != "failure":
            return await self._settle(job, "not failed", "not_failed")
        done = await self._store.run(reruns.reruns_of, job)
        if done >= allowed:
            return await self._settle(job, "limit", "limit")
        if not await self._store.run(reruns.claim, job.id, now=self._clock.now()):
            return True  # another replica has it
        try:
            await self._github.rerun_job(scope, job.repository, job.id)
        except GitHubError as exc:
            GITHUB_ERRORS.labels(type(exc).__name__).inc()
            if exc.status is None or exc.status >= 500 or exc.status in RETRY_LATER:
                await self._store.run(reruns.release, job.id)
                self._log_once.warning("jobs:rerun", f"cannot re-run lost job {job.id} yet: {exc}")
                return False
            return await self._settle(job, f"refused: {exc}", "refused")
        await self._store.run(reruns.decide, job.id, reruns.REQUESTED)
        JOBS_RERUN.labels(job.pool or "", "rerun").inc()
        logger.info(
            "job %d of %s lost with its server (%s): re-run (%d of at most %d)",
            job.id,
            job.repository,
            job.lost_reason,
            done + 1,
            allowed,
            extra={"job": job.id, "pool": job.pool},
        )
        return True

    async def _settle(self, job: Job, outcome: str, counted: str) -> bool:
        """A lost job that is not re-run, and why."""
        await self._store.run(reruns.decide, job.id, outcome)
        JOBS_RERUN.labels(job.pool or "", counted).inc()
        logger.info("job %d lost with its server (%s): not re-run: %s", job.id, job.lost_reason, outcome)
        return True
