"""What a job costs corral's store, counted in virtual time: the engine's passes, looks and moves for sixty
more jobs in a simulated hour, statement by statement.

A count depends on neither the machine nor its load, so a change that adds a statement per job or per pass
fails here on any machine, in a second, where the end-to-end counts (`tests/test_costs.py`) take the sandbox
and real time. The same hour is simulated with a job a minute and a job every 30 s (`corral simulate`'s engine
is `corral serve`'s): what the store is asked for both alike (the migrations, the looks, the periodic passes)
cancels out, and the difference is what the sixty jobs themselves cost, wakes and passes included.
"""

from __future__ import annotations

from collections import Counter

from sqlalchemy import Engine

from bench.counting import StatementCounter
from corral.simulate.run import simulate
from corral.simulate.settings import BootTimes, Settings
from tests.unit.test_simulate import config, trace


def statements_for_an_hour(every_s: int) -> Counter[str]:
    """The statements, by kind, of an hour of two-minute jobs arriving every `every_s`, two runners kept warm,
    60 s boots."""
    jobs = trace(*((float(at), 120.0) for at in range(0, 3600, every_s)))
    counter = StatementCounter(Engine)
    with counter.counting():
        simulate(config(small={"min_idle": 2, "max_runners": 20}), jobs, Settings(boot=BootTimes(60.0)))
    return Counter(counter.kinds)


def test_sixty_more_jobs_in_an_hour_cost_about_eighteen_statements_each() -> None:
    """Per job: its webhooks recorded (a delivery row and the job's row per group of them), its runner added,
    its runner's moves (an update and an event each), and the reads of the passes its news wakes. What a look
    or a periodic pass reads once for the whole pool does not grow with the jobs: two more a minute add only
    7 reads of jobs in the hour."""
    more = statements_for_an_hour(30)
    more.subtract(statements_for_an_hour(60))
    per_kind = {kind: count for kind, count in sorted(more.items()) if count}
    assert per_kind == {
        "INSERT deliveries": 110,
        "INSERT jobs": 110,
        "INSERT runner_events": 292,
        "INSERT runners": 60,
        "SELECT jobs": 7,
        "SELECT runner_events": 49,
        "SELECT runners": 174,
        "UPDATE runners": 301,
    }
    assert sum(per_kind.values()) == 1103  # 18.4 a job
