"""`min_idle` that follows the clock: windows opened by cron expressions in a time zone, the value in force
and its next change, and a corral whose warm runners follow the windows as its clock moves."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from corral.config import ConfigError, parse_config
from corral.schedules import InForce, Window, in_force
from corral_sandbox.local import LocalCorral, pool_spec
from corral_sandbox.server import Sandbox
from tests.conftest import StartCorral
from tests.test_lifecycle import converge, online_per_pool, pools_view

WORKDAY = [Window("0 8 * * 1-5", timedelta(hours=10), 20)]


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        # Wednesday 2 December 2026; Berlin is UTC+1 in winter
        (datetime(2026, 12, 2, 6, 30, tzinfo=UTC), InForce(0, datetime(2026, 12, 2, 7, tzinfo=UTC), 20)),
        (datetime(2026, 12, 2, 7, 0, tzinfo=UTC), InForce(20, datetime(2026, 12, 2, 17, tzinfo=UTC), 0)),
        (datetime(2026, 12, 2, 16, 59, tzinfo=UTC), InForce(20, datetime(2026, 12, 2, 17, tzinfo=UTC), 0)),
        # Friday evening: the next window is Monday's
        (datetime(2026, 12, 4, 19, 0, tzinfo=UTC), InForce(0, datetime(2026, 12, 7, 7, tzinfo=UTC), 20)),
        # after the clocks went forward, 8 o'clock in Berlin is 6 o'clock UTC
        (datetime(2027, 3, 29, 5, 0, tzinfo=UTC), InForce(0, datetime(2027, 3, 29, 6, tzinfo=UTC), 20)),
    ],
)
def test_a_workday_window_in_a_time_zone(now: datetime, expected: InForce) -> None:
    assert in_force(0, WORKDAY, "Europe/Berlin", now) == expected


def test_overlapping_windows_keep_the_largest_and_a_change_is_found_past_edges_that_change_nothing() -> None:
    windows = [Window("0 8 * * *", timedelta(hours=4), 5), Window("0 10 * * *", timedelta(hours=4), 5)]
    at_eleven = datetime(2026, 12, 2, 11, tzinfo=UTC)
    assert in_force(1, windows, "UTC", at_eleven) == InForce(5, datetime(2026, 12, 2, 14, tzinfo=UTC), 1)
    peak = [*windows, Window("30 10 * * *", timedelta(minutes=30), 9)]
    assert in_force(1, peak, "UTC", at_eleven - timedelta(minutes=20)).min_idle == 9
    always = [Window("0 0 * * *", timedelta(days=1), 3)]
    assert in_force(0, always, "UTC", at_eleven) == InForce(3), "open around the clock: no change ahead"


EIGHT_TO_NINE = {"cron": "0 8 * * *", "duration": "1h", "min_idle": 2}


def config_with(min_idle: Any, **pool: Any) -> dict[str, Any]:
    return {"github": {"token": "ghp_x"}, "pools": {"small": {**pool_spec(["small"]), "min_idle": min_idle, **pool}}}


@pytest.mark.parametrize(
    ("min_idle", "words"),
    [
        ({"schedules": [{"cron": "8 * *", "duration": "1h", "min_idle": 2}]}, "is not a cron expression of five"),
        (
            {"timezone": "Mars/Olympus", "schedules": [{"cron": "0 8 * * *", "duration": "1h", "min_idle": 2}]},
            "not a time zone",
        ),
        (
            {"schedules": [{"cron": "0 8 * * *", "duration": "1h", "min_idle": 50}]},
            "min_idle (50 at its peak) is larger",
        ),
        ({"schedules": []}, "schedules"),
        ({"default": -1, "schedules": [{"cron": "0 8 * * *", "duration": "1h", "min_idle": 2}]}, "default"),
    ],
)
def test_a_schedule_that_cannot_work_is_refused_naming_the_key(min_idle: Any, words: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config(config_with(min_idle))
    text = str(refused.value)
    assert ("pools.small.min_idle" in text or "pools.small: min_idle" in text) and words in text, text


def test_warm_runners_follow_the_windows_as_the_engine_s_clock_moves(
    sandbox: Sandbox, start_corral: StartCorral
) -> None:
    schedule = {"default": 0, "schedules": [{"cron": "0 8 * * *", "duration": "1h", "min_idle": 2}]}
    corral = start_corral({"small": pool_spec(["small"], min_idle=schedule)}, default_pool="small")
    scaler = corral.service.engine.scaler
    morning = datetime(2026, 12, 2, 7, 59, 30, tzinfo=UTC)
    scaler.clock = lambda: morning
    converge(corral, lambda: pools_view(corral)["small"]["min_idle"] == 0, "nothing warm before the window")
    view = pools_view(corral)["small"]
    assert (view["min_idle_next_change"], view["min_idle_next"]) == ("2026-12-02T08:00:00Z", 2)
    assert online_per_pool(sandbox) == {}

    scaler.clock = lambda: morning + timedelta(minutes=1)
    wake(corral)
    converge(corral, lambda: online_per_pool(sandbox) == {"small": 2}, "two warm runners in the window")
    assert pools_view(corral)["small"]["min_idle_next_change"] == "2026-12-02T09:00:00Z"

    scaler.clock = lambda: morning + timedelta(hours=1, minutes=1)
    wake(corral)
    converge(corral, lambda: online_per_pool(sandbox) == {}, "the warm runners retired once the window closed")
    assert pools_view(corral)["small"]["min_idle"] == 0


def wake(corral: LocalCorral) -> None:
    with corral.api() as api:
        api.post("/api/v1/reconcile").raise_for_status()


def test_an_auto_pool_with_no_history_keeps_min_and_says_it_is_learning(
    sandbox: Sandbox, start_corral: StartCorral
) -> None:
    auto = {"auto": {"target_wait": "30s", "min": 1, "max": 3}}
    corral = start_corral({"small": pool_spec(["small"], min_idle=auto)}, default_pool="small")
    converge(corral, lambda: online_per_pool(sandbox) == {"small": 1}, "one warm runner: auto's min")
    view = pools_view(corral)["small"]
    assert view["min_idle"] == 1
    assert view["min_idle_auto"]["wanted"] == 1 and view["min_idle_auto"]["boot_s"] is None
    assert view["min_idle_auto"]["reason"].startswith("learning: ")
    with corral.api() as api:
        metrics = api.get("/metrics").text
    assert 'corral_pool_auto_warm{figure="wanted",pool="small"} 1.0' in metrics
