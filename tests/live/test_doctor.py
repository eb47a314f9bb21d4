"""The cloud half of `corral doctor` against a real OpenStack: what passes on the sandbox passes here, and
a wrong image is named the same way (the sandbox's answers are what the doctor was written against)."""

from __future__ import annotations

from typing import Any

from corral.config import CorralConfig, parse_config
from corral.doctor.cloud import check_cloud
from corral.doctor.report import Level, Section
from tests.live.support import LiveCloud, cloud_config

CALL_TIMEOUT_S = 30.0


def _config(live: LiveCloud, **pool: Any) -> CorralConfig:
    cloud = cloud_config()
    spec: dict[str, Any] = {
        "scope": {"org": "octo-org"},
        "labels": ["live"],
        "image": live.image,
        "flavor": live.flavor,
        "networks": [live.network],
        "security_groups": [live.security_group],
        "key_name": live.key_name,
        "availability_zone": live.availability_zone,
        "max_runners": 1,
    }
    if live.volume_type:
        spec.update(boot_volume_gb=1, boot_volume_type=live.volume_type)
    spec.update(pool)
    return parse_config(
        {
            "github": {"token": "ghp_" + "0" * 36},
            "cloud": {"name": cloud.name, "region": cloud.region},
            "database_url": "sqlite:///unused.db",
            "pools": {"live": spec},
        }
    )


def test_doctor_passes_a_pool_the_live_cloud_can_serve(live: LiveCloud) -> None:
    section = Section("cloud")
    check_cloud(_config(live), section, CALL_TIMEOUT_S)
    by_name = {check.name: check for check in section.checks}
    failed = {name: check.detail for name, check in by_name.items() if check.level is Level.FAIL}
    assert not failed
    expected = {
        "keystone authentication",
        "service catalog",
        "pool live: image",
        "pool live: flavor",
        f"pool live: network {live.network}",
        f"pool live: security group {live.security_group}",
        "pool live: key pair",
        "pool live: availability zone",
        "pool live: quota",
    }
    if live.volume_type:
        expected.add(f"pool live: volume type {live.volume_type}")
    assert expected <= set(by_name)


def test_doctor_names_a_wrong_image_on_the_live_cloud(live: LiveCloud) -> None:
    section = Section("cloud")
    check_cloud(_config(live, image=f"corral-live-{live.run}-no-such-image"), section, CALL_TIMEOUT_S)
    failed = {check.name: check for check in section.checks if check.level is Level.FAIL}
    assert set(failed) == {"pool live: image"}
    assert "does not exist" in failed["pool live: image"].detail
    assert "pools.live.image" in (failed["pool live: image"].fix or "")
