"""A pool's cache volume on real Nova and Cinder (`cache_volumes`): made through corral's provider, attached to
a server as a block device mapping of an existing volume, kept when that server is deleted (Nova detaches it
and Cinder shows it `available` again), and attached to the next server: the reuse a warm start depends on."""

from __future__ import annotations

import functools
import time

import pytest

from corral.cloud.openstack import OpenStackProvider
from corral.cloud.provider import META_CACHE, META_INSTALLATION, META_POOL, CacheVolumeSpec, CloudVolume
from tests.live.support import Figures, LiveCloud, poll


def test_a_cache_volume_outlives_its_server_and_is_attached_to_the_next(
    live: LiveCloud, provider: OpenStackProvider, figures: Figures
) -> None:
    if not live.has_volumes:
        pytest.skip("the cloud has no block-storage service")
    metadata = {META_INSTALLATION: live.installation, META_POOL: "live", META_CACHE: "1"}
    spec = CacheVolumeSpec(name=f"corral-cache-live-{live.run}", size_gb=1, metadata=metadata, type=live.volume_type)
    made = provider.create_cache_volume(spec)

    def status(*wanted: str, server: str | None = None) -> CloudVolume | None:
        volume = provider.volume(made.id)
        attached = (server,) if server else ()
        return volume if volume is not None and volume.status in wanted and volume.attached_to == attached else None

    try:
        started = time.monotonic()
        poll(lambda: status("available"), timeout=live.timeout, what="the new cache volume available", interval=0.25)
        figures.record("seconds for Cinder to make a 1 GB cache volume", time.monotonic() - started)
        listed = {volume.id: volume for volume in provider.list_cache_volumes()}
        assert made.id in listed and (listed[made.id].pool, listed[made.id].size_gb) == ("live", 1)
        for turn in ("first", "second"):
            server = provider.create_server(live.spec(f"cache-{turn}", cache_volume=made.id))
            live.wait_status(server.id, "ACTIVE")
            assert made.id in {a.volume_id for a in live.observer.compute.volume_attachments(server.id)}
            poll(
                functools.partial(status, "in-use", server=server.id),
                timeout=live.timeout,
                what=f"Cinder to show the cache volume attached to the {turn} server",
                interval=0.25,
            )
            started = time.monotonic()
            provider.delete_server(server.id)
            live.wait_gone({server.id})
            poll(
                lambda: status("available"),
                timeout=live.timeout,
                what=f"the cache volume available again after the {turn} server's delete",
                interval=0.25,
            )
            figures.record(
                f"seconds from the {turn} server's delete to its cache volume free", time.monotonic() - started
            )
    finally:
        poll(lambda: status("available", "error"), timeout=live.timeout, what="the cache volume detached")
        provider.delete_volume(made.id)
        poll(lambda: provider.volume(made.id) is None, timeout=live.timeout, what="the cache volume deleted")
