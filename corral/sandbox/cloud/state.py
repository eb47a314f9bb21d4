"""STUB (to be replaced): the cloud's state. See the interface in the docstrings."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from corral.sandbox.world import World


class CloudState:
    """Projects, flavors, images, networks, security groups, keypairs, servers, volumes and quotas.

    Interface the world relies on:
    - `power_off(server_id)`: the guest shut down (ACTIVE -> SHUTOFF); unknown ids are ignored.
    - `snapshot()`: counts for `/_sandbox/stats` (servers by status, created, deleted, volumes...).
    - `set_quota(**limits)`: instances, cores, ram, volumes, gigabytes for the sandbox project.
    It calls `world.server_active(server_id, user_data)` when a server reaches ACTIVE and
    `world.server_gone(server_id)` when one is deleted or goes to ERROR.
    """

    def __init__(self, world: World) -> None:
        self.world = world

    def power_off(self, server_id: str) -> None:
        raise NotImplementedError

    def set_quota(self, **limits: int) -> None:
        raise NotImplementedError

    def snapshot(self) -> dict[str, Any]:
        return {}
