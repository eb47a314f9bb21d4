"""A pass judges only the runners something changed for: their row (a move, a job's webhook), or what the look
saw of their server or registration (`observe.changes_between`, `judge.Staying`). What it decides is what
judging every runner would decide; `corral_runners_judged_total` counts what it judged."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import timedelta
from typing import cast

from corral.cloud.provider import CloudServer
from corral.engine.creator import Creator
from corral.engine.judge import RunnerJudge
from corral.engine.observe import Observation, changes_between
from corral.engine.running import Running
from corral.engine.supervisor import Supervisor
from corral.engine.transitions import Mover
from corral.github.client import RegisteredRunner
from corral.metrics import REGISTRY
from corral.model import Delivery, JobState, JobUpdate, Reason, Runner, RunnerState
from corral.store import Store, jobs, known_runners
from corral.store.known_runners import KnownRunners
from tests.minimal_config import running
from tests.unit.test_judge import Learned, StoppedClock
from tests.unit.test_known_runners import AT as UP
from tests.unit.test_known_runners import idle_runners

SCOPE = "org:octo-org"


def server(runner: Runner, status: str = "ACTIVE") -> CloudServer:
    return CloudServer(f"s-{runner.id}", runner.name, status, "corral", "small", runner.id)


def registration(runner: Runner, busy: bool = False) -> RegisteredRunner:
    return RegisteredRunner(abs(hash(runner.id)) % 10**9, runner.name, "online", busy, ("linux",))


class Pass:
    """The reconciler's first two steps for pool small: read its runners (known between passes), judge them."""

    def __init__(self, store: Store, judge_running: Running) -> None:
        self.store = store
        self.known = KnownRunners()
        self.latest: Observation | None = None
        self.clock = StoppedClock(UP)
        self.judge = RunnerJudge(
            judge_running,
            Mover(store, clock=self.clock),
            Supervisor(),
            cast(Creator, Learned()),
            lambda after_s: None,
        )

    def look(self, generation: int, servers: list[CloudServer], registered: list[RegisteredRunner]) -> Observation:
        """A look as the `Observer` keeps it, with what changed since the one before; look N begins N minutes
        after the runners came online, and the passes after it act a second later."""
        started_at = UP + timedelta(minutes=generation)
        self.clock.at = started_at + timedelta(seconds=1)
        seen = Observation(
            generation,
            started_at=started_at,
            servers={found.runner_id: found for found in servers},
            listed=frozenset({"default"}),
            registrations={SCOPE: {found.name: found for found in registered}},
        )
        self.latest = replace(seen, changes=changes_between(self.latest, seen))
        return self.latest

    def run(self) -> tuple[dict[str, RunnerState], int]:
        """Each runner's state after the pass, and how many runners it judged."""
        before = judged()
        rows = self.store.run_blocking(known_runners.live_of_pool, "small", self.known)
        current = asyncio.run(self.judge.judge(rows, self.latest))
        return {runner.id: runner.state for runner in current}, int(judged() - before)


def judged() -> float:
    return REGISTRY.get_sample_value("corral_runners_judged_total", {"pool": "small"}) or 0.0


def test_a_pass_judges_only_the_runners_whose_row_server_or_registration_changed(store: Store) -> None:
    a, b, c, d = idle_runners(store, 4)
    passes = Pass(store, running())
    servers = {runner.id: server(runner) for runner in (a, b, c, d)}
    registered = {runner.id: registration(runner) for runner in (a, b, c, d)}

    passes.look(1, list(servers.values()), list(registered.values()))
    states, count = passes.run()
    assert (set(states.values()), count) == ({RunnerState.IDLE}, 4)

    # The same look again (a wake between looks), then a look that saw nothing change: nothing judged.
    assert passes.run()[1] == 0
    passes.look(2, list(servers.values()), list(registered.values()))
    assert passes.run()[1] == 0

    # b's registration went (its runner deregistered), c's server shut off, d took a job (the webhook, in the
    # job table): three runners judged, and each moves as judging them all would have moved it.
    del registered[b.id]
    servers[c.id] = server(c, "SHUTOFF")
    job = JobUpdate(5, "octo-org/app", ("linux",), JobState.IN_PROGRESS, "small", runner_name=d.name)
    store.run_blocking(jobs.record, [Delivery(id="d", event="workflow_job", action="in_progress", job=job)], now=UP)
    passes.look(3, list(servers.values()), list(registered.values()))
    states, count = passes.run()
    assert count == 3
    assert states == {
        a.id: RunnerState.IDLE,
        b.id: RunnerState.DELETING,  # finished, then on to be deleted in the same pass
        c.id: RunnerState.DELETING,
        d.id: RunnerState.BUSY,
    }

    # The next look: d (busy since the last pass) judged again and staying busy; b and c, whose servers and
    # registrations are gone, deleted; a not judged. Then nothing is judged.
    passes.look(4, [servers[a.id], servers[d.id]], [registered[a.id], registration(d, busy=True)])
    states, count = passes.run()
    assert (states, count) == ({a.id: RunnerState.IDLE, d.id: RunnerState.BUSY}, 3)
    passes.look(5, [servers[a.id], servers[d.id]], [registered[a.id], registration(d, busy=True)])
    assert passes.run()[1] == 0


def test_a_look_that_skipped_a_generation_or_listed_other_clouds_judges_every_runner(store: Store) -> None:
    fleet = idle_runners(store, 3)
    passes = Pass(store, running())
    servers = [server(runner) for runner in fleet]
    registered = [registration(runner) for runner in fleet]
    passes.look(1, servers, registered)
    assert passes.run()[1] == 3
    passes.look(2, servers, registered)
    passes.look(3, servers, registered)  # the pool's worker missed look 2
    assert passes.run()[1] == 3
    assert passes.run()[1] == 0
    passes.latest = replace(passes.look(4, servers, registered), changes=None)  # GitHub could not be listed before
    assert passes.run()[1] == 3


def test_a_new_configuration_judges_every_runner_again(store: Store) -> None:
    fleet = idle_runners(store, 2)
    judge_running = running()
    passes = Pass(store, judge_running)
    passes.look(1, [server(runner) for runner in fleet], [registration(runner) for runner in fleet])
    assert passes.run()[1] == 2
    judge_running.config = judge_running.config.model_copy()  # a reload
    assert passes.run()[1] == 2


def test_changes_between_two_looks_name_the_servers_and_registrations_that_differ() -> None:
    fleet = [
        Runner(
            id=f"r{index}",
            pool="small",
            scope=SCOPE,
            state=RunnerState.IDLE,
            name=f"corral-small-r{index}",
            labels=("linux",),
            reason=Reason.CAME_ONLINE,
            message=None,
            created_at=UP,
            state_changed_at=UP,
        )
        for index in range(3)
    ]
    r0, r1, r2 = fleet
    first = Observation(
        1,
        UP,
        {r0.id: server(r0), r1.id: server(r1)},
        frozenset({"default"}),
        {SCOPE: {r0.name: registration(r0), r1.name: registration(r1)}},
    )
    # Equal but new objects are no change; a new server, a gone one, a changed registration are.
    second = Observation(
        2,
        UP,
        {r0.id: server(r0), r2.id: server(r2)},
        frozenset({"default"}),
        {SCOPE: {r0.name: registration(r0, busy=True), r1.name: registration(r1)}},
    )
    changes = changes_between(first, second)
    assert changes is not None
    assert (changes.since, set(changes.servers), set(changes.registrations)) == (1, {r1.id, r2.id}, {(SCOPE, r0.name)})
    assert changes_between(None, second) is None
    assert changes_between(first, replace(second, listed=frozenset({"default", "other"}))) is None
    assert changes_between(first, replace(second, registrations={})) is None
    assert changes_between(first, replace(second, servers=None)) is None
