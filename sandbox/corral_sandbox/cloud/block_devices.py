"""Block device mappings (`block_device_mapping_v2`) in a server create, checked as Nova checks them.

Nova looks at the mappings in four places, and which refusal a bad request gets depends on where the
first problem is caught, so the sandbox keeps the same stages (read from nova 34's `servers.py`,
`block_device.py` and `compute/api.py`, and checked against a real Nova by tests/live/differential.py):

1. the JSON schema (`parse_mappings`): unknown keys (`volume_type` before 2.67, `tag` outside 2.32 and
   2.42+), enums, sizes, the spelling of a boot index;
2. the API layer's `BlockDeviceDict.from_api` (`parse_mappings` too): a uuid for every source but
   `blank`, an image mapped to a local disk only as the root disk of the request's own `imageRef`, volume
   types only on new volumes;
3. with no `imageRef`, `get_bdm_image_metadata` (`check_root`): the root device's image or volume must exist;
4. after the instance quota, `_validate_bdm` (`plan_volumes`): the boot sequence (boot indexes 0, 1, 2...
   with no gap and at least a 0), volume types, images, sizes, and the flavor's ephemeral and swap room.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from corral_sandbox.cloud import seed
from corral_sandbox.cloud.errors import ApiError
from corral_sandbox.cloud.microversion import Version
from corral_sandbox.cloud.nova_schema import invalid, not_of_type, string_problem, tag_problem, uuid_like
from corral_sandbox.cloud.records import Flavor
from corral_sandbox.cloud.state import CloudState, VolumeRequest

SOURCE_TYPES = ["volume", "image", "snapshot", "blank"]
DESTINATION_TYPES = ["local", "volume"]
TRUE_STRINGS = [True, "True", "TRUE", "true", "1", "ON", "On", "on", "YES", "Yes", "yes"]
BOOLEAN_VALUES = [*TRUE_STRINGS, False, "False", "FALSE", "false", "0", "OFF", "Off", "off", "NO", "No", "no"]
"""Nova's `parameter_types.boolean`; `strutils.bool_from_string` reads the first half as true."""
MAX_INT = 0x7FFFFFFF
MAX_LOCAL_BLOCK_DEVICES = 3
"""Nova's `[DEFAULT] max_local_block_devices`: the image's root disk, ephemeral and swap disks count."""
DEVICE_LETTERS = "abcdefghijklmnopqrstuvwxyz"

BOOT_SEQUENCE = (
    "Block Device Mapping is Invalid: Boot sequence for the instance and image/block device mapping "
    "combination is not valid."
)


def bdm_format(details: str) -> ApiError:
    """Nova's `InvalidBDMFormat`."""
    return ApiError(400, f"Block Device Mapping is Invalid: {details}")


@dataclass(frozen=True)
class BlockDevice:
    """One mapping after the schema and `from_api`: what the later stages need."""

    source_type: str | None
    destination_type: str | None
    uuid: str | None
    boot_index: int | None
    volume_size: int | None
    volume_type: str | None
    delete_on_termination: bool
    guest_format: str | None
    tag: str | None

    @property
    def is_ephemeral(self) -> bool:
        return (self.source_type, self.destination_type) == ("blank", "local") and self.guest_format != "swap"

    @property
    def is_swap(self) -> bool:
        return (self.source_type, self.destination_type) == ("blank", "local") and self.guest_format == "swap"


# -- 1 and 2: the schema and from_api ---------------------------------------------------------------


def _property_order(version: Version) -> list[str]:
    """The schema's properties in its own order, which is the order jsonschema reports their errors in."""
    keys = ["virtual_name", "volume_id", "snapshot_id", "volume_size", "device_name", "delete_on_termination"]
    keys += ["no_device", "connection_info", "source_type", "uuid", "image_id", "destination_type"]
    keys += ["guest_format", "device_type", "disk_bus", "boot_index"]
    if version == (2, 32) or version >= (2, 42):
        keys.append("tag")
    if version >= (2, 67):
        keys.append("volume_type")
    return keys


def _enum_problem(value: Any, allowed: list[Any]) -> str | None:
    if not isinstance(value, str):
        return not_of_type(value, "string")
    return None if value in allowed else f"{value!r} is not one of {allowed!r}"


def _number(value: Any) -> int | None:
    """Nova's validator reads a numeric string as the number before comparing it to a bound."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _volume_size_problem(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | str):
        return not_of_type(value, "integer", "string")
    if isinstance(value, str) and not (value.isascii() and value.isdigit()):
        return f"{value!r} does not match '^[0-9]+$'"
    number = _number(value)
    if number is not None and number < 1:
        return f"{number!r} is less than the minimum of 1"
    if number is not None and number > MAX_INT:
        return f"{number!r} is greater than the maximum of {MAX_INT}"
    return None


def _boot_index_problem(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | str):
        return not_of_type(value, "integer", "string", "null")
    if isinstance(value, str):
        digits = value[1:] if value.startswith("-") else value
        if not (digits.isascii() and digits.isdigit()):
            return f"{value!r} does not match '^-?[0-9]+$'"
    return None


def _uuid_format_problem(value: Any) -> str | None:
    if not isinstance(value, str):
        return not_of_type(value, "string")
    return None if uuid_like(value) else f"{value!r} is not a 'uuid'"


def _volume_type_problem(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        return not_of_type(value, "string", "null")
    return f"{value!r} is too long" if len(value) > 255 else None


def _property_problem(key: str, value: Any) -> str | None:
    if key in ("volume_id", "snapshot_id", "image_id"):
        return _uuid_format_problem(value)
    if key == "volume_size":
        return _volume_size_problem(value)
    if key == "device_name":
        return string_problem(value, min_length=1, max_length=255, pattern="^[a-zA-Z0-9._/-]*$")
    if key == "delete_on_termination":
        if not isinstance(value, bool | str):
            return not_of_type(value, "boolean", "string")
        return None if value in BOOLEAN_VALUES else f"{value!r} is not one of {BOOLEAN_VALUES!r}"
    if key == "connection_info":
        return string_problem(value, max_length=16777215)
    if key == "source_type":
        return _enum_problem(value, SOURCE_TYPES)
    if key == "destination_type":
        return _enum_problem(value, DESTINATION_TYPES)
    if key == "uuid":
        return string_problem(value, min_length=1, max_length=255, pattern="^[a-zA-Z0-9._-]*$")
    if key in ("virtual_name", "guest_format", "device_type", "disk_bus"):
        return string_problem(value, max_length=255)
    if key == "boot_index":
        return _boot_index_problem(value)
    if key == "tag":
        return tag_problem(value)
    if key == "volume_type":
        return _volume_type_problem(value)
    return None  # no_device: any value


def _check_schema(mappings: Any, version: Version) -> list[dict[str, Any]]:
    if not isinstance(mappings, list):
        raise invalid("block_device_mapping_v2", mappings, not_of_type(mappings, "array"))
    order = _property_order(version)
    for index, mapping in enumerate(mappings):
        if not isinstance(mapping, dict):
            raise invalid(str(index), mapping, not_of_type(mapping, "object"))
        for key in order:
            if key in mapping and (problem := _property_problem(key, mapping[key])) is not None:
                raise invalid(key, mapping[key], problem)
        extras = sorted((key for key in mapping if key not in order), key=str)
        if extras:
            verb = "was" if len(extras) == 1 else "were"
            quoted = ", ".join(repr(key) for key in extras)
            raise invalid(str(index), mapping, f"Additional properties are not allowed ({quoted} {verb} unexpected)")
    return mappings


def _from_api(mapping: dict[str, Any], image_ref_given: bool) -> BlockDevice:
    """`BlockDeviceDict.from_api` and the checks its constructor makes."""
    source, destination = mapping.get("source_type"), mapping.get("destination_type")
    device_uuid, volume_type = mapping.get("uuid"), mapping.get("volume_type")
    if source == "blank" and device_uuid:
        raise bdm_format("Invalid device UUID.")
    if source != "blank" and not device_uuid:
        raise bdm_format("Missing device UUID.")
    if source is None:
        # Nova files the uuid under `source_type + "_id"`, and None + "_id" is a TypeError: a 500.
        raise ApiError(500, "Unexpected API Error. Please contact the administrator\n<class 'TypeError'>")
    raw_boot_index = mapping.get("boot_index")
    boot_index = None if raw_boot_index is None else int(raw_boot_index)
    if (source, destination) == ("image", "local") and not (image_ref_given and boot_index == 0):
        raise bdm_format("Mapping image to local is not supported.")
    if destination == "local" and volume_type:
        raise bdm_format("Specifying a volume_type with destination_type=local is not supported.")
    if source == "volume" and volume_type:
        raise bdm_format("Specifying volume type to existing volume is not supported.")
    size = mapping.get("volume_size")
    return BlockDevice(
        source_type=source,
        destination_type=destination,
        uuid=str(device_uuid) if device_uuid else None,
        boot_index=boot_index,
        volume_size=int(size) if size else None,
        volume_type=volume_type or None,
        delete_on_termination=mapping.get("delete_on_termination") in TRUE_STRINGS,
        guest_format=mapping.get("guest_format"),
        tag=mapping.get("tag"),
    )


def parse_mappings(mappings: Any, version: Version, *, image_ref_given: bool) -> list[BlockDevice]:
    """Stages 1 and 2, which Nova runs before it looks up the flavor: schema errors, then format errors."""
    checked = _check_schema(mappings, version)
    return [_from_api(mapping, image_ref_given) for mapping in checked if not mapping.get("no_device")]


# -- 3: the root device of a server without imageRef ----------------------------------------------


def check_root(state: CloudState, devices: list[BlockDevice]) -> None:
    """`get_bdm_image_metadata`: with no `imageRef`, the first boot_index 0 device must exist and boot."""
    root = next((device for device in devices if device.boot_index == 0), None)
    if root is None or root.uuid is None:
        return
    if root.source_type == "image" and root.uuid not in state.images:
        raise ApiError(400, f"Block Device Mapping is Invalid: failed to get image {root.uuid}.")
    if root.source_type == "snapshot":
        raise ApiError(400, f"Snapshot {root.uuid} could not be found.")
    if root.source_type == "volume":
        volume = state.volumes.get(root.uuid)
        if volume is None:
            raise ApiError(400, f"Block Device Mapping is Invalid: failed to get volume {root.uuid}.")
        if not volume.bootable:
            raise ApiError(400, f"Block Device {root.uuid} is not bootable.")


# -- 4: _validate_bdm, and what Cinder must then provide ----------------------------------------------


def _volume_type_name(wanted: str) -> str:
    """The type's name, given its name or id, as Nova records it; Nova's 400 when Cinder has neither."""
    for type_id, (name, _) in seed.VOLUME_TYPES.items():
        if wanted in (type_id, name):
            return name
    raise ApiError(400, f"Volume type {wanted} could not be found.")


def _check_sequence(devices: list[BlockDevice]) -> None:
    boot_indexes = sorted(d.boot_index for d in devices if d.boot_index is not None and d.boot_index >= 0)
    if not boot_indexes or any(position != index for position, index in enumerate(boot_indexes)):
        raise ApiError(400, BOOT_SEQUENCE)


def _check_device(state: CloudState, device: BlockDevice, image_ref: str) -> None:
    if device.source_type == "image" and device.uuid is not None:
        if device.uuid != image_ref and device.uuid not in state.images:
            raise ApiError(400, f"Block Device Mapping is Invalid: failed to get image {device.uuid}.")
        if device.destination_type == "volume" and not device.volume_size:
            raise ApiError(400, "Images with destination_type 'volume' need to have a non-zero size specified")
    elif device.source_type == "volume" and device.uuid is not None:
        volume = state.volumes[device.uuid]
        if volume.status != "available":
            raise ApiError(
                400, f"Invalid volume: volume '{volume.id}' status must be 'available'. Currently in '{volume.status}'"
            )
    elif device.source_type == "snapshot":
        raise ApiError(400, f"Block Device Mapping is Invalid: failed to get snapshot {device.uuid}.")
    elif (device.source_type, device.destination_type) == ("blank", "volume") and not device.volume_size:
        raise ApiError(400, "Blank volumes (source: 'blank', dest: 'volume') need to have non-zero size")


def _check_local_disks(devices: list[BlockDevice], flavor: Flavor) -> None:
    ephemeral = sum(device.volume_size or flavor.ephemeral for device in devices if device.is_ephemeral)
    if ephemeral > flavor.ephemeral:
        raise ApiError(
            400,
            "Ephemeral disks requested are larger than the instance type allows. If no size is given in one "
            "block device mapping, flavor ephemeral size will be used.",
        )
    swaps = [device for device in devices if device.is_swap]
    if len(swaps) > 1:
        raise bdm_format("More than one swap drive requested.")
    if swaps and (swaps[0].volume_size or 0) > flavor.swap:
        raise ApiError(400, "Swap drive requested is larger than instance type allows.")
    if sum(device.destination_type == "local" for device in devices) > MAX_LOCAL_BLOCK_DEVICES:
        raise bdm_format("You specified more local devices than the limit allows")


def plan_volumes(state: CloudState, devices: list[BlockDevice], flavor: Flavor, image_ref: str) -> list[VolumeRequest]:
    """`_get_volumes_for_bdms` and `_validate_bdm`, in Nova's order; the volumes Cinder must then attach.

    A plain image boot (`imageRef`, no mappings) has an implicit local root disk; mappings replace it, so
    with mappings the image's own root disk must be among them (`source_type: image`,
    `destination_type: local`, `boot_index: 0`). Device names follow the boot order, the root disk first.
    """
    if not devices:
        return []
    for device in devices:
        if device.source_type == "volume" and device.uuid not in state.volumes:
            raise ApiError(400, f"Volume {device.uuid} could not be found.")
    _check_sequence(devices)
    types: dict[str, str] = {}
    for device in devices:
        if device.volume_type:
            types[device.volume_type] = _volume_type_name(device.volume_type)
        _check_device(state, device, image_ref)
    _check_local_disks(devices, flavor)
    ordered = sorted(devices, key=lambda d: (d.boot_index != 0, d.destination_type != "local"))
    requests = []
    for letter, device in zip(DEVICE_LETTERS, ordered, strict=False):
        if device.destination_type != "volume":
            continue
        existing = state.volumes[device.uuid] if device.source_type == "volume" and device.uuid else None
        requests.append(
            VolumeRequest(
                size=existing.size if existing else device.volume_size or 0,
                boot_index=device.boot_index,
                delete_on_termination=device.delete_on_termination,
                image_id=device.uuid if device.source_type == "image" else None,
                volume_id=existing.id if existing else None,
                volume_type=types[device.volume_type] if device.volume_type else None,
                device=f"/dev/vd{letter}",
                tag=device.tag,
            )
        )
    return requests
