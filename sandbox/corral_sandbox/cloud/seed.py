"""What the sandbox cloud holds before anyone calls it: the resources an operator would have set up.

Identifiers are fixed (UUID5 of the name) so a config that names an image or network by id keeps working
across sandbox restarts and `reset()`.
"""

from __future__ import annotations

import uuid

from corral_sandbox.cloud.records import Flavor, Image, Network, SecurityGroup, Subnet

NAMESPACE = uuid.UUID("6f1c7c1e-2f0b-4f7a-9a52-7c0a5e1d2b33")
SEEDED_AT = "2026-01-01T00:00:00Z"
DEFAULT_AZ = "nova"
PRIVATE_CIDR = "10.0.0.0/16"
"""Large enough for ten thousand servers with one port each."""


def seeded_id(kind: str, name: str) -> str:
    return str(uuid.uuid5(NAMESPACE, f"{kind}/{name}"))


def flavors() -> list[Flavor]:
    """DevStack's classic flavors, with DevStack's numeric ids."""
    return [
        Flavor(id="1", name="m1.tiny", vcpus=1, ram=512, disk=1),
        Flavor(id="2", name="m1.small", vcpus=1, ram=2048, disk=20),
        Flavor(id="3", name="m1.medium", vcpus=2, ram=4096, disk=40),
        Flavor(id="4", name="m1.large", vcpus=4, ram=8192, disk=80),
        Flavor(id="5", name="m1.xlarge", vcpus=8, ram=16384, disk=160),
    ]


def images() -> list[Image]:
    return [
        Image(
            id=seeded_id("image", "ubuntu-24.04-runner"),
            name="ubuntu-24.04-runner",
            size=2_361_393_152,
            min_disk=10,
            tags=["corral", "runner"],
            properties={"os_distro": "ubuntu", "os_version": "24.04", "hw_disk_bus": "virtio"},
            checksum="5e2b3c4d1a0f9e8d7c6b5a4f3e2d1c0b",
            os_hash_value="9" * 128,
            created_at=SEEDED_AT,
        ),
        Image(
            id=seeded_id("image", "cirros"),
            name="cirros",
            size=21_430_272,
            properties={"os_distro": "cirros"},
            checksum="c8fc807773e5354afe61636071771906",
            os_hash_value="1" * 128,
            created_at=SEEDED_AT,
        ),
    ]


def networks() -> tuple[list[Network], list[Subnet]]:
    subnet = Subnet(
        id=seeded_id("subnet", "private-subnet"),
        name="private-subnet",
        network_id=seeded_id("network", "private"),
        cidr=PRIVATE_CIDR,
        gateway_ip="10.0.0.1",
        allocation_start="10.0.0.2",
        allocation_end="10.0.255.254",
        created_at=SEEDED_AT,
    )
    network = Network(id=subnet.network_id, name="private", subnet_ids=[subnet.id], created_at=SEEDED_AT)
    return [network], [subnet]


def _egress_rules(group_id: str) -> list[dict[str, object]]:
    return [
        {
            "id": seeded_id("rule", f"{group_id}/egress/{ethertype}"),
            "direction": "egress",
            "ethertype": ethertype,
            "protocol": None,
            "port_range_min": None,
            "port_range_max": None,
            "remote_ip_prefix": None,
            "remote_group_id": None,
        }
        for ethertype in ("IPv4", "IPv6")
    ]


def security_groups() -> list[SecurityGroup]:
    default_id = seeded_id("security-group", "default")
    runners_id = seeded_id("security-group", "runners")
    default_ingress = [
        {
            "id": seeded_id("rule", f"{default_id}/ingress/{ethertype}"),
            "direction": "ingress",
            "ethertype": ethertype,
            "protocol": None,
            "port_range_min": None,
            "port_range_max": None,
            "remote_ip_prefix": None,
            "remote_group_id": default_id,
        }
        for ethertype in ("IPv4", "IPv6")
    ]
    ssh = {
        "id": seeded_id("rule", f"{runners_id}/ingress/ssh"),
        "direction": "ingress",
        "ethertype": "IPv4",
        "protocol": "tcp",
        "port_range_min": 22,
        "port_range_max": 22,
        "remote_ip_prefix": "0.0.0.0/0",
        "remote_group_id": None,
    }
    return [
        SecurityGroup(
            id=default_id,
            name="default",
            description="Default security group",
            rules=[*_egress_rules(default_id), *default_ingress],
            created_at=SEEDED_AT,
        ),
        SecurityGroup(
            id=runners_id,
            name="runners",
            description="GitHub Actions runners",
            rules=[*_egress_rules(runners_id), ssh],
            created_at=SEEDED_AT,
        ),
    ]


VOLUME_TYPES = {
    seeded_id("volume-type", "__DEFAULT__"): ("__DEFAULT__", "Default Volume Type"),
    seeded_id("volume-type", "ssd"): ("ssd", "Solid state volumes"),
}
DEFAULT_VOLUME_TYPE = "__DEFAULT__"

DEFAULT_QUOTA = {"instances": -1, "cores": -1, "ram": -1, "volumes": -1, "gigabytes": -1, "ports": -1}
"""Unlimited unless a test or benchmark sets limits: the sandbox must not be what caps a load test."""
