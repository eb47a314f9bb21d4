"""`corral.cloud.server_listing`: a look lists every server once, then only what Nova says changed, and in full
again every ten minutes; a server Nova reports `DELETED` leaves the picture, whoever deleted it."""

from __future__ import annotations

from typing import Any

from corral.cloud.provider import CloudServer
from corral.cloud.server_listing import FULL_LISTING_EVERY_S, ServerListing


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def entry(server_id: str, updated: str, status: str = "ACTIVE", owner: str = "corral") -> dict[str, Any]:
    """A `GET /servers/detail` entry as Nova gives it (a deleted one keeps no metadata)."""
    metadata = {} if status == "DELETED" else {"corral-installation": owner}
    return {"id": server_id, "status": status, "updated": updated, "metadata": metadata}


def owned(raw: dict[str, Any]) -> CloudServer | None:
    if raw["metadata"].get("corral-installation") != "corral":
        return None
    return CloudServer(raw["id"], f"runner-{raw['id']}", raw["status"], "corral", "small", raw["id"])


def ids(servers: list[CloudServer]) -> list[tuple[str, str]]:
    return sorted((server.id, server.status) for server in servers)


def test_the_first_listing_is_full_and_the_next_asks_nova_for_what_changed_since_ten_seconds_before_its_newest() -> (
    None
):
    clock = Clock()
    listing = ServerListing(clock=clock)
    assert listing.changes_since() is None
    servers = listing.replace_all(
        [
            entry("a", "2026-12-06T05:00:00Z"),
            entry("b", "2026-12-06T05:01:30Z"),
            entry("x", "2026-12-06T05:02:00Z", owner="other"),
        ],
        owned,
    )
    assert ids(servers) == [("a", "ACTIVE"), ("b", "ACTIVE")]
    # Another installation's server still counts for Nova's clock: it is the newest `updated` Nova said.
    assert listing.changes_since() == "2026-12-06T05:01:50Z"


def test_changes_replace_what_changed_and_keep_the_rest_and_a_deleted_server_leaves() -> None:
    clock = Clock()
    listing = ServerListing(clock=clock)
    listing.replace_all([entry("a", "2026-12-06T05:00:00Z"), entry("b", "2026-12-06T05:00:00Z", "BUILD")], owned)
    clock.now += 30
    servers = listing.apply_changes(
        [
            entry("b", "2026-12-06T05:00:40Z"),
            entry("a", "2026-12-06T05:00:41Z", "DELETED"),
            entry("c", "2026-12-06T05:00:45Z", "BUILD"),
        ],
        owned,
    )
    assert ids(servers) == [("b", "ACTIVE"), ("c", "BUILD")]
    assert listing.changes_since() == "2026-12-06T05:00:35Z"
    # Nothing changed: an empty answer leaves every server as it was, and the next query where it was.
    assert ids(listing.apply_changes([], owned)) == [("b", "ACTIVE"), ("c", "BUILD")]
    assert listing.changes_since() == "2026-12-06T05:00:35Z"


def test_a_server_this_corral_created_is_listed_before_nova_reports_it_and_a_listing_then_replaces_it() -> None:
    listing = ServerListing(clock=Clock())
    listing.replace_all([], owned)
    created = CloudServer("n", "runner-n", "BUILD", "corral", "small", "n")
    listing.add(created)
    assert listing.servers == [created]
    listing.add(CloudServer("n", "runner-n", "ERROR", "corral", "small", "n"))  # a listing's word is not overwritten
    assert listing.servers == [created]
    assert ids(listing.apply_changes([entry("n", "2026-12-06T05:00:02Z")], owned)) == [("n", "ACTIVE")]


def test_every_ten_minutes_the_listing_is_full_again_and_forgets_a_deletion_nova_no_longer_reports() -> None:
    """Nova keeps deleted rows only until an operator archives them: a server deleted then is never reported
    `DELETED`, and only the full listing ten minutes on tells it is gone."""
    clock = Clock()
    listing = ServerListing(clock=clock)
    listing.replace_all([entry("a", "2026-12-06T05:00:00Z"), entry("b", "2026-12-06T05:00:00Z")], owned)
    clock.now += FULL_LISTING_EVERY_S - 0.001
    assert listing.changes_since() == "2026-12-06T04:59:50Z"
    clock.now += 0.001
    assert listing.changes_since() is None
    assert ids(listing.replace_all([entry("b", "2026-12-06T05:00:00Z")], owned)) == [("b", "ACTIVE")]
    assert listing.changes_since() == "2026-12-06T04:59:50Z"


def test_a_cloud_that_refused_changes_since_or_gave_no_times_gets_full_listings() -> None:
    clock = Clock()
    listing = ServerListing(clock=clock)
    listing.replace_all([{"id": "a", "status": "ACTIVE", "metadata": {"corral-installation": "corral"}}], owned)
    assert listing.changes_since() is None  # no `updated` to count from
    listing.replace_all([entry("a", "not a time"), entry("b", "2026-12-06T05:00:00Z")], owned)
    assert listing.changes_since() == "2026-12-06T04:59:50Z"
    listing.incremental = False
    assert listing.changes_since() is None


def test_odd_entries_are_skipped_not_fatal() -> None:
    listing = ServerListing(clock=Clock())
    servers = listing.replace_all([{"status": "ACTIVE"}, {"id": 7}, entry("a", "2026-12-06T05:00:00Z")], owned)
    assert ids(servers) == [("a", "ACTIVE")]


def test_a_server_this_corral_deleted_that_changes_do_not_mention_is_asked_after_once_each_look() -> None:
    """Nova reports a deleted server only if it reached a cell: one deleted while a build request leaves no row.
    A look whose changes do not mention a server corral deleted names it (the provider then asks Nova); one
    the changes mention, as `DELETED` or still being deleted, is not asked after."""
    listing = ServerListing(clock=Clock())
    listing.replace_all([entry("a", "2026-12-06T05:00:00Z"), entry("b", "2026-12-06T05:00:00Z")], owned)
    listing.add(CloudServer("c", "runner-c", "BUILD", "corral", "small", "c"))
    for server_id in ("a", "b", "c", "not-listed"):
        listing.deleted(server_id)
    still_deleting = [entry("a", "2026-12-06T05:00:05Z")]
    assert listing.unmentioned(still_deleting) == {"b", "c"}
    listing.forget("c")  # Nova answered 404
    assert ids(listing.apply_changes(still_deleting, owned)) == [("a", "ACTIVE"), ("b", "ACTIVE")]
    gone = [entry("a", "2026-12-06T05:00:09Z", "DELETED"), entry("b", "2026-12-06T05:00:09Z", "DELETED")]
    assert listing.unmentioned(gone) == set()
    assert ids(listing.apply_changes(gone, owned)) == []
    assert listing.unmentioned([]) == set(), "nothing left to ask after"


def test_once_the_overlap_has_passed_a_quiet_cloud_is_asked_only_from_its_newest_change() -> None:
    """The ten seconds before Nova's newest change are asked again in case a row committed late; a listing begun
    ten seconds after that change was first seen has them all, so the looks after it ask from the change
    itself (a quiet cloud after a burst no longer lists the burst's tail on every look)."""
    clock = Clock()
    listing = ServerListing(clock=clock)
    listing.replace_all([entry("a", "2026-12-06T05:00:00Z")], owned)
    clock.now += 9.999
    assert listing.changes_since() == "2026-12-06T04:59:50Z"
    listing.apply_changes([entry("a", "2026-12-06T05:00:00Z")], owned)
    clock.now += 0.001
    assert listing.changes_since() == "2026-12-06T04:59:50Z", "this listing is the one that makes the overlap safe"
    assert listing.changes_since() == "2026-12-06T04:59:50Z", "a listing that failed settles nothing"
    listing.apply_changes([entry("a", "2026-12-06T05:00:00Z")], owned)
    assert listing.changes_since() == "2026-12-06T05:00:00Z"
    # A newer change brings the overlap back, though never before what is already settled.
    listing.apply_changes([entry("b", "2026-12-06T05:00:04Z")], owned)
    assert listing.changes_since() == "2026-12-06T05:00:00Z"
    clock.now += 10
    assert listing.changes_since() == "2026-12-06T05:00:00Z"
    listing.apply_changes([], owned)
    assert listing.changes_since() == "2026-12-06T05:00:04Z"
    # A full listing starts over: its newest change is asked with the overlap until it has passed again.
    listing.replace_all([entry("b", "2026-12-06T05:00:04Z")], owned)
    assert listing.changes_since() == "2026-12-06T04:59:54Z"


def test_a_server_listed_again_unchanged_keeps_its_object() -> None:
    listing = ServerListing(clock=Clock())
    first = listing.replace_all([entry("a", "2026-12-06T05:00:00Z")], owned)
    assert listing.apply_changes([entry("a", "2026-12-06T05:00:00Z")], owned)[0] is first[0]
    assert listing.apply_changes([entry("a", "2026-12-06T05:00:01Z", "SHUTOFF")], owned)[0] is not first[0]
