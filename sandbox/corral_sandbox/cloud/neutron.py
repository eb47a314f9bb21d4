"""Neutron v2.0: networks, subnets, ports and security groups.

Listing filters work as Neutron's do: any attribute of the resource, repeated for "any of", and an unknown
attribute is a 400 (Neutron's filter validation is on by default). Ports Nova creates for a server carry
its id in `device_id`, which is how clients find a server's ports.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request, Response

from corral_sandbox.cloud.errors import ApiError
from corral_sandbox.cloud.records import Network, Port, SecurityGroup, Subnet
from corral_sandbox.cloud.service import json_body, no_content, respond, service_router
from corral_sandbox.cloud.state import CloudState

if TYPE_CHECKING:
    from corral_sandbox.world import World

PAGING_PARAMS = frozenset({"fields", "limit", "marker", "sort_key", "sort_dir", "page_reverse"})
EXTENSIONS = (
    ("binding", "Port Binding"),
    ("external-net", "Neutron external network"),
    ("port-security", "Port Security"),
    ("quota_details", "Quota details management support"),
    ("quotas", "Quota management support"),
    ("security-group", "security-group"),
    ("standard-attr-description", "standard-attr-description"),
    ("standard-attr-tag", "Tag support"),
    ("standard-attr-timestamp", "Resource timestamps"),
    ("subnet_allocation", "Subnet Allocation"),
)
"""The extensions the sandbox's Neutron honours; no `router`, so no floating IPs, like ministack."""


def _owned(state: CloudState, body: dict[str, Any]) -> dict[str, Any]:
    body["tenant_id"] = body["project_id"] = state.project_id
    return body


def network_body(state: CloudState, network: Network) -> dict[str, Any]:
    return _owned(
        state,
        {
            "id": network.id,
            "name": network.name,
            "admin_state_up": True,
            "mtu": network.mtu,
            "status": "ACTIVE",
            "subnets": network.subnet_ids,
            "shared": network.shared,
            "availability_zone_hints": [],
            "availability_zones": [],
            "ipv4_address_scope": None,
            "ipv6_address_scope": None,
            "router:external": network.external,
            "description": "",
            "port_security_enabled": True,
            "tags": [],
            "created_at": network.created_at,
            "updated_at": network.created_at,
            "revision_number": 1,
        },
    )


def subnet_body(state: CloudState, subnet: Subnet) -> dict[str, Any]:
    return _owned(
        state,
        {
            "id": subnet.id,
            "name": subnet.name,
            "network_id": subnet.network_id,
            "ip_version": 4,
            "subnetpool_id": None,
            "enable_dhcp": True,
            "ipv6_ra_mode": None,
            "ipv6_address_mode": None,
            "gateway_ip": subnet.gateway_ip,
            "cidr": subnet.cidr,
            "allocation_pools": [{"start": subnet.allocation_start, "end": subnet.allocation_end}],
            "host_routes": [],
            "dns_nameservers": [],
            "description": "",
            "service_types": [],
            "tags": [],
            "created_at": subnet.created_at,
            "updated_at": subnet.created_at,
            "revision_number": 0,
        },
    )


def port_body(state: CloudState, port: Port) -> dict[str, Any]:
    return _owned(
        state,
        {
            "id": port.id,
            "name": port.name,
            "network_id": port.network_id,
            "mac_address": port.mac_address,
            "admin_state_up": True,
            "status": port.status,
            "device_id": port.device_id,
            "device_owner": port.device_owner,
            "fixed_ips": [{"subnet_id": port.subnet_id, "ip_address": port.ip_address}],
            "allowed_address_pairs": [],
            "extra_dhcp_opts": [],
            "security_groups": port.security_group_ids,
            "description": "",
            "binding:vnic_type": "normal",
            "port_security_enabled": True,
            "tags": [],
            "created_at": port.created_at,
            "updated_at": port.updated_at,
            "revision_number": 1,
        },
    )


def security_group_body(state: CloudState, group: SecurityGroup) -> dict[str, Any]:
    rules = [
        _owned(
            state,
            {
                **rule,
                "security_group_id": group.id,
                "description": "",
                "tags": [],
                "created_at": group.created_at,
                "updated_at": group.created_at,
                "revision_number": 0,
            },
        )
        for rule in group.rules
    ]
    return _owned(
        state,
        {
            "id": group.id,
            "name": group.name,
            "stateful": True,
            "description": group.description,
            "shared": False,
            "security_group_rules": rules,
            "tags": [],
            "created_at": group.created_at,
            "updated_at": group.created_at,
            "revision_number": 0,
        },
    )


def _matches(body: dict[str, Any], filters: dict[str, list[str]]) -> bool:
    for name, wanted in filters.items():
        value = body[name]
        if name == "fixed_ips":
            continue
        candidates = {str(value).lower()} if isinstance(value, bool) else {str(value)}
        if isinstance(value, list):
            candidates = {str(item) for item in value}
        if not candidates & {item.lower() if isinstance(value, bool) else item for item in wanted}:
            return False
    return True


def _listing(
    request: Request,
    collection: str,
    items: Iterable[Any],
    render: Callable[[Any], dict[str, Any]],
    attributes: Iterable[str],
) -> Response:
    known = set(attributes)
    filters: dict[str, list[str]] = {}
    for key, value in request.query_params.multi_items():
        if key in PAGING_PARAMS:
            continue
        if key not in known:
            raise ApiError(400, f"[{key!r}] is invalid attribute for filtering")
        filters.setdefault(key, []).append(value)
    bodies = (render(item) for item in items)
    return respond(request, {collection: [body for body in bodies if _matches(body, filters)]})


def build_neutron_router(world: World, cloud: CloudState) -> APIRouter:
    public = service_router(world, cloud, "network", prefix="/network", authenticated=False)
    router = service_router(world, cloud, "network", prefix="/network/v2.0")
    state = cloud

    @public.get("")
    @public.get("/")
    async def versions(request: Request) -> Response:
        link = {"rel": "self", "href": f"{cloud.url}/network/v2.0/"}
        return respond(request, {"versions": [{"id": "v2.0", "status": "CURRENT", "links": [link]}]})

    @router.get("/extensions")
    async def extensions(request: Request) -> Response:
        items = [
            {"name": name, "alias": alias, "description": name, "updated": "2013-01-01T10:00:00-00:00", "links": []}
            for alias, name in EXTENSIONS
        ]
        return respond(request, {"extensions": items})

    def find(collection: dict[str, Any], item_id: str, kind: str, message: str) -> Any:
        item = collection.get(item_id)
        if item is None:
            raise ApiError(404, message.format(item_id), kind=kind)
        return item

    sample_network = network_body(state, next(iter(state.networks.values())))
    sample_subnet = subnet_body(state, next(iter(state.subnets.values())))
    sample_group = security_group_body(state, next(iter(state.security_groups.values())))
    port_attributes = port_body(state, Port("", "", "", "", "", [], "", "")).keys()

    @router.get("/networks")
    async def list_networks(request: Request) -> Response:
        return _listing(
            request, "networks", state.networks.values(), lambda item: network_body(state, item), sample_network
        )

    @router.get("/networks/{network_id}")
    async def show_network(request: Request, network_id: str) -> Response:
        network = find(state.networks, network_id, "NetworkNotFound", "Network {} could not be found.")
        return respond(request, {"network": network_body(state, network)})

    @router.get("/subnets")
    async def list_subnets(request: Request) -> Response:
        return _listing(
            request, "subnets", state.subnets.values(), lambda item: subnet_body(state, item), sample_subnet
        )

    @router.get("/subnets/{subnet_id}")
    async def show_subnet(request: Request, subnet_id: str) -> Response:
        subnet = find(state.subnets, subnet_id, "SubnetNotFound", "Subnet {} could not be found.")
        return respond(request, {"subnet": subnet_body(state, subnet)})

    @router.get("/security-groups")
    async def list_security_groups(request: Request) -> Response:
        return _listing(
            request,
            "security_groups",
            state.security_groups.values(),
            lambda item: security_group_body(state, item),
            sample_group,
        )

    @router.get("/security-groups/{group_id}")
    async def show_security_group(request: Request, group_id: str) -> Response:
        group = find(state.security_groups, group_id, "SecurityGroupNotFound", "Security group {} does not exist")
        return respond(request, {"security_group": security_group_body(state, group)})

    def quota_of(project_id: str) -> dict[str, tuple[int, int]]:
        """Each of Neutron's quotas as (limit, used); only ports are limited here unless a test says so."""
        if project_id != state.project_id:
            raise ApiError(403, "rule:get_quota is disallowed by policy", kind="PolicyNotAuthorized")
        return {
            "floatingip": (50, 0),
            "network": (100, len(state.networks)),
            "port": (state.quota["ports"], len(state.ports)),
            "rbac_policy": (10, 0),
            "router": (10, 0),
            "security_group": (10, len(state.security_groups)),
            "security_group_rule": (100, 0),
            "subnet": (100, len(state.subnets)),
            "subnetpool": (-1, 0),
        }

    @router.get("/quotas/{project_id}")
    async def show_quota(request: Request, project_id: str) -> Response:
        quota = {name: limit for name, (limit, _) in quota_of(project_id).items()}
        return respond(request, {"quota": quota})

    @router.get("/quotas/{project_id}/details")
    async def show_quota_details(request: Request, project_id: str) -> Response:
        quota = {
            name: {"limit": limit, "used": used, "reserved": 0} for name, (limit, used) in quota_of(project_id).items()
        }
        return respond(request, {"quota": quota})

    @router.get("/ports")
    async def list_ports(request: Request) -> Response:
        device = request.query_params.get("device_id")
        ports: Iterable[Port] = state.ports.values()
        if device is not None:
            ports = [
                state.ports[port_id] for port_id in state.ports_by_device.get(device, []) if port_id in state.ports
            ]
        return _listing(request, "ports", ports, lambda item: port_body(state, item), port_attributes)

    @router.get("/ports/{port_id}")
    async def show_port(request: Request, port_id: str) -> Response:
        port = find(state.ports, port_id, "PortNotFound", "Port {} could not be found.")
        return respond(request, {"port": port_body(state, port)})

    @router.post("/ports")
    async def create_port(request: Request) -> Response:
        spec = (await json_body(request)).get("port")
        if not isinstance(spec, dict) or "network_id" not in spec:
            raise ApiError(400, "Failed to parse request. Required attribute 'network_id' not specified")
        find(state.networks, spec["network_id"], "NetworkNotFound", "Network {} could not be found.")
        wanted_groups = spec.get("security_groups")
        names = None
        if wanted_groups is not None:
            names = [
                find(state.security_groups, group_id, "SecurityGroupNotFound", "Security group {} does not exist").name
                for group_id in wanted_groups
            ]
        port = state.create_port(spec["network_id"], security_group_names=names, name=str(spec.get("name", "")))
        return respond(request, {"port": port_body(state, port)}, 201)

    @router.delete("/ports/{port_id}")
    async def delete_port(request: Request, port_id: str) -> Response:
        find(state.ports, port_id, "PortNotFound", "Port {} could not be found.")
        state.delete_port(port_id)
        return no_content(request)

    combined = APIRouter()
    combined.include_router(public)
    combined.include_router(router)
    return combined
