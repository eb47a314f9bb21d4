"""The project's quota as headroom, and what one pool's server costs of it.

Nova's and Cinder's `GET /limits` give each limit beside its usage (`maxTotalCores`, `totalCoresUsed`...);
Neutron's `GET /v2.0/quotas/{project}/details` gives each as `{limit, used, reserved}`; a limit of -1 is
unlimited. A server costs one instance, its flavor's cores and RAM, one port per network (Nova's `auto`
network makes one too), and, when it boots from a volume or has extra ones, that many volumes and their
gigabytes. How many more of a pool's servers fit is
the least over the resources it uses; the resources at that least are what limits it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from typing import Any

UNLIMITED = -1


@dataclass(frozen=True)
class Headroom:
    """What the project may still create (None: unlimited, or not asked)."""

    instances: int | None = None
    cores: int | None = None
    ram_mb: int | None = None
    volumes: int | None = None
    gigabytes: int | None = None
    ports: int | None = None

    @classmethod
    def of(
        cls, compute: dict[str, Any], volume: dict[str, Any] | None = None, ports: dict[str, Any] | None = None
    ) -> Headroom:
        """From the `absolute` maps of Nova's and (when asked) Cinder's `GET /limits`, and Neutron's port quota
        details (`{limit, used, reserved}`) when it could be read."""
        volume = volume or {}
        return cls(
            instances=left(compute, "maxTotalInstances", "totalInstancesUsed"),
            cores=left(compute, "maxTotalCores", "totalCoresUsed"),
            ram_mb=left(compute, "maxTotalRAMSize", "totalRAMUsed"),
            volumes=left(volume, "maxTotalVolumes", "totalVolumesUsed"),
            gigabytes=left(volume, "maxTotalVolumeGigabytes", "totalGigabytesUsed"),
            ports=ports_left(ports),
        )

    def less(self, costs: Iterable[tuple[ServerCost, int]]) -> Headroom:
        """What is left once `count` servers of each `cost` are taken (never below zero). Each field is summed
        over `costs`: a caller holding many servers of one cost passes them as one entry with their count."""
        taken = list(costs)
        left = {}
        for name in HEADROOM_FIELDS:
            value = getattr(self, name)
            if value is not None:
                value = max(0, value - sum(getattr(cost, name) * count for cost, count in taken))
            left[name] = value
        return Headroom(**left)

    def limited(self) -> dict[str, int]:
        """The resources that have a limit, by name, with what is left of each."""
        return {name: value for name in HEADROOM_FIELDS if (value := getattr(self, name)) is not None}


HEADROOM_FIELDS = tuple(f.name for f in fields(Headroom))


@dataclass(frozen=True)
class ServerCost:
    """What one of a pool's servers takes from the quota."""

    cores: int
    ram_mb: int
    volumes: int = 0
    gigabytes: int = 0
    instances: int = 1
    ports: int = 1

    @classmethod
    def of(cls, published: dict[str, Any] | None) -> ServerCost | None:
        """From its fields as a pool's holder published them (None: not published, or not a cost)."""
        if not published:
            return None
        try:
            return cls(**{f.name: int(published[f.name]) for f in fields(cls) if f.name in published})
        except (TypeError, ValueError):
            return None


def left(limits: dict[str, Any], maximum: str, used: str) -> int | None:
    limit = limits.get(maximum)
    if not isinstance(limit, int) or limit == UNLIMITED:
        return None
    return max(0, limit - int(limits.get(used) or 0))


def ports_left(details: dict[str, Any] | None) -> int | None:
    """Ports the project may still create, from Neutron's `{limit, used, reserved}` (None: unlimited or
    unknown)."""
    if not details:
        return None
    limit = details.get("limit")
    if not isinstance(limit, int) or limit == UNLIMITED:
        return None
    return max(0, limit - int(details.get("used") or 0) - int(details.get("reserved") or 0))


def ports_per_server(networks: Sequence[str]) -> int:
    """One port per network; none given is Nova's `auto`, which makes one."""
    return max(len(networks), 1)


def fit(left: int | None, each: int) -> int | None:
    """How many of something needing `each` fit in `left` (None: no limit on this resource)."""
    if left is None or each <= 0:
        return None
    return left // each


def servers_that_fit(headroom: Headroom, cost: ServerCost) -> tuple[int | None, list[str]]:
    """How many more such servers fit (None: no limit applies), and the resources that limit it."""
    fits = {
        name: count
        for name, value in headroom.limited().items()
        if (count := fit(value, getattr(cost, name))) is not None
    }
    if not fits:
        return None, []
    least = min(fits.values())
    return least, sorted(name for name, count in fits.items() if count == least)
