"""Retry waits and log de-duplication (`engine.backoff`), on a clock the test moves."""

from __future__ import annotations

import logging

import pytest

from corral.engine.backoff import Backoff, LogOnce


class Clock:
    """Seconds that pass only when the test says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("failures", "wait"),
    [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 16.0), (6, 32.0), (7, 60.0), (8, 60.0), (20, 60.0)],
)
def test_each_failure_after_the_last_wait_ended_doubles_the_wait_up_to_the_cap(failures: int, wait: float) -> None:
    clock = Clock()
    backoff = Backoff(base_s=1.0, cap_s=60.0, clock=clock)
    waits = []
    for _ in range(failures):
        waits.append(backoff.failed())
        clock.now = backoff.until  # the next attempt is made when the wait is over
    assert waits[-1] == wait
    assert backoff.failures == failures


def test_eight_parallel_creates_failing_together_are_one_failure_of_the_cloud() -> None:
    clock = Clock()
    backoff = Backoff(base_s=5.0, cap_s=300.0, clock=clock)
    assert backoff.failed() == 5.0
    clock.now = 1.0
    assert [backoff.failed() for _ in range(7)] == [4.0] * 7
    assert backoff.failures == 1
    clock.now = 5.0
    assert backoff.failed() == 10.0


def test_a_failure_that_names_a_longer_wait_extends_the_current_one() -> None:
    clock = Clock()
    backoff = Backoff(clock=clock)
    assert backoff.failed() == 1.0
    clock.now = 0.5
    assert backoff.failed(at_least_s=600.0) == 600.0
    assert backoff.remaining_s == 600.0
    assert backoff.failures == 1


def test_a_named_wait_longer_than_the_doubling_wins_at_the_first_failure() -> None:
    backoff = Backoff(base_s=1.0, cap_s=60.0, clock=Clock())
    assert backoff.failed(at_least_s=600.0) == 600.0


def test_one_success_resets_the_doubling_and_ends_the_wait() -> None:
    clock = Clock()
    backoff = Backoff(clock=clock)
    for _ in range(4):
        backoff.failed()
        clock.now = backoff.until
    clock.now -= 3.0
    assert (backoff.waiting, backoff.remaining_s) == (True, 3.0)
    backoff.succeeded()
    assert (backoff.waiting, backoff.remaining_s, backoff.failures) == (False, 0.0, 0)
    assert backoff.failed() == 1.0


@pytest.mark.parametrize(("elapsed", "waiting", "remaining"), [(0.0, True, 4.0), (3.5, True, 0.5), (4.0, False, 0.0)])
def test_the_wait_ends_exactly_when_its_seconds_have_passed(elapsed: float, waiting: bool, remaining: float) -> None:
    clock = Clock()
    backoff = Backoff(base_s=4.0, clock=clock)
    backoff.failed()
    clock.now = elapsed
    assert (backoff.waiting, backoff.remaining_s) == (waiting, remaining)


def log_once(clock: Clock) -> LogOnce:
    return LogOnce(logging.getLogger("tests.unit.backoff"), interval_s=60.0, clock=clock)


def logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    lines = [record.getMessage() for record in caplog.records if record.name == "tests.unit.backoff"]
    caplog.clear()
    return lines


def test_a_repeating_warning_is_logged_once_a_minute_with_how_many_were_held_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    logs = log_once(clock)
    seen = []
    for at in (0.0, 10.0, 30.0, 59.9, 60.0, 61.0, 120.0):
        clock.now = at
        logs.warning("east", "the cloud refused")
        seen.append((at, logged(caplog)))
    assert seen == [
        (0.0, ["the cloud refused"]),
        (10.0, []),
        (30.0, []),
        (59.9, []),
        (60.0, ["the cloud refused (repeated 3 more times)"]),
        (61.0, []),
        (120.0, ["the cloud refused (repeated 1 more times)"]),
    ]


def test_a_different_message_under_the_same_key_is_logged_at_once_without_a_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    logs = log_once(clock)
    logs.warning("east", "the cloud refused")
    logs.warning("east", "the cloud refused")
    clock.now = 1.0
    logs.warning("east", "the cloud timed out")
    logs.warning("west", "the cloud refused")
    assert logged(caplog) == ["the cloud refused", "the cloud timed out", "the cloud refused"]


def test_clearing_a_key_logs_its_next_warning_at_once(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    logs = log_once(clock)
    logs.warning("east", "the cloud refused")
    logs.clear("east")
    clock.now = 1.0
    logs.warning("east", "the cloud refused")
    logs.clear("never-logged")
    assert logged(caplog) == ["the cloud refused", "the cloud refused"]
