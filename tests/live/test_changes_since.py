"""A look after the first asks a real Nova only what changed (`changes-since`), and still sees every server of
the installation, and a server deleted behind corral's back leaves the listing at the next look.

Measured on Nova first (the sandbox imitates it, tests/sandbox/test_openstack_servers.py): a deleted server
comes back to `changes-since` as `DELETED`, its `updated` stamped with the delete, its metadata `{}` and tags
`[]`, so a tag-filtered query never shows it and only its id says it was corral's."""

from __future__ import annotations

from corral.cloud.openstack import OpenStackProvider
from corral.metrics import REGISTRY
from tests.live.support import LiveCloud


def listings(kind: str) -> float:
    return REGISTRY.get_sample_value("corral_cloud_server_listings_total", {"kind": kind}) or 0.0


def test_changes_since_keeps_the_listing_whole_and_drops_a_server_deleted_behind_corrals_back(live: LiveCloud) -> None:
    provider = live.new_provider()  # its own: the session's has listed before, and this one's first is full
    try:
        look_and_delete(live, provider)
    finally:
        provider.close()


def look_and_delete(live: LiveCloud, provider: OpenStackProvider) -> None:
    kept = provider.create_server(live.spec("kept"))
    doomed = provider.create_server(live.spec("doomed-behind-its-back"))
    live.wait_status(kept.id, "ACTIVE")
    live.wait_status(doomed.id, "ACTIVE")
    full, changes = listings("full"), listings("changes")
    assert {kept.id, doomed.id} <= {server.id for server in provider.list_servers()}
    live.observer.compute.delete_server(doomed.id)
    live.wait_gone({doomed.id})
    listed = {server.id: server for server in provider.list_servers()}
    assert kept.id in listed and listed[kept.id].status == "ACTIVE"
    assert doomed.id not in listed
    assert (listings("full"), listings("changes")) == (full + 1, changes + 1)
    provider.delete_server(kept.id)
    live.wait_gone({kept.id})
    assert kept.id not in {server.id for server in provider.list_servers()}
    assert listings("full") == full + 1, "every look after the first asked only what changed"
