"""`bench/spy.py`: py-spy's collapsed stacks folded by function, the figures `bench/reactive.py --profile` prints."""

from __future__ import annotations

from bench.spy import Frame, Profile, top_frames, top_own

RAW = """\
Thread.run (threading.py:982);_worker (futures/thread.py:83);Store._transaction (store/database.py:250) 6
Thread.run (threading.py:982);_worker (futures/thread.py:83);Store._transaction (store/database.py:262) 2
Runner.run (asyncio/runners.py:118);webhook (corral/api/webhook.py:71) 1
Runner.run (asyncio/runners.py:118) 1
not a stack line
"""


def test_samples_are_folded_by_function_whatever_line_they_were_on() -> None:
    """Ten samples: the store's transaction on top of eight (two lines of it, one function), the webhook handler
    on top of one, the loop itself idle on top of one."""
    total, frames = top_frames(RAW, 4)
    assert total == 10
    assert frames == [
        Frame("Store._transaction (database.py)", 0.8, 0.8),
        Frame("Thread.run (threading.py)", 0.8, 0.0),
        Frame("_worker (thread.py)", 0.8, 0.0),
        Frame("Runner.run (runners.py)", 0.2, 0.1),
    ]


def test_a_profile_that_could_not_be_taken_says_why() -> None:
    assert Profile(problem="py-spy is not installed").report() == "profile: none (py-spy is not installed)"
    assert Profile(raw=RAW, top=1).report().splitlines() == [
        "profile: 10 samples at 200/s, by function (on the stack / on top)",
        "   80.0%  80.0%  Store._transaction (database.py)",
        "by time on top (self):",
        "   80.0%  80.0%  Store._transaction (database.py)",
    ]


def test_the_functions_the_cpu_was_in_are_ranked_by_their_own_samples() -> None:
    """The thread pool's frames are on the stack of eight samples but on top of none: by self time the store's
    transaction leads, then the webhook handler and the idle loop (one each, by name)."""
    assert top_own(RAW, 3) == [
        Frame("Store._transaction (database.py)", 0.8, 0.8),
        Frame("Runner.run (runners.py)", 0.2, 0.1),
        Frame("webhook (webhook.py)", 0.1, 0.1),
    ]
