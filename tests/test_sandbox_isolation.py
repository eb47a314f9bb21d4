"""The sandbox's helpers reach the sandbox whatever the shell holds.

Most OpenStack users have `OS_CLIENT_CONFIG_FILE`, `OS_CLOUD` or the `OS_*` variables set. openstacksdk reads
them all by default, and puts the file `OS_CLIENT_CONFIG_FILE` names before the one it is given: `corral demo`
then talked to the user's cloud (and would have created servers there, had the user's file an entry named like
the sandbox's). Here the environment names a hostile clouds.yaml and secure.yaml whose entries share the
sandbox's names and point at a closed port, plus `OS_*` credentials; every helper must still reach the sandbox.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import openstack.connection
import pytest

from corral.cloud.openstack import connect as serve_connect
from corral.config import CloudConfig
from corral_sandbox.local import sandbox_connection, sandbox_environment
from corral_sandbox.server import Sandbox
from tests import conftest
from tests.hostile_shell import closed_port_url, hostile_variables
from tests.sandbox import openstack_support

Connect = Callable[[Sandbox], openstack.connection.Connection]


@pytest.fixture
def hostile_environment(sandbox: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A shell set up for another cloud, with entries named like the sandbox's; returns where it points."""
    elsewhere = closed_port_url()
    names = [sandbox.info.cloud_name, sandbox.info.second_cloud_name, sandbox.info.app_credential_cloud_name]
    for name, value in hostile_variables(tmp_path, names, elsewhere).items():
        monkeypatch.setenv(name, value)
    return elsewhere


def as_corral_serve(sandbox: Sandbox) -> openstack.connection.Connection:
    """What a child `corral serve` does (`openstack.connect` by entry name) in the environment the test and
    bench helpers give it."""
    with mock.patch.dict(os.environ, sandbox_environment(sandbox.info.clouds_yaml), clear=True):
        return serve_connect(CloudConfig(name=sandbox.info.cloud_name))


HELPERS: dict[str, Connect] = {
    "corral_sandbox.local.sandbox_connection": lambda sandbox: sandbox_connection(sandbox.info),
    "tests.conftest.connect": lambda sandbox: conftest.connect(sandbox, sandbox.info.cloud_name),
    "tests.sandbox.openstack_support.connect": lambda sandbox: openstack_support.connect(
        sandbox, sandbox.info.cloud_name
    ),
    "a child corral serve (sandbox_environment)": as_corral_serve,
}


@pytest.mark.parametrize("helper", list(HELPERS.values()), ids=list(HELPERS))
def test_a_sandbox_helper_ignores_the_shells_openstack_settings(
    sandbox: Sandbox, hostile_environment: str, helper: Connect
) -> None:
    conn = helper(sandbox)
    try:
        resolved = (conn.config.get_auth_args()["auth_url"], conn.config.get_region_name(), conn.config.interface)
        assert resolved == (sandbox.info.auth_url, sandbox.info.region, "public")
        assert "m1.small" in [flavor.name for flavor in conn.compute.flavors()], "the sandbox answered"
    finally:
        conn.close()


def test_the_second_cloud_entry_is_the_sandboxs_too(sandbox: Sandbox, hostile_environment: str) -> None:
    conn = sandbox_connection(sandbox.info, sandbox.info.second_cloud_name)
    try:
        assert conn.config.get_auth_args()["auth_url"] != hostile_environment
        assert str(conn.compute.get_endpoint()).startswith(sandbox.info.second_openstack_url)
    finally:
        conn.close()


def test_a_child_environment_drops_every_os_variable_and_names_only_the_sandboxs_file() -> None:
    inherited = {"PATH": "/usr/bin", "OS_CLOUD": "mine", "OS_AUTH_URL": "https://keystone.example", "OS_X": "1"}
    assert sandbox_environment("/sandbox/clouds.yaml", inherited) == {
        "PATH": "/usr/bin",
        "OS_CLIENT_CONFIG_FILE": "/sandbox/clouds.yaml",
        "OS_CLIENT_SECURE_FILE": "/sandbox/clouds.yaml",
    }
