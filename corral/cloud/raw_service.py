"""An openstacksdk service proxy for corral's raw calls, its endpoint looked up once.

corral sends its hot calls (create, delete, show, the listings, the limits) as plain requests through
openstacksdk's authenticated adapter, not through its resources (`corral.cloud.openstack`). keystoneauth
still works the endpoint out of the service catalog on every one of those requests: it normalises the
catalog (deep copies included) and the version numbers it asks for: 0.16 to 0.17 ms of CPU of a 0.6 to
0.9 ms `GET` with a microversion against the sandbox (a fifth of the request), for an answer that does not
change. Here the adapter's own `get_endpoint()` is asked once, and each raw call
passes it as keystoneauth's `endpoint_override`; the token, the microversion header and the retries stay
the adapter's. openstacksdk's own methods (name lookups, quotas) keep their usual path.

The endpoint is kept for the provider's life: a catalog that moves a service to another address is picked up
when the cloud's provider is made again (a restart, or a reload that changes the cloud).
"""

from __future__ import annotations

from typing import Any


class RawService:
    """`get`, `post` and `delete` on one service proxy, at the endpoint its adapter chose the first time."""

    def __init__(self, proxy: Any) -> None:
        self._proxy = proxy
        self._override: dict[str, str] | None = None

    def _endpoint(self) -> dict[str, str]:
        if self._override is None:
            if self._proxy.endpoint_override:
                self._override = {}  # set in clouds.yaml: the adapter looks nothing up already
            else:
                endpoint = self._proxy.get_endpoint()
                # keystoneauth formats an override with the project's ids (`%(project_id)s`): a resolved URL
                # that still holds a `%` (an escaped character) is not pinned, rather than garbled.
                self._override = {"endpoint_override": endpoint} if endpoint and "%" not in endpoint else {}
        return self._override

    def get(self, path: str, **kwargs: Any) -> Any:
        return self._proxy.get(path, **self._endpoint(), **kwargs)

    def post(self, path: str, **kwargs: Any) -> Any:
        return self._proxy.post(path, **self._endpoint(), **kwargs)

    def delete(self, path: str, **kwargs: Any) -> Any:
        return self._proxy.delete(path, **self._endpoint(), **kwargs)
