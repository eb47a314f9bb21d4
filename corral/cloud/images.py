"""Finding the image a pool means (`corral.images.ImageRef`) in Glance: the newest active match.

A shared name (a rebuilt image uploaded before the old one is retired) and a filter both mean the newest
active image that fits; openstacksdk drops query parameters it does not know, so properties are compared by
`ImageFilter.matches` rather than by Glance.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from corral.images import ImageFilter, ImageRef

if TYPE_CHECKING:  # openstacksdk takes a quarter of a second to import: the configuration does without it
    from openstack.connection import Connection


def newest(images: Iterable[Any], wanted: ImageFilter) -> Any | None:
    """The newest of openstacksdk `Image`s that match `wanted` (None when none does)."""
    matching = [image for image in images if wanted.matches(image.to_dict(computed=False, original_names=True))]
    return max(matching, key=lambda image: (image.created_at or "", image.id), default=None)


def find_image(connection: Connection, ref: ImageRef) -> Any | None:
    """The image `ref` means, or None when there is none.

    A shared name (a rebuilt image uploaded before the old one is retired) means the newest active image of
    that name, which is what the rebuild means to put in service."""
    from openstack import exceptions as os_exceptions

    if isinstance(ref, ImageFilter):
        return newest(connection.image.images(**ref.query()), ref)
    try:
        return connection.image.find_image(ref, ignore_missing=True)
    except os_exceptions.DuplicateResource:
        shared = ImageFilter(name=ref)
        return newest(connection.image.images(**shared.query()), shared)
