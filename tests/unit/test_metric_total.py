"""`bench.support.metric_total`: what the benchmarks read from corral's `/metrics` page."""

from __future__ import annotations

from bench.support import metric_total

PAGE = """\
# HELP corral_reconcile_pass_seconds Duration of one pool's reconcile pass
# TYPE corral_reconcile_pass_seconds histogram
corral_reconcile_pass_seconds_bucket{le="+Inf",pool="small"} 3.0
corral_reconcile_pass_seconds_count{pool="small"} 3.0
corral_reconcile_pass_seconds_sum{pool="small"} 0.25
corral_reconcile_pass_seconds_bucket{le="+Inf",pool="large"} 4.0
corral_reconcile_pass_seconds_count{pool="large"} 4.0
corral_reconcile_pass_seconds_sum{pool="large"} 0.5
"""


def test_a_sample_is_summed_over_every_pool_and_a_missing_one_is_zero() -> None:
    assert metric_total(PAGE, "corral_reconcile_pass_seconds_count") == 7.0
    assert metric_total(PAGE, "corral_reconcile_pass_seconds_sum") == 0.75
    assert metric_total(PAGE, "corral_lease_failover_seconds_count") == 0.0
