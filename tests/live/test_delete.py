"""Deleting a runner's server frees everything it held: the server leaves the listing and the volumes made
for it leave Cinder, because a leaked volume costs money every hour and is invisible from the runner list."""

from __future__ import annotations

import time
import uuid

import pytest

from corral.cloud.openstack import OpenStackProvider
from corral.config import VolumeConfig
from tests.live.support import Figures, LiveCloud, poll


def test_delete_removes_the_server_and_its_volumes(
    live: LiveCloud, provider: OpenStackProvider, figures: Figures
) -> None:
    if not live.has_volumes:
        pytest.skip("the cloud has no block-storage service")
    spec = live.spec("doomed", boot_volume_gb=1, volumes=(VolumeConfig(name="scratch", size_gb=1),))
    created = provider.create_server(spec)
    live.wait_status(created.id, "ACTIVE")
    volume_ids = {a.volume_id for a in live.observer.compute.volume_attachments(created.id)}
    assert len(volume_ids) == 2
    assert volume_ids <= live.volume_ids(), "both volumes should exist in Cinder before the delete"

    started = time.monotonic()
    provider.delete_server(created.id)
    live.wait_gone({created.id})
    figures.record("seconds from delete request to gone from the listing (with 2 volumes)", time.monotonic() - started)
    assert created.id not in {server.id for server in provider.list_servers()}
    poll(
        lambda: not (volume_ids & live.volume_ids()),
        timeout=live.timeout,
        what=f"volumes {sorted(volume_ids)} to leave Cinder",
        interval=0.25,
    )
    figures.record("seconds from delete request to volumes gone from Cinder", time.monotonic() - started)


def test_deleting_a_server_that_is_already_gone_is_not_an_error(live: LiveCloud, provider: OpenStackProvider) -> None:
    """After a crash the engine may delete twice, or delete what an operator already removed."""
    created = provider.create_server(live.spec("twice"))
    provider.delete_server(created.id)
    live.wait_gone({created.id})
    provider.delete_server(created.id)
    provider.delete_server(str(uuid.uuid4()))
    assert created.id not in {server.id for server in provider.list_servers()}
