"""Keystone, discovery and microversions as openstacksdk and keystoneauth meet them."""

from __future__ import annotations

import httpx
import keystoneauth1.exceptions
import openstack
import pytest

from corral_sandbox.server import Sandbox
from tests.sandbox.openstack_support import compute_headers, connect, image_id, project_id, token


def test_password_and_application_credential_clouds_both_work(sandbox: Sandbox) -> None:
    password = connect(sandbox, sandbox.info.cloud_name)
    app_cred = connect(sandbox, sandbox.info.app_credential_cloud_name)
    assert [f.name for f in password.compute.flavors()][:2] == ["m1.tiny", "m1.small"]
    assert project_id(password) == project_id(app_cred)
    assert {image.name for image in app_cred.image.images()} == {"ubuntu-24.04-runner", "cirros"}


def test_wrong_password_is_keystones_401(sandbox: Sandbox) -> None:
    conn = connect(sandbox, sandbox.info.cloud_name, password="not-the-password")
    with pytest.raises(keystoneauth1.exceptions.Unauthorized) as caught:
        list(conn.compute.servers())
    assert caught.value.http_status == 401
    raw = httpx.post(
        f"{sandbox.info.auth_url}/v3/auth/tokens",
        json={
            "auth": {
                "identity": {
                    "methods": ["application_credential"],
                    "application_credential": {"id": "nope", "secret": "nope"},
                }
            }
        },
    )
    assert raw.status_code == 401
    assert raw.json() == {
        "error": {"code": 401, "title": "Unauthorized", "message": "The request you have made requires authentication."}
    }


@pytest.mark.parametrize(
    "path",
    ["/compute/v2.1/servers", "/network/v2.0/networks", "/volume/v3/{project}/volumes", "/image/v2/images"],
)
def test_unknown_token_is_refused_by_every_service(
    sandbox: Sandbox, os_conn: openstack.connection.Connection, path: str
) -> None:
    url = sandbox.info.openstack_url + path.format(project=project_id(os_conn))
    response = httpx.get(url, headers={"X-Auth-Token": "gAAAAA-forged"})
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Keystone uri=")
    assert httpx.get(url, headers={"X-Auth-Token": token(os_conn)}).status_code == 200


def test_token_validation_and_catalog(sandbox: Sandbox, os_conn: openstack.connection.Connection) -> None:
    subject = token(os_conn)
    response = httpx.get(
        f"{sandbox.info.auth_url}/v3/auth/tokens", headers={"X-Auth-Token": subject, "X-Subject-Token": subject}
    )
    assert response.status_code == 200
    types = {entry["type"] for entry in response.json()["token"]["catalog"]}
    assert {"identity", "compute", "image", "network", "block-storage", "volumev3"} <= types
    missing = httpx.get(
        f"{sandbox.info.auth_url}/v3/auth/tokens", headers={"X-Auth-Token": subject, "X-Subject-Token": "unknown"}
    )
    assert missing.status_code == 404
    endpoint = os_conn.session.get_endpoint(service_type="block-storage")
    assert str(endpoint).endswith(f"/volume/v3/{project_id(os_conn)}")


def test_version_documents(sandbox: Sandbox) -> None:
    base = sandbox.info.openstack_url
    identity = httpx.get(f"{base}/identity")
    assert identity.status_code == 300
    assert identity.json()["versions"]["values"][0]["id"] == "v3.14"
    nova = httpx.get(f"{base}/compute/v2.1").json()["version"]
    assert (nova["min_version"], nova["version"]) == ("2.1", "2.104")
    assert httpx.get(f"{base}/image").status_code == 300
    assert httpx.get(f"{base}/network").json()["versions"][0]["id"] == "v2.0"
    assert httpx.get(f"{base}/volume").json()["versions"][0]["version"] == "3.71"


def test_sdk_negotiates_the_server_microversion(os_conn: openstack.connection.Connection) -> None:
    created = os_conn.compute.create_server(
        name="mv", image_id=image_id(os_conn, "cirros"), flavor_id="1", networks="none", tags=["negotiated"]
    )
    server = os_conn.compute.get_server(created.id)
    assert server.tags == ["negotiated"]
    assert server.flavor.original_name == "m1.tiny"
    assert server.pinned_availability_zone is None


@pytest.mark.parametrize(
    ("header", "status", "echoed"),
    [
        ({"OpenStack-API-Version": "compute 2.26"}, 200, "2.26"),
        ({"X-OpenStack-Nova-API-Version": "2.30"}, 200, "2.30"),
        ({"OpenStack-API-Version": "compute latest"}, 200, "2.104"),
        ({}, 200, "2.1"),
    ],
)
def test_microversion_headers_are_echoed(
    sandbox: Sandbox, os_conn: openstack.connection.Connection, header: dict[str, str], status: int, echoed: str
) -> None:
    response = httpx.get(
        f"{sandbox.info.openstack_url}/compute/v2.1/servers", headers={"X-Auth-Token": token(os_conn), **header}
    )
    assert response.status_code == status
    assert response.headers["OpenStack-API-Version"] == f"compute {echoed}"
    assert response.headers["X-OpenStack-Nova-API-Version"] == echoed
    assert response.headers["Vary"] == "OpenStack-API-Version, X-OpenStack-Nova-API-Version"


def test_unsupported_and_malformed_microversions(sandbox: Sandbox, os_conn: openstack.connection.Connection) -> None:
    url = f"{sandbox.info.openstack_url}/compute/v2.1/servers"
    too_new = httpx.get(url, headers=compute_headers(os_conn, "2.999"))
    assert too_new.status_code == 406
    assert too_new.json() == {
        "computeFault": {
            "code": 406,
            "message": ("Version 2.999 is not supported by the API. Minimum is 2.1 and maximum is 2.104."),
        }
    }
    garbage = httpx.get(url, headers=compute_headers(os_conn, "abc"))
    assert garbage.status_code == 400
    assert garbage.json()["badRequest"]["message"].startswith("API Version String abc is of invalid format")


def test_server_fields_follow_the_microversion(sandbox: Sandbox, os_conn: openstack.connection.Connection) -> None:
    server = os_conn.compute.create_server(
        name="fields", image_id=image_id(os_conn, "cirros"), flavor_id="1", networks="none"
    )
    url = f"{sandbox.info.openstack_url}/compute/v2.1/servers/{server.id}"
    old = httpx.get(url, headers=compute_headers(os_conn, "2.1")).json()["server"]
    new = httpx.get(url, headers=compute_headers(os_conn, "2.100")).json()["server"]
    assert "tags" not in old and "locked" not in old and "description" not in old
    assert old["flavor"]["id"] == "1" and "original_name" not in old["flavor"]
    assert new["tags"] == [] and new["locked"] is False and new["scheduler_hints"] == {}
    assert new["flavor"]["original_name"] == "m1.tiny" and "id" not in new["flavor"]
    assert new["image"]["properties"] == {"os_distro": "cirros"}
    assert new["server_groups"] == []
    detail = httpx.get(
        f"{sandbox.info.openstack_url}/compute/v2.1/servers/detail", headers=compute_headers(os_conn, "2.100")
    ).json()["servers"][0]
    assert "server_groups" not in detail
