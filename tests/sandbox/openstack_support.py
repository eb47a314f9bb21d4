"""Shared helpers for the OpenStack-side sandbox tests: raw HTTP access next to openstacksdk."""

from __future__ import annotations

import openstack
import openstack.config

from corral_sandbox.local import sandbox_cloud_config
from corral_sandbox.server import Sandbox
from tests.waiting import wait_until


def connect(sandbox: Sandbox, cloud: str, **auth: str) -> openstack.connection.Connection:
    config = sandbox_cloud_config(sandbox.info.clouds_yaml)
    region = config.get_one(cloud=cloud, auth=auth) if auth else config.get_one(cloud=cloud)
    return openstack.connection.Connection(config=region)


def token(conn: openstack.connection.Connection) -> str:
    value = conn.auth_token
    assert value is not None
    return value


def image_id(conn: openstack.connection.Connection, name: str) -> str:
    image = conn.get_image(name)
    assert image is not None
    return str(image.id)


def network_id(conn: openstack.connection.Connection, name: str) -> str:
    network = conn.get_network(name)
    assert network is not None
    return str(network.id)


def project_id(conn: openstack.connection.Connection) -> str:
    value = conn.current_project_id
    assert value is not None
    return str(value)


def compute_headers(conn: openstack.connection.Connection, version: str | None = None) -> dict[str, str]:
    headers = {"X-Auth-Token": token(conn)}
    if version is not None:
        headers["OpenStack-API-Version"] = f"compute {version}"
    return headers


def wait_for_status(conn: openstack.connection.Connection, server_id: str, status: str) -> None:
    wait_until(lambda: conn.compute.get_server(server_id).status == status, what=f"server {status}")


def wait_gone(conn: openstack.connection.Connection, server_id: str) -> None:
    wait_until(lambda: conn.compute.find_server(server_id) is None, what="server gone")
