"""Microversion negotiation as Nova and Cinder do it.

A client asks with `OpenStack-API-Version: compute 2.47` (Nova also reads the legacy
`X-OpenStack-Nova-API-Version: 2.47`); no header means the minimum. The chosen version comes back in
the same headers so clients (and openstacksdk's negotiation) can see what they got.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fastapi import Request

from corral_sandbox.cloud.errors import ApiError

Version = tuple[int, int]

_VERSION_RE = re.compile(r"^([1-9]\d*)\.([1-9]\d*|0)$")


@dataclass(frozen=True)
class Microversions:
    service: str
    """The name in the header (`compute`, `volume`)."""
    minimum: Version
    maximum: Version
    legacy_header: str | None = None

    def text(self, version: Version) -> str:
        return f"{version[0]}.{version[1]}"

    def negotiate(self, request: Request) -> Version:
        """The version a request asked for; raises the 400 or 406 the service would send."""
        wanted = self._requested(request)
        if wanted is None:
            return self.minimum
        if wanted == "latest":
            return self.maximum
        match = _VERSION_RE.match(wanted)
        if match is None:
            raise ApiError(
                400,
                f"API Version String {wanted} is of invalid format. Must be of format MajorNum.MinorNum.",
            )
        version = (int(match.group(1)), int(match.group(2)))
        if not self.minimum <= version <= self.maximum:
            raise ApiError(
                406,
                f"Version {wanted} is not supported by the API. Minimum is {self.text(self.minimum)} "
                f"and maximum is {self.text(self.maximum)}.",
            )
        return version

    def _requested(self, request: Request) -> str | None:
        header = request.headers.get("openstack-api-version")
        if header:
            for item in header.split(","):
                parts = item.strip().split()
                if len(parts) == 2 and parts[0].lower() == self.service:
                    return parts[1].lower()
        if self.legacy_header:
            legacy = request.headers.get(self.legacy_header)
            if legacy:
                return legacy.strip().lower()
        return None

    def headers(self, version: Version) -> dict[str, str]:
        text = self.text(version)
        headers = {"OpenStack-API-Version": f"{self.service} {text}", "Vary": "OpenStack-API-Version"}
        if self.legacy_header:
            headers[self.legacy_header] = text
            headers["Vary"] = f"OpenStack-API-Version, {self.legacy_header}"
        return headers


NOVA = Microversions("compute", (2, 1), (2, 104), legacy_header="X-OpenStack-Nova-API-Version")
CINDER = Microversions("volume", (3, 0), (3, 71))
