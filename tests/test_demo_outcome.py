"""When `corral demo` counts as failed: its exit status makes it a smoke test, so every job submitted must
have been served and nothing left behind (a demo talking to the wrong cloud once served 0 of 20 and exited 0)."""

from __future__ import annotations

import pytest

from corral_sandbox.demo import Leaks, Outcome, failures


def outcome(*, submitted: int, served: int, leaks: Leaks | None = None, cancelled: int = 0) -> Outcome:
    return Outcome(
        elapsed_s=20.0,
        submitted=submitted,
        served=served,
        cancelled=cancelled,
        waits_by_pool={},
        runners_created=served,
        servers_created=served,
        boot_failures=0,
        leaks=leaks or Leaks(servers=0, volumes=0, ports=0, registrations=0),
        warnings=30,
    )


@pytest.mark.parametrize(
    ("run", "expected"),
    [
        (outcome(submitted=20, served=20), []),
        (outcome(submitted=0, served=0), []),
        (outcome(submitted=20, served=0), ["20 of 20 jobs went unserved"]),
        (outcome(submitted=20, served=18, cancelled=2), ["2 of 20 jobs went unserved"]),
        (
            outcome(submitted=5, served=5, leaks=Leaks(servers=1, volumes=0, ports=2, registrations=0)),
            ["leaks found: 3"],
        ),
        (
            outcome(submitted=5, served=4, leaks=Leaks(servers=0, volumes=0, ports=0, registrations=1)),
            ["1 of 5 jobs went unserved", "leaks found: 1"],
        ),
    ],
    ids=["all-served", "nothing-submitted", "none-served", "some-cancelled", "leaked", "both"],
)
def test_the_demo_fails_when_a_job_went_unserved_or_anything_leaked(run: Outcome, expected: list[str]) -> None:
    assert failures(run) == expected
