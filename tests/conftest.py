"""Fixtures shared by the whole suite: one real sandbox served over HTTP for the session."""

from __future__ import annotations

import sys
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from types import CodeType
from typing import Any

import httpx
import openstack
import openstack.config
import pytest

from corral import gc_tuning
from corral.store.database import Store
from corral_sandbox.local import LocalCorral, corral_config, pool_spec, sandbox_cloud_config
from corral_sandbox.server import Sandbox
from corral_sandbox.world import Timings
from tests.store_urls import postgres_url, sqlite_url
from tests.webhook_receiver import WebhookReceiver

gc_tuning.tune()
"""The tests run corral's engine in their own processes (`LocalCorral`), as `corral serve` does: with its
collector thresholds too. Measured: 8% less CPU for four e2e modules, 4% for the unit layer."""

TEST_TIMINGS = Timings(boot_delay=0.05, register_delay=0.0, delete_delay=0.0)

E2E_FIXTURES = frozenset({"sandbox_session", "webhook_receiver_session", "start_corral", "live"})
"""A test whose fixtures include one of these, directly or through others (`sandbox`, `control`, `os_conn`,
`webhook_receiver`, a module's own fixture built on them...) is end to end: it talks HTTP to the sandbox
(or, for `live`, to a real cloud)."""

E2E_NAMES = frozenset({"postgres_url", "run_chaos", "subprocess", "Popen"})
"""A test whose own code (nested functions included) names one of these starts something outside the test's
process: a PostgreSQL database of its own, the chaos bench, a child process. Modules that do so through helpers
say `pytestmark = pytest.mark.e2e` instead."""


def _names(code: CodeType) -> Iterator[str]:
    yield from code.co_names
    for constant in code.co_consts:
        if isinstance(constant, CodeType):
            yield from _names(constant)


def _is_e2e(item: pytest.Item) -> bool:
    if E2E_FIXTURES.intersection(getattr(item, "fixturenames", ())):
        return True
    callspec = getattr(item, "callspec", None)
    if callspec is not None and "postgresql" in callspec.params.values():
        return True
    function = getattr(item, "function", None)
    code = getattr(function, "__code__", None)
    return isinstance(code, CodeType) and not E2E_NAMES.isdisjoint(_names(code))


CHAOS = ("tests/test_chaos.py::", "tests/test_replicas_chaos.py::")
"""Modules whose `long` tests are the chaos bench: processes against their own deadlines, mostly waiting (a
run of the one-replica test takes about 15 CPU-s over 50 s, the three-replica kill run 35 over 80), so under
`-n` two lanes run them (`ChaosLanes`), never more than two at once."""
CHAOS_LANES = 2


def _chaos(nodeid: str) -> bool:
    return nodeid.startswith(CHAOS)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark `e2e` every test that starts the sandbox, corral, a process or a database of its own, so that
    `pytest -m "not e2e"` is the fast set whoever writes the next test; put the long runs first."""
    for item in items:
        if _is_e2e(item):
            item.add_marker(pytest.mark.e2e)
    # The long runs first (the chaos bench's first of all): under `-n` they then overlap everything else
    # instead of ending the run alone (`ChaosLanes` gives the chaos runs two workers and the other long ones a
    # third). Of the others, those that mostly wait on real time (`waits`) lead the front lane: they take
    # minutes but little CPU, so they overlap the rest from the start instead of ending the run (measured: the
    # fidelity test, 143 s, last of its lane).
    items.sort(
        key=lambda item: (
            item.get_closest_marker("long") is None,
            not _chaos(item.nodeid),
            item.get_closest_marker("waits") is None,
        )
    )


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """A `no_cover` test runs with its thread's coverage tracer off, under `-n` too. There pytest-cov's own
    `no_cover` stopped its coverage and another tracer took over at once (coverage's collectors are a stack:
    stopping one resumes the one below), so the test was traced all the same. This runs inside pytest-cov's
    wrapper (`trylast`) and takes off whatever tracer is left: the min_idle auto proof took 69 CPU-s in a
    worker, 40 with this (37 in a process of its own; measured 2026-12-05). Such a test starts no thread of
    its own, so its one thread is enough."""
    if item.get_closest_marker("no_cover") is None:
        return (yield)
    tracer = sys.gettrace()
    sys.settrace(None)
    try:
        return (yield)
    finally:
        sys.settrace(tracer)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under `-n`, `ChaosLanes` instead of xdist's `load`, which sent a quarter of each worker's share at once:
    every `long` test to the first worker, one after another (measured: 634 s of 1,355 tests at -n 6). Another
    `--dist` asked for on the command line is xdist's own."""
    if config.getoption("dist") != "load":
        return None
    from xdist.scheduler import LoadScheduling  # xdist is there whenever this hook is called

    class ChaosLanes(LoadScheduling):  # type: ignore[misc]  # xdist ships no type information
        """The chaos runs go to the first two workers up, dealt in turn, each worker's one after another; the
        third takes tests from the front of the rest, where the other long ones are, one at a time; every other
        worker (and a chaos lane once its runs are done) takes from the back. So at most two chaos runs and one
        other long test run at once (starting them all together starved the machine: timing tests failed
        beside CI's live suite), and none ends the run alone (one chaos lane took 294 s, the run's whole
        length). Each worker holds two tests: the one it runs and the next (a worker starts a test only once it
        knows the one after)."""

        collection: list[str] | None

        def __init__(self, config: pytest.Config, log: Any) -> None:
            super().__init__(config, log)
            self._lanes: list[Any] = []
            """Workers in the order they came up: the chaos lanes, the front lane, then the others."""

        def schedule(self) -> None:
            if self.collection is None:
                if not self._check_nodes_have_same_collection():
                    super().schedule()  # says so and aborts
                    return
                self.collection = next(iter(self.node2collection.values()))
                self.pending[:] = range(len(self.collection))
            chaos = [i for i in self.pending if _chaos(self.collection[i])]
            for node in self.nodes:  # workers come up one by one: this is called again as each does
                if node not in self._lanes:
                    self._lanes.append(node)
                    lane = len(self._lanes) - 1
                    if lane < CHAOS_LANES:
                        self._take(node, chaos[lane::CHAOS_LANES] if lane + 1 < CHAOS_LANES else chaos)
                        chaos = [i for i in self.pending if _chaos(self.collection[i])]
                self.check_schedule(node)

        def check_schedule(self, node: Any, duration: float = 0) -> None:
            if node.shutting_down:
                return
            if not self.pending:
                node.shutdown()
                return
            wanted = 2 - len(self.node2pending[node])
            if wanted <= 0:
                return
            if len(self._lanes) > CHAOS_LANES and node is self._lanes[CHAOS_LANES]:
                chunk = self.pending[:wanted]
            else:
                chunk = self.pending[-wanted:][::-1]
            self._take(node, chunk)

        def _take(self, node: Any, chunk: list[int]) -> None:
            if not chunk:
                return
            taken = set(chunk)
            self.pending[:] = [i for i in self.pending if i not in taken]
            self.node2pending[node].extend(chunk)
            node.send_runtest_some(chunk)

    return ChaosLanes(config, log)


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A migrated store on SQLite and on the real PostgreSQL: what the store's and the cost tests run against."""
    urls = sqlite_url(tmp_path) if request.param == "sqlite" else postgres_url()
    with urls as url:
        store = Store(url)
        store.migrate()
        yield store
        store.close()


@pytest.fixture(scope="session")
def sandbox_session() -> Iterator[Sandbox]:
    """One sandbox for the session (starting HTTP servers per test would dominate the run time)."""
    with Sandbox(timings=TEST_TIMINGS) as sandbox:
        yield sandbox


@pytest.fixture
def sandbox(sandbox_session: Sandbox) -> Sandbox:
    """The session's sandbox, reset to a fresh world for this test."""
    sandbox_session.call(sandbox_session.world.reset)
    return sandbox_session


@pytest.fixture
def control(sandbox: Sandbox) -> Iterator[httpx.Client]:
    """An HTTP client for the sandbox's control API (`/_sandbox/...`)."""
    with httpx.Client(base_url=sandbox.info.control_url, timeout=10) as client:
        yield client


def connect(sandbox: Sandbox, cloud_name: str) -> openstack.connection.Connection:
    """openstacksdk connected to an entry of the sandbox's clouds.yaml, ignoring the shell's OS_* variables."""
    config = sandbox_cloud_config(sandbox.info.clouds_yaml)
    return openstack.connection.Connection(config=config.get_one(cloud=cloud_name))


@pytest.fixture
def os_conn(sandbox: Sandbox) -> Iterator[openstack.connection.Connection]:
    """openstacksdk connected to the sandbox with password auth from the generated clouds.yaml."""
    conn = connect(sandbox, sandbox.info.cloud_name)
    yield conn
    conn.close()


@pytest.fixture(scope="session")
def webhook_receiver_session() -> Iterator[WebhookReceiver]:
    receiver = WebhookReceiver().start()
    yield receiver
    receiver.stop()


@pytest.fixture
def webhook_receiver(webhook_receiver_session: WebhookReceiver, control: httpx.Client) -> WebhookReceiver:
    """A loopback endpoint the sandbox delivers this test's webhooks to."""
    webhook_receiver_session.clear()
    webhook_receiver_session.status = 200
    control.put("/webhook", json={"url": webhook_receiver_session.url}).raise_for_status()
    return webhook_receiver_session


StartCorral = Callable[..., LocalCorral]


@pytest.fixture
def start_corral(sandbox: Sandbox, tmp_path: Path) -> Iterator[StartCorral]:
    """Start a whole corral (the Service `corral serve` runs) against this test's sandbox; every corral
    started is stopped when the test ends, whatever happened.

    `start_corral(pools, **settings)` builds the config (SQLite in the test's folder, a small pool by
    default); `start_corral(document=...)` takes a whole config document instead.
    """
    started: list[LocalCorral] = []

    def start(
        pools: dict[str, Any] | None = None, *, document: dict[str, Any] | None = None, **settings: Any
    ) -> LocalCorral:
        if document is None:
            database = f"sqlite:///{tmp_path / 'corral.db'}"
            document = corral_config(sandbox.info, database, pools or {"small": pool_spec(["small"])}, **settings)
        corral = LocalCorral(sandbox.info, tmp_path / "corral.yaml", document).start()
        started.append(corral)
        return corral

    yield start
    for corral in started:
        corral.stop()
