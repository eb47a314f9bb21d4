"""Keeping the job table true when webhooks are late, lost or stale.

Three duties, all run periodically beside the passes and never from the webhook path:
- ask GitHub (one GET each) about old queued jobs, so jobs cancelled or taken by another runner stop
  counting as demand, and about running jobs whose runner is gone, so a lost `completed` webhook does not
  leave a job running for ever;
- find jobs whose webhook never arrived: with a GitHub App, ask GitHub to redeliver its failed
  deliveries; with a token, list the queued runs of the repositories corral knows about;
- re-run the jobs lost with their runner's server (`rerun_lost_jobs`), once GitHub has failed them
  (`engine.reruns`).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta

from corral.clock import SYSTEM_CLOCK, ClockLike, as_clock
from corral.config import CorralConfig, ScopeConfig
from corral.engine.backoff import LogOnce
from corral.engine.reruns import LostJobs
from corral.engine.supervisor import ActionKind
from corral.github.client import GitHubClient, GitHubError
from corral.metrics import ACTION_ERRORS, GITHUB_ERRORS, JOBS_RECOVERED
from corral.model import Delivery, Job, JobState, JobUpdate
from corral.outages import log_unexpected
from corral.policy import match_pool
from corral.store import Store, redeliveries
from corral.store import jobs as store_jobs

logger = logging.getLogger("corral.jobs")

CONCURRENT_CHECKS = 8
REDELIVERY_OVERLAP = timedelta(minutes=5)
MAX_REDELIVERIES = 5
REDELIVERY_WINDOW = timedelta(hours=1)
GITHUB_JOB_STATES = {"completed": JobState.COMPLETED, "in_progress": JobState.IN_PROGRESS}


class JobTracker:
    def __init__(self, store: Store, github: GitHubClient, log_once: LogOnce, clock: ClockLike = SYSTEM_CLOCK) -> None:
        self.store = store
        self.github = github
        self.log_once = log_once
        self.clock = as_clock(clock)
        self._next_scan = 0.0
        self._last_delivery_scan: datetime | None = None
        self.lost = LostJobs(store, github, log_once, self.clock, self.scope_for)
        """The third duty: re-running the jobs lost with their runner's server."""

    def scope_for(self, config: CorralConfig, pool: str | None, repository: str) -> ScopeConfig:
        """Whose credentials to ask about a repository's job: its pool's scope, else the repository."""
        if pool is not None and pool in config.pools:
            return config.pools[pool].scope
        return ScopeConfig(repo=repository)

    async def upkeep(self, config: CorralConfig) -> set[str]:
        """The three duties; returns the pools whose demand changed, to be scaled again."""
        changed = await self.verify_stale(config) | await self.recover_missed(config)
        await self.lost.decide(config)
        return changed

    async def verify_stale(self, config: CorralConfig) -> set[str]:
        """Ask GitHub about old queued jobs, and about running jobs whose runner is gone; returns the pools
        whose demand changed (or was confirmed)."""
        now = self.clock.now()
        # A confirmation is good for as long as a fresh job goes unconfirmed.
        stale = timedelta(seconds=config.stale_job_check)
        jobs = await self.store.run(
            store_jobs.stale_queued,
            queued_before=now - stale,
            checked_before=now - stale,
            presumed_before=now - timedelta(seconds=config.tuning.confirm_after),
            limit=config.tuning.stale_checks_per_pass,
        )
        jobs += await self.store.run(
            store_jobs.unfinished_without_runner,
            started_before=now - stale,
            checked_before=now - stale,
            limit=config.tuning.stale_checks_per_pass - len(jobs),
        )
        slots = asyncio.Semaphore(CONCURRENT_CHECKS)

        async def verify(job: Job) -> str | None:
            try:
                return await ask(job)
            except Exception:
                # One job's unexpected answer (a body githubkit cannot parse) must not stop the others.
                log_unexpected(
                    logger,
                    "asking GitHub about job %d failed unexpectedly; asking again later",
                    job.id,
                    counted=ACTION_ERRORS.labels(ActionKind.JOB_UPKEEP.value),
                )
                return None

        async def ask(job: Job) -> str | None:
            async with slots:
                try:
                    scope = self.scope_for(config, job.pool, job.repository)
                    status = await self.github.get_job(scope, job.repository, job.id)
                except GitHubError as exc:
                    GITHUB_ERRORS.labels(type(exc).__name__).inc()
                    self.log_once.warning("jobs:verify", f"cannot ask GitHub about job {job.id}: {exc}")
                    if exc.status == 404:
                        await self.store.run(
                            store_jobs.checked,
                            job.id,
                            status=JobState.COMPLETED,
                            conclusion="not_found",
                            now=self.clock.now(),
                        )
                    return None
            state = GITHUB_JOB_STATES.get(status.status, JobState.QUEUED)
            await self.store.run(
                store_jobs.checked,
                job.id,
                status=state,
                conclusion=status.conclusion,
                runner_name=status.runner_name,
                completed_at=status.completed_at,
                now=self.clock.now(),
            )
            if state is job.status:
                # A queued job just confirmed counts as demand again: its pool should look.
                return job.pool if state is JobState.QUEUED else None
            logger.info("job %d is %s on GitHub (corral had it %s)", job.id, status.status, job.status)
            return job.pool

        return {pool for pool in await asyncio.gather(*(verify(job) for job in jobs)) if pool}

    async def recover_missed(self, config: CorralConfig) -> set[str]:
        """Once per `missed_job_scan`: with an App, ask GitHub to redeliver failed deliveries; with an App or a
        token, list the queued runs of the repositories corral serves. Both, because GitHub may also never
        attempt a delivery at all (an outage on its side, a hook briefly misconfigured): such a job leaves no
        failed delivery to redeliver, and only a look at the queued runs finds it."""
        if self.clock.monotonic() < self._next_scan:
            return set()
        self._next_scan = self.clock.monotonic() + config.missed_job_scan
        if config.github.uses_app:
            await self._redeliver_failed()
        return await self._poll_queued(config)

    async def _redeliver_failed(self) -> None:
        # Look back an hour the first time, then only a little before the previous scan.
        now = self.clock.now()
        since = now - REDELIVERY_WINDOW
        if self._last_delivery_scan is not None:
            since = max(since, self._last_delivery_scan - REDELIVERY_OVERLAP)
        try:
            failed = await self.github.failed_deliveries(since)
        except GitHubError as exc:
            GITHUB_ERRORS.labels(type(exc).__name__).inc()
            self.log_once.warning("jobs:deliveries", f"cannot list webhook deliveries: {exc}")
            return
        self._last_delivery_scan = now
        failed = [delivery for delivery in failed if delivery.event == "workflow_job"]
        asked_before = await self.store.run(redeliveries.attempts, [delivery.guid for delivery in failed])
        for delivery in failed:
            if asked_before.get(delivery.guid, 0) >= MAX_REDELIVERIES:
                continue
            try:
                await self.github.redeliver(delivery.id)
            except GitHubError as exc:
                self.log_once.warning("jobs:redeliver", f"cannot redeliver {delivery.guid}: {exc}")
                continue
            # A redelivery can fail too; the next scan sees the guid still unsuccessful and asks again, up to
            # MAX_REDELIVERIES times, counted in the database so a replica taking over counts on.
            await self.store.run(redeliveries.asked, delivery.guid, now=self.clock.now())
            JOBS_RECOVERED.labels("redelivery").inc()
            logger.info("asked GitHub to redeliver failed webhook %s", delivery.guid)

    async def _poll_queued(self, config: CorralConfig) -> set[str]:
        repositories = {pool.scope.repo: pool.scope for pool in config.pools.values() if pool.scope.repo}
        recent = await self.store.run(store_jobs.recent_repositories, since=self.clock.now() - timedelta(days=1))
        for repository in recent:
            repositories.setdefault(repository, self.scope_for(config, None, repository))
        changed: set[str] = set()
        for repository, scope in sorted(repositories.items()):
            if repository is None:
                continue
            try:
                created_before = self.clock.now() - timedelta(seconds=config.missed_job_scan)
                queued = await self.github.queued_jobs(scope, repository, created_before=created_before)
            except GitHubError as exc:
                self.log_once.warning(f"jobs:poll:{repository}", f"cannot list queued jobs of {repository}: {exc}")
                continue
            known = await self.store.run(store_jobs.known_ids, [job.id for job in queued])
            found = [job for job in queued if job.id not in known]
            deliveries = [
                Delivery(
                    id=None,
                    event="poll",
                    action="queued",
                    job=JobUpdate(
                        id=job.id,
                        repository=repository,
                        labels=tuple(job.labels),
                        status=JobState.QUEUED,
                        pool=match_pool(job.labels, repository, config.pools, config.default_pool),
                        run_id=job.run_id,
                        queued_at=job.created_at,
                        workflow=job.workflow,
                    ),
                )
                for job in found
            ]
            if deliveries:
                await self.store.run(store_jobs.record, deliveries, now=self.clock.now())
            for delivery in deliveries:
                assert delivery.job is not None
                JOBS_RECOVERED.labels("poll").inc()
                logger.info("found queued job %d of %s by polling (webhook missed)", delivery.job.id, repository)
                if delivery.job.pool:
                    changed.add(delivery.job.pool)
        return changed
