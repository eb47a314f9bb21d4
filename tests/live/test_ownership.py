"""Ownership is metadata: corral lists its own servers in one call and never sees, let alone touches,
servers of other installations or servers it did not make, even one wearing its tag."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from corral.cloud.openstack import OpenStackProvider, ownership_tag
from corral.cloud.provider import META_INSTALLATION, META_POOL, META_RUNNER
from tests.live.support import ApiCounter, LiveCloud


@pytest.fixture(scope="module")
def neighbours(live: LiveCloud) -> Iterator[dict[str, Any]]:
    """Our server and three that are not ours, all in the same project, created before anything is listed;
    made once for the module (the last test deletes ours), removed at its end."""
    mine = live.new_provider(f"{live.installation}-a")
    theirs = live.new_provider(live.other_installation)
    own = mine.create_server(live.spec("own", installation=mine.installation))
    other = theirs.create_server(live.spec("other", installation=theirs.installation))
    foreign = live.create_foreign("foreign", {"team": "someone-else"})
    impostor_tags = [ownership_tag(mine.installation)] if mine.supports_tags else None
    impostor = live.create_foreign(
        "impostor", {META_POOL: "live", META_RUNNER: "not-ours"}, tags=impostor_tags
    )  # our tag and two of our keys, but no installation: a tag is a filter, not a claim of ownership
    yield {"mine": mine, "theirs": theirs, "own": own, "other": other, "foreign": foreign, "impostor": impostor}
    ids = {own.id, other.id, foreign.id, impostor.id}
    for server_id in ids:
        live.observer.compute.delete_server(server_id, ignore_missing=True)
    live.wait_gone(ids)
    mine.close()
    theirs.close()


def test_listing_returns_exactly_this_installations_servers_in_one_call(
    live: LiveCloud, neighbours: dict[str, Any]
) -> None:
    mine: OpenStackProvider = neighbours["mine"]
    counter = ApiCounter.attach(mine.connection)
    with counter.counting() as made:
        listed = mine.list_servers()
    assert [server.id for server in listed] == [neighbours["own"].id]
    assert listed[0].installation == mine.installation
    assert len(made) == 1, f"expected one compute list call, got {counter.describe(made)}"
    assert made[0].method == "GET"
    assert made[0].path.endswith("/servers/detail")


def test_another_installation_sees_only_its_own(neighbours: dict[str, Any]) -> None:
    theirs: OpenStackProvider = neighbours["theirs"]
    assert [server.id for server in theirs.list_servers()] == [neighbours["other"].id]


def test_deleting_our_server_leaves_the_others_untouched(live: LiveCloud, neighbours: dict[str, Any]) -> None:
    mine: OpenStackProvider = neighbours["mine"]
    before = {name: live.server(neighbours[name].id) for name in ("other", "foreign", "impostor")}
    mine.delete_server(neighbours["own"].id)
    live.wait_gone({neighbours["own"].id})
    assert mine.list_servers() == []
    for name, server in before.items():
        now = live.server(server.id)
        assert now is not None, f"the {name} server disappeared"
        assert now.metadata == server.metadata, f"the {name} server's metadata changed"
    assert META_INSTALLATION not in before["foreign"].metadata
