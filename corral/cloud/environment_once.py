"""requests reads the proxy and CA bundle environment variables on every request; corral's cloud session reads
them once per address.

requests' `Session.merge_environment_settings` runs for every request a session sends: it walks the whole
process environment for `*_proxy` variables, matches the host against `no_proxy` and reads
`REQUESTS_CA_BUNDLE` and `CURL_CA_BUNDLE`: an eighth of the CPU of each create and delete corral sends
through openstacksdk (py-spy over `bench/reactive.py`'s steady phase), for an answer that changes only when
the environment does, and a process's environment does not change under it. So the answer is kept per
scheme and host, computed by requests itself the first time: proxies, `no_proxy` and a private CA bundle
work as before, read when corral first talks to each endpoint (a change takes a restart, as a change to
`clouds.yaml` does). A request given proxies of its own is merged afresh, as requests would.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import requests

MAX_KEPT = 64
"""Answers kept per session: one per endpoint a cloud's catalog names, so a handful; a bound all the same."""


def read_environment_once(session: requests.Session) -> None:
    """Make `session` keep requests' merge of the environment's settings per (scheme, host, options)."""
    merge = session.merge_environment_settings
    kept: dict[tuple[Any, ...], dict[str, Any]] = {}

    def merged(url: str, proxies: Any, stream: Any, verify: Any, cert: Any) -> dict[str, Any]:
        if proxies:
            return merge(url, proxies, stream, verify, cert)
        parts = urlsplit(url)
        key = (parts.scheme, parts.netloc, stream, verify, cert if not isinstance(cert, list) else tuple(cert))
        settings = kept.get(key)
        if settings is None:
            if len(kept) >= MAX_KEPT:
                kept.clear()
            settings = kept[key] = merge(url, {}, stream, verify, cert)
        # Each request gets its own proxies mapping, as requests gives it: nothing it does to one reaches the next.
        return {**settings, "proxies": dict(settings["proxies"])}

    session.merge_environment_settings = merged  # type: ignore[method-assign]
