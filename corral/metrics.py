"""Prometheus metrics, defined once; every module records through these names."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)

RUNNERS = Gauge("corral_runners", "Runners by pool and state", ["pool", "state"], registry=REGISTRY)
RUNNER_TRANSITIONS = Counter(
    "corral_runner_transitions_total", "Runner state transitions", ["pool", "state"], registry=REGISTRY
)
CLOUD_CALLS = Counter(
    "corral_cloud_calls_total", "Cloud calls by operation and outcome", ["operation", "outcome"], registry=REGISTRY
)
CLOUD_CALL_SECONDS = Histogram("corral_cloud_call_seconds", "Cloud call duration", ["operation"], registry=REGISTRY)
GITHUB_ERRORS = Counter("corral_github_errors_total", "GitHub call failures by kind", ["kind"], registry=REGISTRY)
RECONCILE_SECONDS = Histogram("corral_reconcile_pass_seconds", "Duration of a full reconcile pass", registry=REGISTRY)
CREATE_FAILURES = Counter(
    "corral_runner_create_failures_total",
    "Runner creations that failed, by pool and reason",
    ["pool", "reason"],
    registry=REGISTRY,
)
WEBHOOKS = Counter("corral_webhooks_total", "Webhook deliveries by outcome", ["outcome"], registry=REGISTRY)
JOBS_RECOVERED = Counter(
    "corral_jobs_recovered_total", "Jobs found without their webhook, by how", ["how"], registry=REGISTRY
)
