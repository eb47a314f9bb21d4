"""Prometheus metrics, defined once; every module records through these names."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import fields

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from corral.cloud.quota import Headroom

REGISTRY = CollectorRegistry(auto_describe=True)

RUNNERS = Gauge("corral_runners", "Runners by pool and state", ["pool", "state"], registry=REGISTRY)
RUNNER_TRANSITIONS = Counter(
    "corral_runner_transitions_total",
    "Runner state transitions, by pool, the state entered and why (a corral.model.Reason)",
    ["pool", "state", "reason"],
    registry=REGISTRY,
)
CLOUD_CALLS = Counter(
    "corral_cloud_calls_total", "Cloud calls by operation and outcome", ["operation", "outcome"], registry=REGISTRY
)
SERVER_LISTINGS = Counter(
    "corral_cloud_server_listings_total",
    "Server listings by kind: full (every server), or changes (Nova's changes-since: only those that changed)",
    ["kind"],
    registry=REGISTRY,
)
SERVERS_LISTED = Counter(
    "corral_cloud_servers_listed_total",
    "Servers the listings returned, by kind of listing: what a look cost Nova and corral",
    ["kind"],
    registry=REGISTRY,
)
CLOUD_CALL_SECONDS = Histogram("corral_cloud_call_seconds", "Cloud call duration", ["operation"], registry=REGISTRY)
GITHUB_ERRORS = Counter("corral_github_errors_total", "GitHub call failures by kind", ["kind"], registry=REGISTRY)
RECONCILE_SECONDS = Histogram(
    "corral_reconcile_pass_seconds", "Duration of one pool's reconcile pass", ["pool"], registry=REGISTRY
)
RUNNERS_JUDGED = Counter(
    "corral_runners_judged_total",
    "Runners a pass ran the state rules on, by pool: an idle or busy runner whose row, server and registration"
    " did not change since it was last judged to stay is not judged again",
    ["pool"],
    registry=REGISTRY,
)
OBSERVE_SECONDS = Histogram(
    "corral_observe_seconds",
    "Duration of one look at both far ends (every pool's servers and runners)",
    registry=REGISTRY,
)
RUNNER_FAILURES = Counter(
    "corral_runner_failures_total",
    "Runners that failed (creation refused, server in ERROR, bootstrap timeout...), by pool and reason",
    ["pool", "reason"],
    registry=REGISTRY,
)
ACTION_ERRORS = Counter(
    "corral_action_errors_total",
    "Exceptions corral did not expect in an action beside the passes (a bug: see the log), by kind",
    ["kind"],
    registry=REGISTRY,
)
WORKER_ERRORS = Counter(
    "corral_reconcile_errors_total",
    "Exceptions corral did not expect in a pool's reconcile pass (a bug: see the log), by pool",
    ["pool"],
    registry=REGISTRY,
)
CAPACITY_REFUSALS = Counter(
    "corral_capacity_refusals_total",
    "Runner intents the database refused because their pool was already at max_runners (another writer "
    "filled it first: with one replica, never), by pool",
    ["pool"],
    registry=REGISTRY,
)
LEASE_ACQUISITIONS = Counter(
    "corral_lease_acquisitions_total", "Pool leases this replica acquired, by pool", ["pool"], registry=REGISTRY
)
QUOTA_HEADROOM = Gauge(
    "corral_quota_headroom",
    "What the project may still create in each cloud, per resource (instances, cores, ram_mb, volumes, "
    "gigabytes, ports), as of the last look; a resource without a limit, or limits that could not be read, has "
    "no sample",
    ["cloud", "resource"],
    registry=REGISTRY,
)


IMAGE_PROMOTIONS = Counter(
    "corral_image_promotions_total",
    "Canary images a pool promoted, as enough jobs succeeded on them (rollout.canary_jobs)",
    ["pool"],
    registry=REGISTRY,
)
IMAGE_ROLLBACKS = Counter(
    "corral_image_rollbacks_total",
    "Rollouts of a new image a pool rolled back, as too many of its runners failed to come online",
    ["pool"],
    registry=REGISTRY,
)
QUOTA_DEFERRALS = Counter(
    "corral_quota_deferrals_total",
    "Runners a pool wanted but did not start, because the project's quota headroom had no room for them",
    ["pool"],
    registry=REGISTRY,
)


_HEADROOM_CLOUDS: set[str] = set()
"""The clouds the headroom gauge has samples of."""


def publish_headroom(headrooms: Mapping[str, Headroom | None]) -> None:
    """Set the headroom gauge to the last reading of each cloud: unlimited resources (or an unread quota) have
    no sample, nor have clouds no longer read (removed from the configuration)."""
    for cloud in _HEADROOM_CLOUDS - set(headrooms):
        for field in fields(Headroom):
            with contextlib.suppress(KeyError):
                QUOTA_HEADROOM.remove(cloud, field.name)
    _HEADROOM_CLOUDS.clear()
    _HEADROOM_CLOUDS.update(headrooms)
    for cloud, headroom in headrooms.items():
        limited = headroom.limited() if headroom is not None else {}
        for field in fields(Headroom):
            if field.name in limited:
                QUOTA_HEADROOM.labels(cloud, field.name).set(limited[field.name])
            else:
                with contextlib.suppress(KeyError):
                    QUOTA_HEADROOM.remove(cloud, field.name)


ORPHANS_DELETED = Counter(
    "corral_orphans_deleted_total",
    "What the join of the cloud's servers and GitHub's registrations with corral's runners found and deleted: "
    "`server` (no live runner owns it) or `registration` (its runner was already deleted)",
    ["kind"],
    registry=REGISTRY,
)
SCALE_SET_POLLS = Counter(
    "corral_scale_set_polls_total",
    "Long polls of scale-set message queues, by outcome: `message` or `empty` (the poll window ended)",
    ["outcome"],
    registry=REGISTRY,
)
SCALE_SET_MESSAGES = Counter(
    "corral_scale_set_messages_total",
    "Job messages from scale-set queues, by type (JobAvailable, JobAssigned, JobStarted, JobCompleted, other)",
    ["kind"],
    registry=REGISTRY,
)
SCALE_SET_RECOVERIES = Counter(
    "corral_scale_set_recoveries_total",
    "What scale-set listeners recovered from, by kind: session_conflict (waited out), session_taken_over, "
    "session_evicted, queue_token_refreshed, scale_set_gone (created again), error (backed off)",
    ["kind"],
    registry=REGISTRY,
)
SCALE_SET_LISTENER_RESTARTS = Counter(
    "corral_scale_set_listener_restarts_total",
    "Scale-set listeners started again after an error they have no recovery for (a database error, an "
    "unforeseen answer), by pool",
    ["pool"],
    registry=REGISTRY,
)
LEASE_LOSSES = Counter(
    "corral_lease_losses_total",
    "Pool leases this replica lost because it did not renew them in time (paused, partitioned, overloaded)",
    ["pool"],
    registry=REGISTRY,
)
LEASE_FAILOVER_SECONDS = Histogram(
    "corral_lease_failover_seconds",
    "From a lease's expiry (its holder stopped renewing) to another replica acquiring it",
    buckets=(0.5, 1, 2, 5, 10, 15, 20, 30, 60, 120),
    registry=REGISTRY,
)
WARM_WANTED = Gauge(
    "corral_pool_auto_warm",
    "Pools with `min_idle: {auto: ...}`: the warm runners the last forecast wanted (`wanted`), the boot time it "
    "took in seconds (`boot_seconds`), the jobs a minute of the last 15 minutes (`rate_per_minute`), and the "
    "need of the last 15 minutes and the day plan's number (`recent_need`, `usual_need`)",
    ["pool", "figure"],
    registry=REGISTRY,
)
POOLS_HELD = Gauge("corral_pools_held", "Pools (and the housekeeping lease) this replica holds", registry=REGISTRY)
DATABASE_ERRORS = Counter(
    "corral_database_errors_total", "Database calls that failed, by kind", ["kind"], registry=REGISTRY
)
DEPENDENCY_UP = Gauge(
    "corral_dependency_up",
    "Whether a dependency (database, ...) answered its last call: 1 yes, 0 in an outage (corral.outages)",
    ["dependency"],
    registry=REGISTRY,
)
DEPENDENCY_OUTAGES = Counter(
    "corral_dependency_outages_total",
    "Outages of a dependency begun (each logged once)",
    ["dependency"],
    registry=REGISTRY,
)
WEBHOOKS = Counter("corral_webhooks_total", "Webhook deliveries by outcome", ["outcome"], registry=REGISTRY)
JOBS_RECOVERED = Counter(
    "corral_jobs_recovered_total", "Jobs found without their webhook, by how", ["how"], registry=REGISTRY
)
JOBS_RERUN = Counter(
    "corral_jobs_rerun_total",
    "Jobs lost with their runner's server, by pool and what became of them (rerun, not_failed, off, limit, refused)",
    ["pool", "outcome"],
    registry=REGISTRY,
)
CACHE_VOLUMES = Gauge(
    "corral_cache_volumes",
    "The pools' cache volumes by state (creating, held, free, deleting), as of the cache keeper's last round",
    ["pool", "state"],
    registry=REGISTRY,
)
CACHE_STARTS = Counter(
    "corral_cache_starts_total",
    "Runners of pools with cache_volumes by how they started: warm (a used volume), cold (a new one) or none",
    ["pool", "start"],
    registry=REGISTRY,
)
GITHUB_CALLS = Counter(
    "corral_github_calls_total", "GitHub API calls by endpoint and status", ["endpoint", "status"], registry=REGISTRY
)
GITHUB_CALL_SECONDS = Histogram("corral_github_call_seconds", "GitHub call duration", ["endpoint"], registry=REGISTRY)
GITHUB_RATE_LIMIT_REMAINING = Gauge(
    "corral_github_rate_limit_remaining", "GitHub's X-RateLimit-Remaining, last seen", ["resource"], registry=REGISTRY
)
JOBS = Gauge("corral_jobs", "Jobs known to corral by status (as of the last pass)", ["status"], registry=REGISTRY)
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
QUEUED_TO_CREATE_SECONDS = Histogram(
    "corral_queued_to_create_seconds",
    "From a job's arrival (webhook or poll) to the create request of a runner started for it",
    ["pool"],
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
QUEUED_TO_RUNNING_SECONDS = Histogram(
    "corral_queued_to_running_seconds",
    "From a job being queued to it starting on a runner (GitHub's timestamps)",
    ["pool"],
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
RUNNER_SECONDS = Counter(
    "corral_runner_seconds_total",
    "Runner-seconds by pool and phase (boot, idle, busy), counted as each runner leaves the phase: the "
    "same accounting as GET /api/v1/usage (corral.usage), for rates and dashboards",
    ["pool", "phase"],
    registry=REGISTRY,
)
RUNNER_BOOT_SECONDS = Histogram(
    "corral_runner_boot_seconds",
    "From a runner's create request to its registration coming online",
    ["pool"],
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
