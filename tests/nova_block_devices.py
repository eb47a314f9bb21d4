"""Block device mappings a server create may carry, and how a real Nova (nova 34, read from ministack)
answers each: the sandbox's tests assert the sandbox answers the same, and the live differential suite sends
every one of them to the sandbox and to a real Nova and compares the answers.
"""

from __future__ import annotations

import uuid
from typing import Any

LATEST = "2.100"
"""openstacksdk's highest compute microversion: what corral's creates negotiate with both clouds."""
BOOT_SEQUENCE = (
    "Block Device Mapping is Invalid: Boot sequence for the instance and image/block device mapping "
    "combination is not valid."
)
MISSING = str(uuid.uuid4())
IMAGE = "<image>"
"""Stands for the image the request boots; `render` puts its id in."""


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


def render(mappings: Any, image_id: str) -> Any:
    """The mappings with `IMAGE` replaced by the image's id."""
    if not isinstance(mappings, list):
        return mappings
    return [{k: image_id if v == IMAGE else v for k, v in m.items()} if isinstance(m, dict) else m for m in mappings]


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
        [local_root(), blank(volume_type="fast")],
        True,
        "2.66",
        "Invalid input for field/attribute 1. Value: {'source_type': 'blank', 'destination_type': 'volume', "
        "'volume_size': 1, 'boot_index': -1, 'delete_on_termination': True, 'volume_type': 'fast'}. "
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
        [local_root(volume_type="fast")],
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


ACCEPTED: list[tuple[str, list[Any], bool, list[tuple[int, str, bool, str]]]] = [
    # (case, mappings, imageRef given, the volumes the server ends with: size, type, bootable, device); device
    # names as libvirt gives them (the root disk is vda), where ministack's fake virt driver says sda
    (
        "the image's local disk and a blank volume",
        [local_root(), blank()],
        True,
        [(1, "__DEFAULT__", False, "/dev/vdb")],
    ),
    ("a boot volume, with imageRef", [boot_volume()], True, [(1, "__DEFAULT__", True, "/dev/vda")]),
    (
        "a boot volume and a blank volume",
        [boot_volume(), blank(volume_size=2, volume_type="__DEFAULT__")],
        False,
        [(1, "__DEFAULT__", True, "/dev/vda"), (2, "__DEFAULT__", False, "/dev/vdb")],
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
