"""The servers corral owns in one cloud, kept between looks and brought up to date with Nova's `changes-since`.

A look used to list every server of the installation in full (`GET /servers/detail`, every page): at 10,000
runners, 10 MB of JSON parsed and 10,000 objects built on every look, most of them unchanged since the last,
and as much work for Nova's database. Nova's answer to that is `changes-since`: only the servers whose
`updated_at` is at or after a time, and, for as long as Nova keeps their rows, those deleted since, with the
status `DELETED` (https://docs.openstack.org/api-guide/compute/polling_changes.html). So a look lists in full
once, then only what changed, and lists in full again every `FULL_LISTING_EVERY_S`: Nova "is not required to
keep track of deleted resources indefinitely" (an operator's `nova-manage db archive_deleted_rows` drops
them), and a deletion missed that way is caught there.

`changes-since` is read off Nova's own clock: the newest `updated` Nova reported, less `OVERLAP_S`, so that a
row written by a host whose clock is a little behind, or committed just after the listing read, is listed
again rather than missed (a server listed twice is only replaced by itself). That overlap is only needed
until it has passed: a listing that began `OVERLAP_S` after the newest change was first seen has every row
stamped before it, so from then on, while nothing newer comes, the query starts at that change itself. Without
this a quiet cloud after a burst listed the burst's last ten seconds on every look, for as long as it stayed
quiet (2,300 of 10,000 servers in `bench/reconcile.py`).

This module decides and keeps; the provider does the HTTP (`OpenStackProvider.list_servers`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

from corral.cloud.provider import CloudServer

FULL_LISTING_EVERY_S = 600.0
"""How often a look lists every server all the same: a deletion Nova no longer reports is noticed then."""
OVERLAP_S = 10.0
"""How far before the newest `updated` already seen the next `changes-since` starts (clock skew between
Nova's hosts, a row committed after the listing that read its neighbours)."""
DELETED = "DELETED"

Owned = Callable[[dict[str, Any]], CloudServer | None]
"""A listing entry as one of this installation's servers, or None when it is not one."""


def nova_time(value: object) -> datetime | None:
    """A time as Nova prints it (`2026-12-06T05:01:11Z`); None when there is none. A malformed one raises
    ValueError."""
    if not isinstance(value, str) or not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _updated(entry: dict[str, Any]) -> datetime | None:
    """An entry's `updated`, or None when it has none Nova's clock can be read from."""
    try:
        return nova_time(entry.get("updated"))
    except ValueError:
        return None


class ServerListing:
    """This installation's servers in one cloud as of the last listing, and what the next one asks for."""

    def __init__(
        self, *, clock: Callable[[], float] = time.monotonic, full_every_s: float = FULL_LISTING_EVERY_S
    ) -> None:
        self._clock = clock
        self._full_every_s = full_every_s
        self._servers: dict[str, CloudServer] = {}
        self._newest: datetime | None = None
        """The newest `updated` Nova reported (None: no listing yet, or none that said)."""
        self._newest_seen_at = 0.0
        """When `_newest` was first seen (the `clock`'s time)."""
        self._settled: datetime | None = None
        """Every server Nova stamped before this was listed: the overlap before it is not asked for again."""
        self._settling: datetime | None = None
        """What `_settled` becomes once the listing under way, begun `OVERLAP_S` after its newest change was
        first seen, is applied."""
        self._full_at: float | None = None
        """When the last full listing was taken (the `clock`'s time)."""
        self._asked_to_delete: set[str] = set()
        """Listed servers this corral asked Nova to delete, until a listing no longer has them."""
        self.incremental = True
        """False once the cloud refused `changes-since`: every listing is a full one from then on."""

    def changes_since(self) -> str | None:
        """The `changes-since` the next listing asks for, in Nova's format; None: list everything."""
        if not self.incremental or self._full_at is None or self._newest is None:
            return None
        self._settling = None
        if self._clock() - self._full_at >= self._full_every_s:
            return None
        since = self._newest - timedelta(seconds=OVERLAP_S)
        if self._settled is not None and self._settled > since:
            since = self._settled
        if self._clock() - self._newest_seen_at >= OVERLAP_S:
            self._settling = self._newest
        return since.strftime("%Y-%m-%dT%H:%M:%SZ")

    def replace_all(self, entries: Iterable[dict[str, Any]], owned: Owned) -> list[CloudServer]:
        """A full listing: exactly these servers (of the installation's) exist."""
        self._servers = {}
        self._newest = None
        self._settled = self._settling = None
        self._full_at = self._clock()
        return self._take(entries, owned)

    def apply_changes(self, entries: Iterable[dict[str, Any]], owned: Owned) -> list[CloudServer]:
        """A `changes-since` listing: these servers changed (a `DELETED` one is gone); the rest are as they
        were."""
        servers = self._take(entries, owned)
        if self._settling is not None:
            self._settled = self._settling
            self._settling = None
        return servers

    def deleted(self, server_id: str) -> None:
        """This corral asked Nova to delete the server. Nova's `changes-since` reports it `DELETED` once gone
        only when the server got as far as a cell's database: one deleted while still a build request (before
        it was scheduled) leaves no row to report. So a look whose changes do not mention it asks after it
        (`unmentioned`)."""
        if server_id in self._servers:
            self._asked_to_delete.add(server_id)

    def unmentioned(self, entries: Iterable[dict[str, Any]]) -> set[str]:
        """The servers this corral deleted that are still listed and that these changes did not mention."""
        mentioned = {entry.get("id") for entry in entries}
        # Only the few asked about are looked up: not a copy of every listed id (10,000 at scale) each look.
        self._asked_to_delete = {server_id for server_id in self._asked_to_delete if server_id in self._servers}
        return self._asked_to_delete - mentioned

    def forget(self, server_id: str) -> None:
        """Nova says the server does not exist (404)."""
        self._servers.pop(server_id, None)
        self._asked_to_delete.discard(server_id)

    def add(self, server: CloudServer) -> None:
        """A server this corral just created: known before any listing reports it (Nova may not have
        stamped its `updated_at` yet)."""
        self._servers.setdefault(server.id, server)

    @property
    def servers(self) -> list[CloudServer]:
        return list(self._servers.values())

    def _take(self, entries: Iterable[dict[str, Any]], owned: Owned) -> list[CloudServer]:
        for entry in entries:
            server_id = entry.get("id")
            if not isinstance(server_id, str):
                continue
            updated = _updated(entry)
            if updated is not None and (self._newest is None or updated > self._newest):
                self._newest = updated
                self._newest_seen_at = self._clock()
            mine = owned(entry) if entry.get("status") != DELETED else None
            if mine is None:
                self._servers.pop(server_id, None)
            elif self._servers.get(server_id) != mine:
                # An unchanged server keeps its object: `CloudSet` then keeps its copy named with the cloud.
                self._servers[server_id] = mine
        return self.servers
