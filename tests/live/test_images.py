"""A pool's image as a filter, against a real Glance: the properties and tag of real uploads, Glance's own
filtering and sort parameters, and which upload is the newest."""

from __future__ import annotations

from corral.cloud.openstack import OpenStackProvider
from corral.images import ImageFilter
from tests.live.support import LiveCloud, poll


def upload(live: LiveCloud, suffix: str, role: str, tag: str) -> str:
    """An image with a custom property and a tag, uploaded at least a second after the one before: Glance
    keeps `created_at` to the second, and "newest" is only defined when the seconds differ."""
    live.after_last_upload()
    image = live.observer.image.create_image(
        name=f"corral-live-{live.run}-{suffix}",
        data=b"\0" * 4096,
        disk_format="raw",
        container_format="bare",
        tags=[tag],
        corral_role=role,
        allow_duplicates=True,
    )
    live.created_images.append(image.id)
    poll(lambda: live.observer.image.get_image(image.id).status == "active", timeout=60, what="image upload")
    return str(image.id)


def test_an_image_filter_means_the_newest_upload_with_its_property_and_tag(
    live: LiveCloud, provider: OpenStackProvider
) -> None:
    tag = f"corral-live-{live.run}"
    first = upload(live, "runner-1", "runner", tag)
    spec = live.spec("filter", image=ImageFilter(properties=(("corral_role", "runner"),), tags=(tag,)))
    assert provider.check_pool(spec) == []
    assert provider.image_id(spec) == first

    upload(live, "builder", "builder", tag)  # newer, but another role
    second = upload(live, "runner-2", "runner", tag)
    assert provider.check_pool(spec) == []
    assert provider.image_id(spec) == second, "the check resolves the filter afresh, to the newest match"

    nobody = live.spec("nobody", image=ImageFilter(properties=(("corral_role", "nobody"),), tags=(tag,)))
    assert provider.check_pool(nobody) == [f"no image is newest active image with corral_role=nobody, tag {tag}"]
