"""Counting requests' reads of the proxy environment, for the tests of `corral.cloud.environment_once`."""

from __future__ import annotations

import pytest
import requests.sessions
import requests.utils


def environment_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The list every URL a requests session reads the proxy environment for is appended to, from now on
    (requests' own `get_environ_proxies`, counted and then run)."""
    reads: list[str] = []
    original = requests.utils.get_environ_proxies

    def counted(url: str, no_proxy: str | None = None) -> dict[str, str]:
        reads.append(url)
        return original(url, no_proxy=no_proxy)

    monkeypatch.setattr(requests.sessions, "get_environ_proxies", counted)
    return reads
