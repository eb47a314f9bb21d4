"""Block device mappings in a server create: the sandbox accepts and refuses what Nova does, in Nova's words.

Every message here was read from a real Nova (ministack, nova 34) answering the same request; the live
differential suite (tests/live/differential.py) sends these requests to both and compares.
"""

from __future__ import annotations

import uuid
from typing import Any

import openstack
import pytest

from corral.sandbox.server import Sandbox
from tests.sandbox.openstack_support import image_id, network_id, wait_for_status

Conn = openstack.connection.Connection
LATEST = "2.100"
BOOT_SEQUENCE = (
    "Block Device Mapping is Invalid: Boot sequence for the instance and image/block device mapping "
    "combination is not valid."
)
MISSING = str(uuid.uuid4())
IMAGE = "<image>"
"""Replaced by the cirros image's id."""


def blank(**changes: Any) -> dict[str, Any]:
    mapping = {"source_type": "blank", "destination_type": "volume", "volume_size": 1, "boot_index": -1}
    return {**mapping, "delete_on_termination": True, **changes}


def local_root(**changes: Any) -> dict[str, Any]:
    mapping = {"source_type": "image", "destination_type": "local", "uuid": IMAGE, "boot_index": 0}
    return {**mapping, "delete_on_termination": True, **changes}


def boot_volume(**changes: Any) -> dict[str, Any]:
    mapping = {"source_type": "image", "destination_type": "volume", "uuid": IMAGE, "boot_index": 0}
    return {**mapping, "volume_size": 1, "delete_on_termination": True, **changes}


def without(mapping: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in mapping.items() if k != key}


def post(conn: Conn, mappings: Any, *, image: bool = True, version: str = LATEST) -> tuple[int, Any]:
    cirros = image_id(conn, "cirros")
    server: dict[str, Any] = {"name": "bdm", "flavorRef": "1", "networks": [{"uuid": network_id(conn, "private")}]}
    if image:
        server["imageRef"] = cirros
    if isinstance(mappings, list):
        mappings = [
            {k: cirros if v == IMAGE else v for k, v in m.items()} if isinstance(m, dict) else m for m in mappings
        ]
    if mappings is not None:
        server["block_device_mapping_v2"] = mappings
    response = conn.compute.post("/servers", json={"server": server}, microversion=version, raise_exc=False)
    return response.status_code, response.json()


REFUSALS: list[tuple[str, Any, bool, str, str]] = [
    # (case, mappings, imageRef given, microversion, Nova's message)
    ("blank volumes only, with imageRef", [blank()], True, LATEST, BOOT_SEQUENCE),
    ("blank volumes only, no imageRef", [blank()], False, LATEST, BOOT_SEQUENCE),
    ("a gap in the boot indexes", [local_root(), blank(boot_index=2)], True, LATEST, BOOT_SEQUENCE),
    ("two boot index 0", [boot_volume(), boot_volume()], False, LATEST, BOOT_SEQUENCE),
    ("no imageRef and no mappings", None, False, LATEST, "Missing imageRef attribute"),
    ("no imageRef and an empty list", [], False, LATEST, "Missing imageRef attribute"),
    (
        "image to local without imageRef",
        [local_root(), blank()],
        False,
        LATEST,
        "Block Device Mapping is Invalid: Mapping image to local is not supported.",
    ),
    (
        "image to local not at boot index 0",
        [local_root(boot_index=1)],
        True,
        LATEST,
        "Block Device Mapping is Invalid: Mapping image to local is not supported.",
    ),
    (
        "a blank volume without a size",
        [local_root(), without(blank(), "volume_size")],
        True,
        LATEST,
        "Blank volumes (source: 'blank', dest: 'volume') need to have non-zero size",
    ),
    (
        "a null volume size",
        [local_root(), blank(volume_size=None)],
        True,
        LATEST,
        "Invalid input for field/attribute volume_size. Value: None. None is not of type 'integer', 'string'",
    ),
    (
        "a boot volume without a size",
        [without(boot_volume(), "volume_size")],
        False,
        LATEST,
        "Images with destination_type 'volume' need to have a non-zero size specified",
    ),
    (
        "an image source without uuid",
        [without(boot_volume(), "uuid")],
        False,
        LATEST,
        "Block Device Mapping is Invalid: Missing device UUID.",
    ),
    (
        "a blank source with a uuid",
        [local_root(), blank(uuid=MISSING)],
        True,
        LATEST,
        "Block Device Mapping is Invalid: Invalid device UUID.",
    ),
    (
        "volume_type before 2.67",
        [local_root(), blank(volume_type="ssd")],
        True,
        "2.66",
        "Invalid input for field/attribute 1. Value: {'source_type': 'blank', 'destination_type': 'volume', "
        "'volume_size': 1, 'boot_index': -1, 'delete_on_termination': True, 'volume_type': 'ssd'}. "
        "Additional properties are not allowed ('volume_type' was unexpected)",
    ),
    (
        "a device tag at 2.41",
        [local_root(), blank(tag="docker")],
        True,
        "2.41",
        "Invalid input for field/attribute 1. Value: {'source_type': 'blank', 'destination_type': 'volume', "
        "'volume_size': 1, 'boot_index': -1, 'delete_on_termination': True, 'tag': 'docker'}. "
        "Additional properties are not allowed ('tag' was unexpected)",
    ),
    (
        "a volume type on a local disk",
        [local_root(volume_type="ssd")],
        True,
        LATEST,
        "Block Device Mapping is Invalid: Specifying a volume_type with destination_type=local is not supported.",
    ),
    (
        "a volume type on an existing volume",
        [local_root(), {"source_type": "volume", "destination_type": "volume", "uuid": MISSING, "volume_type": "x"}],
        True,
        LATEST,
        "Block Device Mapping is Invalid: Specifying volume type to existing volume is not supported.",
    ),
    (
        "an unknown volume type",
        [local_root(), blank(volume_type="no-such-type")],
        True,
        LATEST,
        "Volume type no-such-type could not be found.",
    ),
    (
        "an unknown source type",
        [local_root(), blank(source_type="disk")],
        True,
        LATEST,
        "Invalid input for field/attribute source_type. Value: disk. "
        "'disk' is not one of ['volume', 'image', 'snapshot', 'blank']",
    ),
    (
        "an unknown destination type",
        [local_root(), blank(destination_type="remote")],
        True,
        LATEST,
        "Invalid input for field/attribute destination_type. Value: remote. 'remote' is not one of ['local', 'volume']",
    ),
    (
        "a volume size of 0",
        [local_root(), blank(volume_size=0)],
        True,
        LATEST,
        "Invalid input for field/attribute volume_size. Value: 0. 0 is less than the minimum of 1",
    ),
    (
        "a volume size of '0'",
        [local_root(), blank(volume_size="0")],
        True,
        LATEST,
        "Invalid input for field/attribute volume_size. Value: 0. 0 is less than the minimum of 1",
    ),
    (
        "a volume size of '-1'",
        [local_root(), blank(volume_size="-1")],
        True,
        LATEST,
        "Invalid input for field/attribute volume_size. Value: -1. '-1' does not match '^[0-9]+$'",
    ),
    (
        "a boot index that is no number",
        [local_root(), blank(boot_index="x")],
        True,
        LATEST,
        "Invalid input for field/attribute boot_index. Value: x. 'x' does not match '^-?[0-9]+$'",
    ),
    (
        "an unknown key",
        [local_root(), blank(foo=1)],
        True,
        LATEST,
        "Invalid input for field/attribute 1. Value: {'source_type': 'blank', 'destination_type': 'volume', "
        "'volume_size': 1, 'boot_index': -1, 'delete_on_termination': True, 'foo': 1}. "
        "Additional properties are not allowed ('foo' was unexpected)",
    ),
    (
        "mappings that are no list",
        {"a": 1},
        True,
        LATEST,
        "Invalid input for field/attribute block_device_mapping_v2. Value: {'a': 1}. {'a': 1} is not of type 'array'",
    ),
    (
        "a mapping that is no object",
        ["x"],
        True,
        LATEST,
        "Invalid input for field/attribute 0. Value: x. 'x' is not of type 'object'",
    ),
    (
        "an unknown image for the boot volume",
        [boot_volume(uuid=MISSING)],
        False,
        LATEST,
        f"Block Device Mapping is Invalid: failed to get image {MISSING}.",
    ),
    (
        "an unknown image for another volume",
        [local_root(), boot_volume(uuid=MISSING, boot_index=-1)],
        True,
        LATEST,
        f"Block Device Mapping is Invalid: failed to get image {MISSING}.",
    ),
    (
        "an unknown existing volume",
        [local_root(), {"source_type": "volume", "destination_type": "volume", "uuid": MISSING, "boot_index": -1}],
        True,
        LATEST,
        f"Volume {MISSING} could not be found.",
    ),
    (
        "an unknown existing volume to boot from",
        [{"source_type": "volume", "destination_type": "volume", "uuid": MISSING, "boot_index": 0}],
        False,
        LATEST,
        f"Block Device Mapping is Invalid: failed to get volume {MISSING}.",
    ),
    (
        "an ephemeral disk the flavor has no room for",
        [local_root(), {"source_type": "blank", "destination_type": "local", "volume_size": 1, "boot_index": -1}],
        True,
        LATEST,
        "Ephemeral disks requested are larger than the instance type allows. If no size is given in one block "
        "device mapping, flavor ephemeral size will be used.",
    ),
]


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


ACCEPTED: list[tuple[str, list[Any], bool, list[tuple[int, str, bool, str]]]] = [
    # (case, mappings, imageRef given, the volumes the server ends with)
    (
        "the image's local disk and a blank volume",
        [local_root(), blank()],
        True,
        [(1, "__DEFAULT__", False, "/dev/vdb")],
    ),
    ("a boot volume, with imageRef", [boot_volume()], True, [(1, "__DEFAULT__", True, "/dev/vda")]),
    (
        "a boot volume and a blank volume",
        [boot_volume(), blank(volume_size=2, volume_type="ssd")],
        False,
        [(1, "__DEFAULT__", True, "/dev/vda"), (2, "ssd", False, "/dev/vdb")],
    ),
    (
        "boot indexes 0 and 1",
        [boot_volume(), blank(boot_index=1)],
        False,
        [(1, "__DEFAULT__", True, "/dev/vda"), (1, "__DEFAULT__", False, "/dev/vdb")],
    ),
    ("boot indexes as strings", [boot_volume(boot_index="0")], False, [(1, "__DEFAULT__", True, "/dev/vda")]),
    (
        "a volume size as a string",
        [local_root(), blank(volume_size="3")],
        True,
        [(3, "__DEFAULT__", False, "/dev/vdb")],
    ),
    (
        "a blank disk with no destination makes no volume",
        [local_root(), without(blank(), "destination_type")],
        True,
        [],
    ),
]


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
