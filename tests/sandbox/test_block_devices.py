"""Block device mappings in a server create: the sandbox accepts and refuses what Nova does, in Nova's words.

The requests and Nova's answers are in tests/nova_block_devices.py, read from a real Nova (ministack,
nova 34); the live differential suite (tests/live/differential.py) sends the same requests to both.
"""

from __future__ import annotations

from typing import Any

import httpx
import openstack
import pytest

from corral_sandbox.server import Sandbox
from tests.nova_block_devices import (
    ACCEPTED,
    LATEST,
    MISSING,
    REFUSALS,
    blank,
    local_root,
    render,
    without,
)
from tests.sandbox.openstack_support import image_id, network_id, wait_for_status, wait_gone

Conn = openstack.connection.Connection


def post(conn: Conn, mappings: Any, *, image: bool = True, version: str = LATEST) -> tuple[int, Any]:
    cirros = image_id(conn, "cirros")
    server: dict[str, Any] = {"name": "bdm", "flavorRef": "1", "networks": [{"uuid": network_id(conn, "private")}]}
    if image:
        server["imageRef"] = cirros
    if mappings is not None:
        server["block_device_mapping_v2"] = render(mappings, cirros)
    response = conn.compute.post("/servers", json={"server": server}, microversion=version, raise_exc=False)
    return response.status_code, response.json()


@pytest.mark.parametrize(
    ("mappings", "with_image", "version", "message"),
    [pytest.param(*case[1:], id=case[0]) for case in REFUSALS],
)
def test_refused_as_nova_refuses_it(os_conn: Conn, mappings: Any, with_image: bool, version: str, message: str) -> None:
    status, body = post(os_conn, mappings, image=with_image, version=version)
    assert (status, body) == (400, {"badRequest": {"code": 400, "message": message}})
    assert list(os_conn.compute.servers()) == []


def test_a_mapping_without_source_type_but_with_a_uuid_is_novas_500(os_conn: Conn) -> None:
    """Nova files the uuid under `source_type + "_id"`; with no source type that is a TypeError."""
    status, body = post(os_conn, [local_root(), {"destination_type": "volume", "uuid": MISSING, "volume_size": 1}])
    assert status == 500
    assert body["computeFault"]["message"].endswith("<class 'TypeError'>")


def test_the_instance_quota_is_checked_before_the_mappings(sandbox: Sandbox, os_conn: Conn) -> None:
    sandbox.call(lambda: sandbox.world.cloud.set_quota(instances=0))
    status, body = post(os_conn, [blank()])
    assert status == 403 and "Quota exceeded for instances" in body["forbidden"]["message"]


def _volumes(conn: Conn, server_id: str) -> list[tuple[int, str, bool, str]]:
    """(size, type, bootable, device) of each attached volume, by device."""
    server = conn.compute.get_server(server_id)
    volumes = [conn.block_storage.get_volume(v["id"]) for v in server.attached_volumes]
    return sorted(
        ((v.size, v.volume_type, v.is_bootable, v.attachments[0]["device"]) for v in volumes), key=lambda v: v[3]
    )


@pytest.mark.parametrize(
    ("mappings", "with_image", "volumes"), [pytest.param(*case[1:], id=case[0]) for case in ACCEPTED]
)
def test_accepted_as_nova_accepts_it(
    os_conn: Conn, mappings: list[Any], with_image: bool, volumes: list[tuple[int, str, bool, str]]
) -> None:
    status, body = post(os_conn, mappings, image=with_image)
    assert status == 202, body
    wait_for_status(os_conn, body["server"]["id"], "ACTIVE")
    assert _volumes(os_conn, body["server"]["id"]) == volumes


def test_a_volume_type_given_by_id_is_recorded_by_name(os_conn: Conn) -> None:
    ssd = next(t for t in os_conn.block_storage.types() if t.name == "ssd")
    status, body = post(os_conn, [local_root(), blank(volume_type=ssd.id)])
    assert status == 202, body
    wait_for_status(os_conn, body["server"]["id"], "ACTIVE")
    assert [volume[1] for volume in _volumes(os_conn, body["server"]["id"])] == ["ssd"]


def test_volume_attachments_show_device_tag_and_delete_on_termination(os_conn: Conn) -> None:
    """As nova 34 shows them: the volume id doubles as `id` before 2.89, a mapping without the flag keeps
    its volume, and an unknown volume is Nova's 404."""
    status, body = post(os_conn, [local_root(), blank(tag="docker"), without(blank(), "delete_on_termination")])
    assert status == 202, body
    server_id = body["server"]["id"]
    wait_for_status(os_conn, server_id, "ACTIVE")
    attachments = sorted(os_conn.compute.volume_attachments(server_id), key=lambda a: a.device)
    assert [(a.device, a.tag, a.delete_on_termination) for a in attachments] == [
        ("/dev/vdb", "docker", True),
        ("/dev/vdc", None, False),
    ]
    assert all(a.attachment_id and a.bdm_id for a in attachments)
    path = f"/servers/{server_id}/os-volume_attachments"
    old = os_conn.compute.get(path, microversion="2.79").json()["volumeAttachments"]
    assert sorted(old[0]) == ["delete_on_termination", "device", "id", "serverId", "tag", "volumeId"]
    assert old[0]["id"] == old[0]["volumeId"]
    missing = os_conn.compute.get(f"{path}/{MISSING}", microversion=LATEST, raise_exc=False)
    assert (missing.status_code, missing.json()) == (
        404,
        {"itemNotFound": {"code": 404, "message": f"Instance {server_id} is not attached to volume {MISSING}"}},
    )


def test_a_kept_volume_left_attached_to_a_deleted_server_is_freed_by_os_detach(
    control: httpx.Client, os_conn: Conn
) -> None:
    """`stuck_attachment_rate`: Nova's detach never reaches Cinder, and the kept volume stays `in-use` on a server
    that is gone; its owner frees it with Cinder's `os-detach` (openstacksdk's `detach_volume`), as in Cinder."""
    control.put("/faults", json={"world": {"stuck_attachment_rate": 1.0}}).raise_for_status()
    kept = os_conn.block_storage.create_volume(size=1, name="kept")
    os_conn.block_storage.wait_for_status(kept, "available")
    mapping = {"source_type": "volume", "destination_type": "volume", "uuid": kept.id, "boot_index": -1}
    status, body = post(os_conn, [local_root(), {**mapping, "delete_on_termination": False}])
    assert status == 202, body
    server_id = body["server"]["id"]
    wait_for_status(os_conn, server_id, "ACTIVE")
    os_conn.compute.delete_server(server_id)
    wait_gone(os_conn, server_id)
    stuck = os_conn.block_storage.get_volume(kept.id)
    assert stuck.status == "in-use" and stuck.attachments[0]["server_id"] == server_id
    path = f"/volumes/{kept.id}/action"
    for hostile, message in [({"os-detach": "all"}, "Invalid input"), ({"os-reset": {}}, "There is no such action")]:
        refused = os_conn.block_storage.post(path, json=hostile, raise_exc=False)
        assert (refused.status_code, message in refused.text) == (400, True)
    other = os_conn.block_storage.post(path, json={"os-detach": {"attachment_id": MISSING}}, raise_exc=False)
    assert other.status_code == 404
    os_conn.block_storage.detach_volume(kept.id, stuck.attachments[0]["attachment_id"])
    freed = os_conn.block_storage.get_volume(kept.id)
    assert (freed.status, freed.attachments) == ("available", [])
    again = os_conn.block_storage.post(path, json={"os-detach": {}}, raise_exc=False)
    assert (again.status_code, "must be attached" in again.text) == (400, True)
