"""Faults on the wire between corral and Nova, injected by a loopback TCP proxy: a dropped connection or a
503 during a read is retried; when the fault persists (or the API hangs) it surfaces quickly as
`CloudTransientError`; a create whose answer was lost is never sent twice."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import pytest

from corral.cloud.openstack import DEFAULT_RETRIES, OpenStackProvider, ownership_tag, retry_delay_s
from corral.cloud.provider import CloudServer, CloudTransientError
from tests.live.support import LiveCloud
from tests.live.tcp_proxy import Fault, TcpProxy, proxy_to

RETRY_DELAYS_S = [retry_delay_s(attempt) for attempt in range(DEFAULT_RETRIES)]
ATTEMPTS = 1 + DEFAULT_RETRIES
TIMEOUT_S = 10.0  # a busy ministack Nova has taken over 3 s to list (keystoneauth says ConnectTimeout for any timeout)


@dataclass
class Faulty:
    """A provider whose every call to Nova goes through `proxy`."""

    proxy: TcpProxy
    provider: OpenStackProvider


@pytest.fixture(scope="module")
def nova_endpoint(live: LiveCloud) -> Iterator[tuple[TcpProxy, str]]:
    """A proxy in front of Nova (one per module: each test starts with it forwarding and counters at 0)."""
    parts = urlsplit(live.observer.compute.get_endpoint())
    if parts.scheme != "http" or parts.hostname is None:
        pytest.skip("the fault-injecting proxy only fronts a plain-HTTP compute endpoint")
    with proxy_to(parts.hostname, parts.port or 80) as proxy:
        yield proxy, f"http://127.0.0.1:{proxy.port}{parts.path}"


@pytest.fixture(autouse=True)
def healthy_wire(nova_endpoint: tuple[TcpProxy, str]) -> None:
    proxy, _ = nova_endpoint
    proxy.clear()
    proxy.faulted = 0


@pytest.fixture(scope="module")
def faulty(live: LiveCloud, nova_endpoint: tuple[TcpProxy, str]) -> Iterator[Faulty]:
    proxy, endpoint = nova_endpoint
    provider = live.new_provider(f"{live.installation}-t", compute_endpoint=endpoint, timeout_s=TIMEOUT_S)
    yield Faulty(proxy, provider)
    proxy.clear()
    leftovers = {server.id for server in provider.list_servers()}
    for server_id in leftovers:
        provider.delete_server(server_id)
    live.wait_gone(leftovers)
    provider.close()


@pytest.fixture(scope="module")
def one_server(live: LiveCloud, faulty: Faulty) -> CloudServer:
    """A server of the faulty provider's installation, created beside the proxy with the default timeout: a
    busy Nova can take longer than TIMEOUT_S to answer a create (seen: 4.8 s), and this is only the setup."""
    steady = live.new_provider(faulty.provider.installation)
    try:
        server = steady.create_server(live.spec("steady", installation=faulty.provider.installation))
    finally:
        steady.close()
    # The faulty provider's first call authenticates and discovers Nova's versions through the proxy: done
    # here, on a healthy wire, so that each test's fault meets the call it is about.
    assert [listed.id for listed in faulty.provider.list_servers()] == [server.id]
    return server


@pytest.mark.parametrize("fault", ["drop", "503"])
def test_one_failed_read_is_retried_and_the_listing_still_answers(
    faulty: Faulty, one_server: CloudServer, fault: Fault
) -> None:
    faulty.proxy.inject(fault, connections=1)
    listed = faulty.provider.list_servers()
    assert [server.id for server in listed] == [one_server.id]
    assert faulty.proxy.faulted == 1


@pytest.mark.parametrize(("fault", "reason"), [("drop", "ConnectFailure"), ("503", "HTTP 503")])
def test_a_persistent_fault_surfaces_as_transient_after_a_few_quick_attempts(
    faulty: Faulty, one_server: CloudServer, fault: Fault, reason: str
) -> None:
    faulty.proxy.inject(fault)
    started = time.monotonic()
    with pytest.raises(CloudTransientError) as failed:
        faulty.provider.list_servers()
    assert time.monotonic() - started < sum(RETRY_DELAYS_S) + 2.0, "a dead API must not stall a reconcile pass"
    assert "list servers" in str(failed.value) and reason in str(failed.value)
    assert faulty.proxy.faulted == ATTEMPTS
    faulty.proxy.clear()
    assert [server.id for server in faulty.provider.list_servers()] == [one_server.id], "and it recovers"


def test_a_hung_api_times_out_as_transient_instead_of_holding_a_worker(faulty: Faulty, one_server: CloudServer) -> None:
    faulty.proxy.inject("hang")
    started = time.monotonic()
    with pytest.raises(CloudTransientError):
        faulty.provider.list_servers()
    elapsed = time.monotonic() - started
    assert TIMEOUT_S <= elapsed < TIMEOUT_S + 2.0, f"took {elapsed:.1f}s with a {TIMEOUT_S}s timeout"
    assert faulty.proxy.faulted == 1, "a timed-out call is not repeated: that would multiply the stall"


def test_a_create_whose_connection_dropped_is_not_sent_again(
    live: LiveCloud, faulty: Faulty, one_server: CloudServer
) -> None:
    spec = live.spec("lost-create", installation=faulty.provider.installation)
    assert faulty.provider.check_pool(spec) == []  # names and versions known: the fault hits the POST itself
    faulty.proxy.inject("drop", connections=1)
    with pytest.raises(CloudTransientError) as failed:
        faulty.provider.create_server(spec)
    assert "create server" in str(failed.value)
    assert faulty.proxy.faulted == 1
    listed = [server.id for server in faulty.provider.list_servers()]
    assert listed == [one_server.id], "a second POST would have made a server nobody asked for twice"


def test_a_delete_is_retried_through_a_503(live: LiveCloud, faulty: Faulty) -> None:
    doomed = faulty.provider.create_server(live.spec("doomed", installation=faulty.provider.installation))
    faulty.proxy.inject("503", connections=1)
    faulty.provider.delete_server(doomed.id)
    live.wait_gone({doomed.id})
    assert faulty.proxy.faulted == 1


def test_nova_unreachable_at_startup_does_not_leave_servers_untagged(
    live: LiveCloud, nova_endpoint: tuple[TcpProxy, str], discard: list[str]
) -> None:
    """Were a failed version discovery taken for "no tags", servers made afterwards would lack the tag,
    and a tag-filtered listing (after a restart) would never see them again: leaked for good."""
    proxy, endpoint = nova_endpoint
    proxy.inject("drop")
    provider = live.new_provider(f"{live.installation}-s", compute_endpoint=endpoint, timeout_s=TIMEOUT_S)
    try:
        with pytest.raises(CloudTransientError):
            provider.list_servers()
        proxy.clear()
        created = provider.create_server(live.spec("after-outage", installation=provider.installation))
        discard.append(created.id)
        shown = live.server(created.id)
        assert shown is not None
        if provider.supports_tags:
            assert shown.tags == [ownership_tag(provider.installation)]
        restarted = live.new_provider(provider.installation)
        try:
            assert [server.id for server in restarted.list_servers()] == [created.id]
        finally:
            restarted.close()
    finally:
        provider.close()
