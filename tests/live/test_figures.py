"""The figures a user sizing a cloud account for corral wants: how long a runner's server takes to come
and go, and how many API calls it costs (rate limits on public clouds are per call)."""

from __future__ import annotations

import time

from corral.cloud.openstack import OpenStackProvider
from tests.live.support import ApiCounter, Figures, LiveCloud

SERVERS = 3


def test_a_runners_server_costs_one_create_and_one_delete_call(live: LiveCloud, figures: Figures) -> None:
    provider: OpenStackProvider = live.new_provider(f"{live.installation}-f")
    counter = ApiCounter.attach(provider.connection)
    try:
        with counter.counting() as checking:
            assert provider.check_pool(live.spec("check", installation=provider.installation)) == []
        figures.note(
            "API calls to check a pool on a fresh connection (auth, discovery, name lookups)", str(len(checking))
        )
        per_server: list[list[str]] = []
        for index in range(SERVERS):
            spec = live.spec(f"figure-{index}", installation=provider.installation)
            started = time.monotonic()
            with counter.counting() as creating:
                created = provider.create_server(spec)
            figures.record("seconds for the create request itself", time.monotonic() - started)
            live.wait_status(created.id, "ACTIVE")
            figures.record("seconds from create request to ACTIVE (image boot)", time.monotonic() - started)
            started = time.monotonic()
            with counter.counting() as deleting:
                provider.delete_server(created.id)
            live.wait_gone({created.id})
            figures.record("seconds from delete request to gone from the listing", time.monotonic() - started)
            per_server.append([request.route for request in creating + deleting])
        with counter.counting() as listing:
            provider.list_servers()
    finally:
        provider.close()
    figures.note("API calls per created-and-deleted server (names cached)", f"{len(per_server[0])} {per_server[0]}")
    figures.note("API calls per list_servers pass, whatever the number of servers", str(len(listing)))
    assert all(len(calls) == 2 for calls in per_server), per_server
    assert len(listing) == 1
