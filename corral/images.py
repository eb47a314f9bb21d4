"""What a pool's `image` means: a name or id, or a filter naming the newest matching image.

Plain values, shared by the configuration (which parses them), the cloud layer (which finds them in Glance) and
the doctor: they live outside `corral.cloud` so that reading a config file never imports the cloud layer.

A filter lets an image pipeline publish a new runner image (tagged, or with a property such as
`corral_pool=linux`) without anyone editing corral's configuration: the pool's next check resolves the filter
to the new upload, and the rollout replaces the runners on the old one. Tags, name and status are filtered by
Glance; properties are compared here, because openstacksdk drops query parameters it does not know.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ImageFilter:
    """The newest active image with all these properties and tags (and this name, if given)."""

    properties: tuple[tuple[str, str], ...] = ()
    tags: tuple[str, ...] = ()
    name: str | None = None

    def describe(self) -> str:
        """How logs and pool problems name the filter: `the newest active image with os_distro=ubuntu, tag
        runner`."""
        parts = [f"name {self.name!r}"] if self.name else []
        parts += [f"{key}={value}" for key, value in self.properties]
        parts += [f"tag {tag}" for tag in self.tags]
        return f"the newest active image with {', '.join(parts)}"

    def query(self) -> dict[str, Any]:
        """What Glance filters on its side (openstacksdk knows these parameters)."""
        query: dict[str, Any] = {"status": "active", "sort": "created_at:desc"}
        if self.tags:
            query["tag"] = list(self.tags)
        if self.name:
            query["name"] = self.name
        return query

    def matches(self, image: Mapping[str, Any]) -> bool:
        """`image`: the image as Glance names its fields, with custom properties under `properties` (what
        openstacksdk's `to_dict(original_names=True)` gives)."""
        custom = image.get("properties") or {}
        for key, wanted in self.properties:
            value = image.get(key, custom.get(key))
            if value is None or _as_text(value) != wanted:
                return False
        return all(tag in (image.get("tags") or []) for tag in self.tags) and image.get("status") == "active"


ImageRef = str | ImageFilter
"""A pool's image: a name or id, or a filter."""


def describe(ref: ImageRef) -> str:
    return ref.describe() if isinstance(ref, ImageFilter) else f"image {ref!r}"


def not_found(ref: ImageRef) -> str:
    """What a pool problem (and the doctor) says when `ref` means no image."""
    if isinstance(ref, ImageFilter):
        return f"no image is {ref.describe().removeprefix('the ')}"
    return f"{describe(ref)} does not exist in this cloud"


def _as_text(value: object) -> str:
    """Glance returns most properties as strings, but some (os_hidden, min_ram) as JSON booleans or numbers."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
