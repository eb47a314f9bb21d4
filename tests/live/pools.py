"""Pools for the differential suite: every pair of pool options in a handful of pools.

A pool's options (boot volume, extra volumes, config drive, zone, key pair, networks, security groups,
volume types) interact in the one create request they make, and a sandbox bug usually needs two of them
at once (extra volumes without a boot volume was one). Trying every combination would take hundreds of
servers; an all-pairs set covers every pair of option values in about ten.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations, product
from typing import Any

from corral.cloud.provider import META_INSTALLATION, META_POOL, META_RUNNER, ServerSpec
from corral.config import VolumeConfig

POOL_FACTORS: dict[str, tuple[Any, ...]] = {
    "boot volume": (False, True),
    "extra volumes": (0, 1, 2),
    "config drive": (False, True),
    "availability zone": (False, True),
    "key pair": (False, True),
    "networks": (1, 2),
    "security groups": (0, 1, 2),
    "volume types": (False, True),
}
"""Each option and the values a pool can give it; counts are how many of the side's names it uses."""
NO_VOLUMES: dict[str, tuple[Any, ...]] = {"boot volume": (False,), "extra volumes": (0,), "volume types": (False,)}
"""The volume options' only values on a cloud without Cinder."""
NO_OPTIONS = {name: values[0] for name, values in POOL_FACTORS.items()}
"""A pool that sets none of the options: an image, a flavor and one network."""

Row = dict[str, Any]
Pair = frozenset[tuple[str, Any]]


def _pairs(row: Row) -> set[Pair]:
    return {frozenset({(a, row[a]), (b, row[b])}) for a, b in combinations(row, 2)}


def all_pairs(factors: dict[str, tuple[Any, ...]]) -> list[Row]:
    """Rows in which every pair of values of every two factors appears at least once.

    Greedy and deterministic: each row is the full combination that covers the most pairs still uncovered
    (the first such in `product` order), until none is left.
    """
    candidates = [dict(zip(factors, values, strict=True)) for values in product(*factors.values())]
    uncovered = set().union(*(_pairs(row) for row in candidates))
    rows: list[Row] = []
    while uncovered:
        best = max(candidates, key=lambda row: len(_pairs(row) & uncovered))
        rows.append(best)
        uncovered -= _pairs(best)
    return rows


def describe(row: Row) -> str:
    """A short name for a pool: the options it sets."""
    parts = []
    if row["boot volume"]:
        parts.append("boot volume")
    if row["extra volumes"]:
        parts.append(f"{row['extra volumes']} extra volume{'s' if row['extra volumes'] > 1 else ''}")
    parts += [name for name in ("config drive", "availability zone", "key pair") if row[name]]
    if row["networks"] > 1:
        parts.append(f"{row['networks']} networks")
    if row["security groups"]:
        parts.append(f"{row['security groups']} security group{'s' if row['security groups'] > 1 else ''}")
    if row["volume types"]:
        parts.append("volume types")
    return ", ".join(parts) or "image only"


@dataclass(frozen=True)
class PoolNames:
    """What a pool names on one cloud. The second network and group, the key pair and the volume type are
    made for the run; `placeholders` says how each compares between two clouds."""

    image: str
    flavor: str
    network: str
    """As the pool names it: the sandbox's by name, the live cloud's by id (its name may be another project's)."""
    network_name: str
    """What Nova keys a server's addresses by."""
    second_network: str
    second_group: str
    key_name: str
    availability_zone: str
    volume_type: str
    """Not the cloud's default type where the account may create one, so the type is seen to arrive."""

    @property
    def placeholders(self) -> dict[str, str]:
        return {
            self.network_name: "{network}",
            self.second_network: "{second network}",
            self.second_group: "{second group}",
            self.key_name: "{key pair}",
            self.volume_type: "{volume type}",
        }

    def spec(self, name: str, row: Row, metadata: dict[str, str]) -> ServerSpec:
        """The server a pool with `row`'s options asks for."""
        volume_type = self.volume_type if row["volume types"] else None
        extra = tuple(
            VolumeConfig(name=f"disk{size}", size_gb=size, type=volume_type)
            for size in range(1, row["extra volumes"] + 1)
        )
        return ServerSpec(
            name=name,
            image=self.image,
            flavor=self.flavor,
            networks=(self.network, self.second_network)[: row["networks"]],
            security_groups=("default", self.second_group)[: row["security groups"]],
            key_name=self.key_name if row["key pair"] else None,
            availability_zone=self.availability_zone if row["availability zone"] else None,
            config_drive=row["config drive"],
            boot_volume_gb=1 if row["boot volume"] else None,
            boot_volume_type=volume_type if row["boot volume"] else None,
            volumes=extra,
            metadata=metadata,
            user_data="#cloud-config\n{}\n",
        )


def volume_count(row: Row) -> int:
    return int(row["boot volume"]) + int(row["extra volumes"])


def pool_metadata(installation: str, runner: str, marker: dict[str, str]) -> dict[str, str]:
    return {META_INSTALLATION: installation, META_POOL: "diff", META_RUNNER: runner, **marker}
