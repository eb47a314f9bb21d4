"""Fixtures for the live suite: a real OpenStack named by OS_CLOUD/clouds.yaml or the OS_* variables.

Every test here is skipped, with the reason, unless USE_LIVE_OPENSTACK=true, credentials are present and
CORRAL_LIVE_IMAGE, CORRAL_LIVE_FLAVOR and CORRAL_LIVE_NETWORK name what a pool would use (the network and
security group are resolved to ids in the tested project: an admin sees other projects' too). Everything a run
creates carries its run id (in corral's installation metadata or in a run marker), and the session
finalizer deletes all of it, so a failed run leaves nothing behind on a shared cloud.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openstack.connection
import pytest
from openstack import exceptions as os_exceptions

from corral.cloud.openstack import OpenStackProvider, connect
from corral_sandbox.server import Sandbox
from corral_sandbox.world import Timings
from tests.live.support import (
    ApiCounter,
    Figures,
    LiveCloud,
    cloud_config,
    env,
    in_project,
    live_skip_reason,
    new_run_id,
)

LIVE_DIR = Path(__file__).parent
FIGURES = pytest.StashKey[Figures]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[FIGURES] = Figures()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip the live tests, saying why, unless a live cloud is configured; `scripts/live.sh` sets
    CORRAL_LIVE_REQUIRED=true so that a broken setup fails the run instead of passing it green."""
    reason = live_skip_reason()
    if reason is None:
        return
    if env("CORRAL_LIVE_REQUIRED").lower() == "true":
        raise pytest.UsageError(f"CORRAL_LIVE_REQUIRED=true, but {reason}")
    for item in items:
        if LIVE_DIR in item.path.parents:
            item.add_marker(pytest.mark.skip(reason=reason))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    lines = config.stash[FIGURES].lines()
    if lines:
        terminalreporter.section("corral on a live OpenStack: figures")
        for line in lines:
            terminalreporter.write_line(line)


def _default_volume_type(observer: openstack.connection.Connection) -> str | None:
    """CORRAL_LIVE_VOLUME_TYPE, else the cloud's default type, so the type option is exercised too."""
    if env("CORRAL_LIVE_VOLUME_TYPE"):
        return env("CORRAL_LIVE_VOLUME_TYPE")
    try:
        return str(observer.block_storage.get_type("default").name)
    except os_exceptions.SDKException:
        return None


@pytest.fixture(scope="session")
def live() -> Iterator[LiveCloud]:
    reason = live_skip_reason()
    if reason is not None:
        pytest.skip(reason)
    observer = connect(cloud_config())
    has_volumes = bool(observer.has_service("block-storage"))
    project = observer.current_project_id
    network = in_project(observer.network.find_network, env("CORRAL_LIVE_NETWORK"), project)
    group = in_project(observer.network.find_security_group, env("CORRAL_LIVE_SECURITY_GROUP", "default"), project)
    cloud = LiveCloud(
        observer=observer,
        run=new_run_id(),
        image=env("CORRAL_LIVE_IMAGE"),
        flavor=env("CORRAL_LIVE_FLAVOR"),
        network=str(network.id),
        network_name=str(network.name),
        security_group=str(group.id),
        security_group_name=str(group.name),
        availability_zone=env("CORRAL_LIVE_AVAILABILITY_ZONE", "nova"),
        volume_type=_default_volume_type(observer) if has_volumes else None,
        has_volumes=has_volumes,
        timeout=float(env("CORRAL_LIVE_TIMEOUT", "180")),
    )
    try:
        cloud.key_name = observer.compute.create_keypair(name=f"corral-live-{cloud.run}").name
        yield cloud
    finally:
        left = cloud.cleanup()
        observer.close()
    assert not left, f"the live run could not clean up after itself: {left}"


@pytest.fixture(scope="session")
def provider(live: LiveCloud) -> Iterator[OpenStackProvider]:
    """The provider of this run's installation, shared by the session as corral shares its one connection
    (its name cache stays warm across tests, as it would across reconcile passes)."""
    provider = live.new_provider()
    yield provider
    provider.close()


@pytest.fixture(scope="session")
def api(provider: OpenStackProvider) -> ApiCounter:
    """Every HTTP request the session's provider makes."""
    return ApiCounter.attach(provider.connection)


@pytest.fixture(scope="session")
def figures(request: pytest.FixtureRequest) -> Figures:
    return request.config.stash[FIGURES]


@pytest.fixture
def discard(live: LiveCloud) -> Iterator[list[str]]:
    """Server ids to delete when the test ends, waiting until they are gone (ports and volumes with them):
    the session finalizer would get them anyway, but later tests need the room under the project's quotas
    and a quota test needs usage that no longer moves."""
    ids: list[str] = []
    yield ids
    for server_id in ids:
        live.observer.compute.delete_server(server_id, ignore_missing=True)
    live.wait_gone(set(ids))


@pytest.fixture
def github_sandbox() -> Iterator[Sandbox]:
    """GitHub for a corral on the live cloud: the sandbox's (its OpenStack side goes unused)."""
    with Sandbox(timings=Timings(boot_delay=0.05)) as sandbox:
        yield sandbox
