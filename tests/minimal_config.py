"""The smallest valid configuration, for tests of one engine part that reads a setting or two from it."""

from __future__ import annotations

from typing import Any

from corral.config import CorralConfig, parse_config
from corral.engine.running import Running


def minimal_config(**settings: Any) -> CorralConfig:
    """One pool, `small`; `settings` are top-level keys (`reconcile_interval=3600`, `tuning={...}`)."""
    pool = {"scope": {"org": "octo-org"}, "labels": ["linux"], "image": "ubuntu", "flavor": "m1.small"}
    return parse_config({"github": {"token": "ghp_" + "Zq7" * 12}, "pools": {"small": pool}, **settings})


def running(**settings: Any) -> Running:
    """`minimal_config(**settings)` in force, as the engine's parts read it."""
    return Running(minimal_config(**settings))
