"""The sandbox against a real OpenStack: one scripted sequence of Nova calls through openstacksdk on both,
compared behaviour by behaviour (see `tests/live/differential.py`).

The sandbox is what every other test trusts to behave like Nova; this is where that trust is checked. A
difference is either a sandbox bug (fix the sandbox and pin the behaviour in tests/sandbox/) or something
the script must normalize away because it necessarily differs between two clouds.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import openstack.config
import openstack.connection
import pytest
from openstack import exceptions as os_exceptions

from corral.sandbox.server import Sandbox
from corral.sandbox.world import Timings
from tests.live.differential import Side, compare, run_script
from tests.live.support import RUN_MARKER, LiveCloud, exhausted_quota

SANDBOX_TIMINGS = Timings(boot_delay=0.5, register_delay=0.0, delete_delay=0.0)
"""Long enough that the first show after a create still sees BUILD, as on a real cloud."""
SCRIPT_TIMEOUT_S = 60.0


def _ids(conn: openstack.connection.Connection, live: LiveCloud) -> tuple[str, str, str]:
    """The image, flavor and network ids behind the names the live suite uses (the sandbox seeds the same)."""
    image = conn.image.find_image(live.image, ignore_missing=False).id
    flavor = conn.compute.find_flavor(live.flavor, ignore_missing=False).id
    network = conn.network.find_network(live.network, ignore_missing=False).id
    return str(image), str(flavor), str(network)


def _sandbox_side(sandbox: Sandbox, conn: openstack.connection.Connection, live: LiveCloud) -> Side:
    image, flavor, network = _ids(conn, live)
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

    return Side(
        name="sandbox",
        conn=conn,
        prefix=f"corral-live-{live.run}-diff",
        marker={RUN_MARKER: live.run},
        image=image,
        flavor=flavor,
        network=network,
        failing_flavor=failing_flavor,
        no_instance_room=no_instance_room,
        timeout=SCRIPT_TIMEOUT_S,
    )


def _live_side(live: LiveCloud) -> Side:
    conn = live.observer
    image, flavor, network = _ids(conn, live)

    @contextmanager
    def failing_flavor() -> Iterator[str | None]:
        try:
            huge = conn.compute.create_flavor(
                name=f"corral-live-{live.run}-diff-huge", ram=64, vcpus=1, disk=10_000_000
            )
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

    return Side(
        name="live",
        conn=conn,
        prefix=f"corral-live-{live.run}-diff",
        marker={RUN_MARKER: live.run},
        image=image,
        flavor=flavor,
        network=network,
        failing_flavor=failing_flavor,
        no_instance_room=no_instance_room,
        # the live suite's patience: a fresh ministack's very first build waits about a minute in nova-compute
        timeout=live.timeout,
    )


def test_sandbox_and_live_cloud_show_corral_the_same_behaviour(
    live: LiveCloud, capsys: pytest.CaptureFixture[str]
) -> None:
    live_side = _live_side(live)
    with Sandbox(timings=SANDBOX_TIMINGS) as sandbox:
        config = openstack.config.OpenStackConfig(config_files=[sandbox.info.clouds_yaml], load_envvars=False)
        conn = openstack.connection.Connection(config=config.get_one(cloud=sandbox.info.cloud_name))
        try:
            with run_script(_sandbox_side(sandbox, conn, live)) as on_sandbox:
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
