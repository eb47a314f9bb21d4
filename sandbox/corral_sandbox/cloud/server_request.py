"""Validate a `POST /servers` body the way Nova's JSON schema and API layer do, and resolve its references.

Nova reports schema violations as `Invalid input for field/attribute <name>. Value: <value>. <reason>`
with jsonschema's reason text; corral logs and surfaces these, so the sandbox words them the same way.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from corral_sandbox.cloud.block_devices import check_root, parse_mappings, plan_volumes
from corral_sandbox.cloud.errors import ApiError
from corral_sandbox.cloud.microversion import Version
from corral_sandbox.cloud.nova_schema import invalid, tag_problem, uuid_like
from corral_sandbox.cloud.state import CloudState, NicRequest, ServerRequest

MAX_USER_DATA = 65535
"""Nova's limit on the base64 text of `user_data`."""
MAX_METADATA_ITEMS = 128
MAX_TAGS = 50
METADATA_KEY = re.compile(r"^[a-zA-Z0-9-_:. ]{1,255}$")

BASE_FIELDS = frozenset(
    {
        "name",
        "imageRef",
        "flavorRef",
        "networks",
        "security_groups",
        "key_name",
        "availability_zone",
        "user_data",
        "metadata",
        "config_drive",
        "block_device_mapping_v2",
        "min_count",
        "max_count",
        "return_reservation_id",
        "accessIPv4",
        "accessIPv6",
        "adminPass",
        "OS-DCF:diskConfig",
    }
)
FIELDS_SINCE: tuple[tuple[Version, str], ...] = (
    ((2, 19), "description"),
    ((2, 52), "tags"),
    ((2, 63), "trusted_image_certificates"),
    ((2, 74), "host"),
    ((2, 74), "hypervisor_hostname"),
    ((2, 90), "hostname"),
)


def parse_server_request(state: CloudState, body: dict[str, Any], version: Version) -> ServerRequest:
    server = body.get("server")
    if not isinstance(server, dict):
        raise invalid("server", server, f"{server!r} is not of type 'object'")
    _check_fields(server, version)
    name = _name(server)
    user_data = _user_data(server.get("user_data"))
    metadata = _metadata(server.get("metadata", {}))
    tags = _tags(server.get("tags", []))
    image_id = str(server.get("imageRef") or "")
    devices = parse_mappings(server.get("block_device_mapping_v2", []), version, image_ref_given=bool(image_id))
    if not image_id and not devices:
        raise ApiError(400, "Missing imageRef attribute")
    flavor_ref = str(server.get("flavorRef", ""))
    if flavor_ref not in state.flavors:
        raise ApiError(400, f"Flavor {flavor_ref} could not be found.")
    flavor = state.flavors[flavor_ref]
    if image_id and image_id not in state.images:
        raise ApiError(400, "Can not find requested image")
    if not image_id:
        check_root(state, devices)
    key_name = server.get("key_name")
    if key_name is not None and key_name not in state.keypairs:
        raise ApiError(400, "Invalid key_name provided.")
    zone = server.get("availability_zone")
    if zone is not None and zone != "nova":
        raise ApiError(400, "The requested availability zone is not available")
    groups = _security_groups(state, server.get("security_groups", [{"name": "default"}]))
    hints = body.get("os:scheduler_hints") or body.get("OS-SCH-HNT:scheduler_hints") or {}
    group_id = hints.get("group") if isinstance(hints, dict) else None
    if group_id is not None and group_id not in state.server_groups:
        raise ApiError(400, f"Invalid server group: Instance group {group_id} could not be found.")
    nics = _nics(state, server, version)
    # Nova checks the instance quota before it validates the mappings against Cinder and Glance.
    state.check_nova_quota(flavor)
    volumes = plan_volumes(state, devices, flavor, image_id)
    return ServerRequest(
        name=name,
        flavor=flavor,
        image_id=image_id,
        nics=nics,
        availability_zone="nova",
        security_groups=groups,
        key_name=key_name,
        user_data=user_data,
        config_drive=server.get("config_drive") in (True, "True", "true", "1", 1),
        metadata=metadata,
        tags=tags,
        volumes=volumes,
        server_group_id=group_id,
        scheduler_hints=hints if isinstance(hints, dict) else {},
        description=server.get("description"),
        hostname=server.get("hostname"),
    )


def _check_fields(server: dict[str, Any], version: Version) -> None:
    allowed = BASE_FIELDS | {field for since, field in FIELDS_SINCE if version >= since}
    unexpected = [key for key in server if key not in allowed]
    if unexpected:
        quoted = ", ".join(repr(key) for key in unexpected)
        verb = "were" if len(unexpected) > 1 else "was"
        raise invalid("server", server, f"Additional properties are not allowed ({quoted} {verb} unexpected)")
    required = ["name", "flavorRef"] + (["networks"] if version >= (2, 37) else [])
    for field in required:
        if field not in server:
            raise invalid("server", server, f"'{field}' is a required property")


def _name(server: dict[str, Any]) -> str:
    return validate_name(server["name"])


INVALID_NAME = (
    "An invalid 'name' value was provided. The name must be: printable characters. "
    "Can not start or end with whitespace."
)
"""Nova's message for a value its `name` format rejects (create and rename alike)."""


def validate_name(name: Any) -> str:
    """Nova's `parameter_types.name`: a string of 1-255 printable characters, no leading or trailing
    whitespace; jsonschema (4.21+) calls a too short string "should be non-empty"."""
    if not isinstance(name, str):
        raise invalid("name", name, f"{name!r} is not of type 'string'")
    if not name:
        raise invalid("name", name, "'' should be non-empty")
    if len(name) > 255:
        raise invalid("name", name, f"{name!r} is too long")
    if name != name.strip() or not name.isprintable():
        raise ApiError(400, INVALID_NAME)
    return name


def _user_data(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise invalid("user_data", value, f"{value!r} is not of type 'string'")
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise invalid("user_data", value, f"{value!r} is not a 'base64'") from None
    if len(value) > MAX_USER_DATA:
        raise invalid("user_data", value, f"{value!r} is too long")
    return value


def _metadata(value: Any) -> dict[str, str]:
    """Nova's metadata rules: keys 1-255 of a small alphabet, string values up to 255, at most 128 items."""
    if not isinstance(value, dict):
        raise invalid("metadata", value, f"{value!r} is not of type 'object'")
    for key, item in value.items():
        if not METADATA_KEY.match(key):
            raise invalid(
                "metadata", value, f"{key!r} does not match any of the regexes: '^[a-zA-Z0-9-_:. ]{{1,255}}$'"
            )
        if not isinstance(item, str):
            raise invalid(key, item, f"{item!r} is not of type 'string'")
        if len(item) > 255:
            raise invalid(key, item, f"{item!r} is too long")
    if len(value) > MAX_METADATA_ITEMS:
        raise ApiError(403, f"Maximum number of metadata items exceeds {MAX_METADATA_ITEMS}")
    return dict(value)


def validate_metadata(value: Any) -> dict[str, str]:
    return _metadata(value)


def _tags(value: Any) -> list[str]:
    if not isinstance(value, list):
        raise invalid("tags", value, f"{value!r} is not of type 'array'")
    if len(value) > MAX_TAGS:
        raise invalid("tags", value, f"{value!r} is too long")
    for index, tag in enumerate(value):
        validate_tag(tag, str(index))
    return list(dict.fromkeys(value))


def validate_tag(tag: Any, field: str) -> str:
    """A tag in a create or replace-all body: the schema's usual 400."""
    problem = tag_problem(tag)
    if problem is not None:
        raise invalid(field, tag, problem)
    return str(tag)


def validate_single_tag(tag: str) -> str:
    """A tag added on its own (`PUT /servers/{id}/tags/{tag}`): Nova words that refusal its own way."""
    problem = tag_problem(tag)
    if problem is not None:
        raise ApiError(
            400,
            f"Tag '{tag}' is invalid. It must be a non empty string without characters '/' and ','. "
            f"Validation error message: {problem}",
        )
    return tag


def _security_groups(state: CloudState, value: Any) -> list[str]:
    names: list[str] = []
    for item in value if isinstance(value, list) else []:
        wanted = item.get("name") if isinstance(item, dict) else None
        match = next((sg for sg in state.security_groups.values() if wanted in (sg.name, sg.id)), None)
        if match is None:
            raise ApiError(400, f"Unable to find security_group with name or id '{wanted}'")
        if match.name not in names:
            names.append(match.name)
    return names


def _nics(state: CloudState, server: dict[str, Any], version: Version) -> list[NicRequest]:
    networks = server.get("networks", "auto" if version >= (2, 37) else None)
    if networks == "none":
        return []
    if networks in ("auto", None, []):
        return [NicRequest(network_id=network_id) for network_id in list(state.networks)[:1]]
    if not isinstance(networks, list):
        raise invalid("networks", networks, f"{networks!r} is not valid under any of the given schemas")
    nics = []
    for entry in networks:
        if not isinstance(entry, dict):
            raise invalid("networks", networks, f"{entry!r} is not of type 'object'")
        for field in ("uuid", "port"):
            value = entry.get(field)
            if value and not uuid_like(value):
                # From 2.37 `networks` is a oneOf (a list, or "auto"/"none"), so Nova names the whole list.
                if version >= (2, 37):
                    raise invalid("networks", networks, f"{networks!r} is not valid under any of the given schemas")
                raise invalid(field, value, f"{value!r} is not a 'uuid'")
        if entry.get("port"):
            port = state.ports.get(entry["port"])
            if port is None:
                raise ApiError(400, f"Port id {entry['port']} could not be found.")
            if port.device_id:
                raise ApiError(409, f"Port {port.id} is still in use.")
            nics.append(NicRequest(port_id=port.id))
        elif entry.get("uuid"):
            if entry["uuid"] not in state.networks:
                raise ApiError(400, f"Network {entry['uuid']} could not be found.")
            nics.append(NicRequest(network_id=entry["uuid"], fixed_ip=entry.get("fixed_ip")))
        else:
            raise ApiError(400, "Bad networks format: network uuid is not in proper format")
    return nics
