"""Fixtures shared by the whole suite: one real sandbox served over HTTP for the session."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openstack
import openstack.config
import pytest

from corral.local import LocalCorral, corral_config, pool_spec
from corral.sandbox.server import Sandbox
from corral.sandbox.world import Timings
from tests.webhook_receiver import WebhookReceiver

TEST_TIMINGS = Timings(boot_delay=0.05, register_delay=0.0, delete_delay=0.0)


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
    config = openstack.config.OpenStackConfig(config_files=[sandbox.info.clouds_yaml])
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
