"""The sandbox against a real OpenStack: one scripted sequence of Nova calls through openstacksdk on both,
compared behaviour by behaviour (see `tests/live/differential.py`).

The sandbox is what every other test trusts to behave like Nova; this is where that trust is checked. A
difference is either a sandbox bug (fix the sandbox and pin the behaviour in tests/sandbox/) or something
the script must normalize away because it necessarily differs between two clouds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager

import openstack.config
import openstack.connection
import pytest
from openstack import exceptions as os_exceptions

from corral.cloud.openstack import OpenStackProvider
from corral_sandbox.local import sandbox_connection
from corral_sandbox.server import Sandbox
from corral_sandbox.world import Timings
from tests.live.differential import Side, compare, run_script
from tests.live.pools import PoolNames
from tests.live.support import RUN_MARKER, LiveCloud, exhausted_quota

SANDBOX_TIMINGS = Timings(boot_delay=0.5, register_delay=0.0, delete_delay=0.0)
"""Long enough that the first show after a create still sees BUILD, as on a real cloud."""
SCRIPT_TIMEOUT_S = 60.0
DIFFERENTIAL_TIMEOUT_S = 420
"""Both clouds, each running the script and some twenty servers made a few at a time."""
SECOND_CIDR = "198.51.100.0/24"
DEFAULT_VOLUME_TYPE = "__DEFAULT__"
"""Cinder's default volume type, on the sandbox and on a cloud that does not rename it."""


def _ids(conn: openstack.connection.Connection, live: LiveCloud, network: str) -> tuple[str, str, str]:
    """The image, flavor and network ids behind the names the live suite uses (the sandbox seeds the same
    names; on the live cloud the network is given by id, as its name may be another project's too)."""
    image = conn.image.find_image(live.image, ignore_missing=False).id
    flavor = conn.compute.find_flavor(live.flavor, ignore_missing=False).id
    network_id = conn.network.find_network(network, ignore_missing=False).id
    return str(image), str(flavor), str(network_id)


def _sandbox_connection(sandbox: Sandbox) -> openstack.connection.Connection:
    """A connection to the sandbox that ignores OS_CLIENT_CONFIG_FILE, which names the live cloud's file."""
    return sandbox_connection(sandbox.info)


@contextmanager
def _sandbox_side(
    sandbox: Sandbox, conn: openstack.connection.Connection, live: LiveCloud, volume_type: str
) -> Iterator[Side]:
    image, flavor, network = _ids(conn, live, live.network_name)
    world = sandbox.world

    @contextmanager
    def failing_flavor() -> Iterator[str | None]:
        # The sandbox has no host to be too big for: a boot failure is its way to the same NoValidHost.
        sandbox.call(lambda: world.faults.configure({"world": {"boot_failure_rate": 1.0}}))
        try:
            yield flavor
        finally:
            sandbox.call(lambda: world.faults.configure({"world": {"boot_failure_rate": 0.0}}))

    @contextmanager
    def no_instance_room() -> Iterator[bool]:
        sandbox.call(lambda: world.cloud.set_quota(instances=0))
        try:
            yield True
        finally:
            sandbox.call(lambda: world.cloud.set_quota(instances=-1))

    @contextmanager
    def no_port_room() -> Iterator[bool]:
        # As on Neutron, which refuses a limit below what is in use: the limit is the ports there are.
        sandbox.call(lambda: world.cloud.set_quota(ports=len(world.cloud.ports)))
        try:
            yield True
        finally:
            sandbox.call(lambda: world.cloud.set_quota(ports=-1))

    second = sandbox.call(lambda: world.cloud.add_network("corral-diff-net", SECOND_CIDR))
    pool = PoolNames(
        image=live.image,
        flavor=live.flavor,
        network=live.network_name,
        network_name=live.network_name,
        second_network=second.name,
        second_group="runners",
        key_name=conn.compute.create_keypair(name="corral-diff-key").name,
        availability_zone=live.availability_zone,
        volume_type=volume_type,
    )
    provider = OpenStackProvider(_sandbox_connection(sandbox), f"{live.installation}-diff")
    try:
        yield Side(
            name="sandbox",
            conn=conn,
            prefix=f"corral-live-{live.run}-diff",
            marker={RUN_MARKER: live.run},
            image=image,
            flavor=flavor,
            network=network,
            failing_flavor=failing_flavor,
            no_instance_room=no_instance_room,
            no_port_room=no_port_room,
            provider=provider,
            installation=f"{live.installation}-diff",
            pool=pool,
            volumes=live.has_volumes,
            timeout=SCRIPT_TIMEOUT_S,
        )
    finally:
        provider.close()


def _when_free(live: LiveCloud, delete: Callable[[], object]) -> None:
    """Delete something the run's servers used, once Nova and Cinder have let go of it (ports and volumes
    go a moment after their server leaves the listing)."""
    deadline = time.monotonic() + live.timeout
    while True:
        try:
            delete()
            return
        except os_exceptions.HttpException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


@contextmanager
def _live_side(live: LiveCloud) -> Iterator[Side]:
    """The live cloud, with a second network and security group and (where the account may) a volume type
    made for the run and deleted after it."""
    conn = live.observer
    image, flavor, network = _ids(conn, live, live.network)
    name = f"corral-live-{live.run}-diff"

    @contextmanager
    def failing_flavor() -> Iterator[str | None]:
        try:
            huge = conn.compute.create_flavor(name=f"{name}-huge", ram=64, vcpus=1, disk=10_000_000)
        except os_exceptions.ForbiddenException:
            yield None
            return
        live.created_flavors.append(huge.id)
        yield str(huge.id)

    @contextmanager
    def no_instance_room() -> Iterator[bool]:
        with ExitStack() as stack:
            try:
                stack.enter_context(exhausted_quota(live, "compute", "instances"))
            except pytest.skip.Exception:  # an account that may not change quotas
                yield False
                return
            yield True

    @contextmanager
    def no_port_room() -> Iterator[bool]:
        with ExitStack() as stack:
            try:
                stack.enter_context(exhausted_quota(live, "network", "ports"))
            except pytest.skip.Exception:
                yield False
                return
            yield True

    with ExitStack() as undo:
        second = conn.network.create_network(name=f"{name}-net")
        undo.callback(_when_free, live, lambda: conn.network.delete_network(second.id, ignore_missing=True))
        conn.network.create_subnet(network_id=second.id, ip_version=4, cidr=SECOND_CIDR, name=f"{name}-subnet")
        group = conn.network.create_security_group(name=f"{name}-sg")
        undo.callback(_when_free, live, lambda: conn.network.delete_security_group(group.id, ignore_missing=True))
        volume_type = live.volume_type or DEFAULT_VOLUME_TYPE
        if live.has_volumes:
            try:
                made = conn.block_storage.create_type(name=f"{name}-type")
            except os_exceptions.ForbiddenException:
                pass  # the pools use the default type; the sandbox side follows suit
            else:
                undo.callback(_when_free, live, lambda: conn.block_storage.delete_type(made.id, ignore_missing=True))
                volume_type = str(made.name)
        pool = PoolNames(
            image=live.image,
            flavor=live.flavor,
            network=live.network,
            network_name=live.network_name,
            second_network=str(second.name),
            second_group=str(group.name),
            key_name=live.key_name,
            availability_zone=live.availability_zone,
            volume_type=volume_type,
        )
        provider = live.new_provider(f"{live.installation}-diff")
        undo.callback(provider.close)
        yield Side(
            name="live",
            conn=conn,
            prefix=f"corral-live-{live.run}-diff",
            marker={RUN_MARKER: live.run},
            image=image,
            flavor=flavor,
            network=network,
            failing_flavor=failing_flavor,
            no_instance_room=no_instance_room,
            no_port_room=no_port_room,
            provider=provider,
            installation=f"{live.installation}-diff",
            pool=pool,
            volumes=live.has_volumes,
            # the live suite's patience: a fresh ministack's very first build waits about a minute in nova-compute
            timeout=live.timeout,
        )


@pytest.mark.timeout(DIFFERENTIAL_TIMEOUT_S)
def test_sandbox_and_live_cloud_show_corral_the_same_behaviour(
    live: LiveCloud, capsys: pytest.CaptureFixture[str]
) -> None:
    with _live_side(live) as live_side:
        # The sandbox's pools use a type of their own (its seeded "ssd") only where the live side's can.
        own_type = live_side.pool.volume_type != (live.volume_type or DEFAULT_VOLUME_TYPE)
        with Sandbox(timings=SANDBOX_TIMINGS) as sandbox:
            conn = _sandbox_connection(sandbox)
            try:
                with (
                    _sandbox_side(sandbox, conn, live, "ssd" if own_type else DEFAULT_VOLUME_TYPE) as sandbox_side,
                    run_script(sandbox_side) as on_sandbox,
                ):
                    pass
            finally:
                conn.close()
        with run_script(live_side) as on_live:
            pass

    result = compare("sandbox", on_sandbox, "live", on_live)
    lines = result.lines()
    with capsys.disabled():
        print("\n" + "\n".join(lines))
    assert result.identical == result.total, "\n".join(lines)
