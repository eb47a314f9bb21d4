"""The fault switchboard: what a test that switches faults on can rely on."""

from __future__ import annotations

import pytest

from corral_sandbox.faults import Faults, FaultSpecError


def test_endpoint_fault_matches_by_pattern_and_expires_after_count() -> None:
    faults = Faults()
    faults.configure(
        {"endpoints": [{"match": "openstack POST /compute/*", "error_rate": 1.0, "status": 503, "count": 2}]}
    )
    assert faults.decide("openstack", "GET", "/compute/v2.1/servers").error_status is None
    assert faults.decide("github", "POST", "/compute/v2.1/servers").error_status is None
    statuses = [faults.decide("openstack", "POST", "/compute/v2.1/servers").error_status for _ in range(3)]
    assert statuses == [503, 503, None]
    assert faults.describe()["endpoints"] == []


def test_same_seed_gives_the_same_fault_sequence() -> None:
    spec = {"seed": 7, "endpoints": [{"match": "github *", "error_rate": 0.5}]}
    runs = []
    for _ in range(2):
        faults = Faults()
        faults.configure(spec)
        runs.append([faults.decide("github", "GET", "/x").error_status for _ in range(50)])
    assert runs[0] == runs[1]
    assert 5 < runs[0].count(500) < 45


def test_latency_is_the_largest_of_matching_rules() -> None:
    faults = Faults()
    faults.configure(
        {"endpoints": [{"match": "openstack *", "latency_ms": 20}, {"match": "* GET *", "latency_ms": 50}]}
    )
    assert faults.decide("openstack", "GET", "/image/v2/images").latency_s == pytest.approx(0.05)
    assert faults.decide("openstack", "POST", "/x").latency_s == pytest.approx(0.02)


@pytest.mark.parametrize(
    ("spec", "names"),
    [
        ({"endpoints": [{"match": "x", "error_rate": 2}]}, "error_rate"),
        ({"endpoints": [{"match": "x", "status": 200}]}, "status"),
        ({"endpoints": [{"error_rate": 1}]}, "match"),
        ({"world": {"boot_failure_rate": -0.1}}, "boot_failure_rate"),
        ({"world": {"boot_failures": 1}}, "boot_failures"),
        ({"world": {"runner_choice": "random"}}, "runner_choice"),
        ({"wrld": {}}, "wrld"),
    ],
)
def test_invalid_spec_is_refused_by_name_and_changes_nothing(spec: dict[str, object], names: str) -> None:
    faults = Faults()
    faults.configure({"world": {"boot_failure_rate": 0.25}})
    with pytest.raises(FaultSpecError, match=names):
        faults.configure(spec)
    assert faults.world.boot_failure_rate == 0.25
