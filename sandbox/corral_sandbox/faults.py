"""Faults that tests, the demo and benchmarks switch on at run time through `/_sandbox/faults`.

Two kinds: endpoint faults (errors and latency on matching HTTP routes of either side) and world faults
(what happens inside the simulated cloud and GitHub: boots that fail, runners that never register,
webhook deliveries that are lost, secondary rate limits, scale-set acknowledgements that are lost and runners
that never pick up the job they were assigned, servers that die mid-job). Decisions draw from one seeded RNG so a test
that sets a seed sees the same sequence every run.
"""

from __future__ import annotations

import fnmatch
import random
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

RunnerChoice = Literal["oldest", "newest"]
RUNNER_CHOICES: tuple[RunnerChoice, ...] = ("oldest", "newest")


class FaultSpecError(ValueError):
    """A fault specification posted to the control API is malformed; the message names the field."""


@dataclass
class EndpointFault:
    """Errors and latency for requests whose endpoint key matches `match`.

    The endpoint key is `"<side> <METHOD> <route template>"`, for example
    `"openstack POST /compute/v2.1/servers"` or `"github GET /orgs/{org}/actions/runners"`; `match` is an
    fnmatch pattern over it (`"openstack *"` hits every cloud call). `count`, when set, limits the fault
    to that many more matching requests; it is removed once spent.
    """

    match: str
    error_rate: float = 0.0
    status: int = 500
    latency_ms: float = 0.0
    count: int | None = None
    garble_rate: float = 0.0
    """Share of matching requests that are carried out but answered with `{}` in place of the body the API
    promises (a broken proxy, a mismatched API version): the client's parser, not its error handling, meets it."""

    def validate(self) -> None:
        if not self.match:
            raise FaultSpecError("endpoint fault: 'match' is required, e.g. 'openstack POST /compute/*'")
        if not 0.0 <= self.error_rate <= 1.0:
            raise FaultSpecError("endpoint fault: 'error_rate' must be between 0 and 1")
        if not 0.0 <= self.garble_rate <= 1.0:
            raise FaultSpecError("endpoint fault: 'garble_rate' must be between 0 and 1")
        if not 400 <= self.status <= 599:
            raise FaultSpecError("endpoint fault: 'status' must be an HTTP error status (400-599)")
        if self.latency_ms < 0:
            raise FaultSpecError("endpoint fault: 'latency_ms' must not be negative")
        if self.count is not None and self.count < 1:
            raise FaultSpecError("endpoint fault: 'count' must be at least 1 when given")


@dataclass
class WorldFaults:
    """Behaviour of the simulated world rather than of one HTTP route."""

    boot_failure_rate: float = 0.0
    """Share of servers that go to ERROR (with a fault) instead of ACTIVE."""
    failing_images: list[str] = field(default_factory=list)
    """Image ids whose servers all go to ERROR instead of ACTIVE: a broken upload."""
    never_register_rate: float = 0.0
    """Share of servers that boot with a valid JIT config but whose runner never comes online."""
    lost_mid_job_rate: float = 0.0
    """Share of jobs whose runner's server dies halfway through the job (its host failed: the server goes to
    ERROR with a fault); GitHub fails the job `lost_contact_delay` later (`Timings`)."""
    stuck_attachment_rate: float = 0.0
    """Share of server deletes after which a volume mapped to be kept (`delete_on_termination: false`) stays
    `in-use`, attached to the gone server, as when Nova's detach call to Cinder fails: `os-detach` frees it."""
    webhook_drop_rate: float = 0.0
    """Share of webhook deliveries that fail; they show in the delivery log and can be redelivered."""
    webhook_lose_rate: float = 0.0
    """Share of webhook events never attempted at all (no log entry): only polling finds those jobs."""
    secondary_rate_limit_rate: float = 0.0
    """Share of GitHub REST calls answered with a secondary rate limit (403 with Retry-After)."""
    secondary_retry_after: int = 60
    scaleset_ack_drop_rate: float = 0.0
    """Share of scale-set message acknowledgements (`DELETE {messageQueueUrl}/{id}`) answered 204 but not
    carried out: the message is delivered again, same id."""
    scaleset_pickup_stall_rate: float = 0.0
    """Share of jobs GitHub hands to a scale set's idle runner that the runner never picks up (it hangs):
    after `reassign_after_s` the attempt is canceled and the job requeued, three times at most."""
    runner_choice: RunnerChoice = "oldest"
    """Which idle classic runner that fits a newly queued job takes it: the one idle longest ("oldest"), or
    the one that came online last ("newest"). GitHub promises no order; the sandbox's choice, to be switched
    so that a test cannot lean on either."""

    def validate(self) -> None:
        for name in (
            "boot_failure_rate",
            "never_register_rate",
            "lost_mid_job_rate",
            "stuck_attachment_rate",
            "webhook_drop_rate",
            "webhook_lose_rate",
            "secondary_rate_limit_rate",
            "scaleset_ack_drop_rate",
            "scaleset_pickup_stall_rate",
        ):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise FaultSpecError(f"world fault: '{name}' must be between 0 and 1, got {value!r}")
        if not isinstance(self.failing_images, list) or not all(isinstance(i, str) for i in self.failing_images):
            raise FaultSpecError("world fault: 'failing_images' must be a list of image ids")
        if self.runner_choice not in RUNNER_CHOICES:
            raise FaultSpecError(
                f"world fault: 'runner_choice' must be one of {', '.join(RUNNER_CHOICES)}, got {self.runner_choice!r}"
            )
        if self.secondary_retry_after < 0:
            raise FaultSpecError("world fault: 'secondary_retry_after' must not be negative")


@dataclass
class EndpointDecision:
    latency_s: float = 0.0
    error_status: int | None = None
    garble: bool = False


@dataclass
class Faults:
    """The fault switchboard of one world."""

    seed: int = 0
    endpoints: list[EndpointFault] = field(default_factory=list)
    world: WorldFaults = field(default_factory=WorldFaults)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def chance(self, rate: float) -> bool:
        """True with probability `rate`; never draws for 0 or 1 so those stay exact."""
        if rate <= 0.0:
            return False
        if rate >= 1.0:
            return True
        return self.rng.random() < rate

    def decide(self, side: str, method: str, route: str) -> EndpointDecision:
        key = f"{side} {method} {route}"
        decision = EndpointDecision()
        for fault in list(self.endpoints):
            if not fnmatch.fnmatchcase(key, fault.match):
                continue
            decision.latency_s = max(decision.latency_s, fault.latency_ms / 1000.0)
            if decision.error_status is None and self.chance(fault.error_rate):
                decision.error_status = fault.status
            if not decision.garble and self.chance(fault.garble_rate):
                decision.garble = True
            if fault.count is not None:
                fault.count -= 1
                if fault.count <= 0:
                    self.endpoints.remove(fault)
        return decision

    def configure(self, spec: dict[str, Any]) -> None:
        """Replace the fault configuration from a JSON document; invalid input changes nothing."""
        unknown = set(spec) - {"seed", "endpoints", "world"}
        if unknown:
            raise FaultSpecError(f"unknown fault keys {sorted(unknown)}; use 'seed', 'endpoints', 'world'")
        try:
            endpoints = [EndpointFault(**item) for item in spec.get("endpoints", [])]
            world = WorldFaults(**spec.get("world", {}))
        except TypeError as exc:
            raise FaultSpecError(f"malformed fault specification: {exc}") from exc
        for endpoint in endpoints:
            endpoint.validate()
        world.validate()
        self.endpoints = endpoints
        self.world = world
        if "seed" in spec:
            self.seed = int(spec["seed"])
            self.rng = random.Random(self.seed)

    def describe(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "endpoints": [asdict(fault) for fault in self.endpoints],
            "world": asdict(self.world),
        }
