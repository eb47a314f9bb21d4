"""The cloud session reads the proxy and CA bundle environment once per address (`corral.cloud.environment_once`):
what requests would have used, for a fraction of the reads."""

from __future__ import annotations

from typing import Any

import pytest
import requests

from corral.cloud.environment_once import read_environment_once
from tests.environment_reads import environment_reads

NOVA = "https://nova.cloud.example:8774/v2.1/servers"
KEYSTONE = "https://keystone.cloud.example:5000/v3/auth/tokens"


@pytest.fixture
def environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "keystone.cloud.example")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/etc/corral/private-ca.pem")


def settings(session: requests.Session, url: str, proxies: dict[str, str] | None = None) -> dict[str, Any]:
    return session.merge_environment_settings(url, proxies or {}, None, True, None)


@pytest.mark.usefixtures("environment")
def test_proxies_no_proxy_and_the_ca_bundle_are_what_requests_itself_would_use() -> None:
    plain, once = requests.Session(), requests.Session()
    read_environment_once(once)
    for url in (NOVA, KEYSTONE, NOVA, KEYSTONE):
        assert settings(once, url) == settings(plain, url)
    assert settings(once, NOVA) == {
        "proxies": {"https": "http://proxy.example:3128", "no": "keystone.cloud.example"},
        "stream": False,
        "verify": "/etc/corral/private-ca.pem",
        "cert": None,
    }
    assert settings(once, KEYSTONE)["proxies"] == {}  # NO_PROXY names it
    own = {"https": "http://other.example:8080"}
    assert settings(once, NOVA, dict(own)) == settings(plain, NOVA, dict(own))
    assert settings(once, NOVA, dict(own))["proxies"]["https"] == "http://other.example:8080"


@pytest.mark.usefixtures("environment")
def test_a_hundred_requests_to_two_addresses_read_the_environment_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    reads = environment_reads(monkeypatch)
    session = requests.Session()
    read_environment_once(session)
    for n in range(50):
        settings(session, f"{NOVA}/{n}")
        settings(session, f"{KEYSTONE}?n={n}")
    assert reads == [f"{NOVA}/0", f"{KEYSTONE}?n=0"]


@pytest.mark.usefixtures("environment")
def test_what_a_request_does_to_its_proxies_does_not_reach_the_next() -> None:
    session = requests.Session()
    read_environment_once(session)
    settings(session, NOVA)["proxies"]["https"] = "http://changed.example:1"
    assert settings(session, NOVA)["proxies"]["https"] == "http://proxy.example:3128"
