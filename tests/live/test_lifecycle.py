"""corral's engine on a real OpenStack, with GitHub played by the sandbox.

No guest boots here, so no runner ever registers: every server corral creates must be removed by the
bootstrap-timeout path, replaced while the pool wants warm runners, and all of it removed when the pool
shrinks and then goes away. Nothing may be left on either side.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from corral_sandbox.local import LocalCorral, corral_config, pool_spec
from corral_sandbox.server import Sandbox
from tests.live.support import SETTLE_TIMEOUT_S, LiveCloud, poll

BOOTSTRAP_TIMEOUT_S = 15


def test_a_pool_grows_times_out_shrinks_and_goes_away_leaving_nothing(
    live: LiveCloud, github_sandbox: Sandbox, tmp_path: Path
) -> None:
    installation = f"{live.installation}-engine"
    pool = live.warm_pool(
        bootstrap_timeout=f"{BOOTSTRAP_TIMEOUT_S}s",
    )
    document = corral_config(
        github_sandbox.info, f"sqlite:///{tmp_path / 'corral.db'}", {"live": pool}, installation=installation
    )
    provider = live.new_provider(installation)
    corral = LocalCorral(github_sandbox.info, tmp_path / "corral.yaml", document, cloud=provider).start()
    control = httpx.Client(base_url=github_sandbox.info.control_url)
    try:
        started = time.monotonic()

        def warm() -> set[str] | None:
            corral.settle(timeout=SETTLE_TIMEOUT_S)
            active = {s.id for s in live.owned(installation) if s.status == "ACTIVE"}
            return active if len(active) >= 2 else None

        first = poll(warm, timeout=live.timeout, what="two warm servers ACTIVE on the real cloud")
        assert len(first) <= 3, "never more than max_runners"

        def timed_out_and_replaced() -> bool | None:
            corral.settle(timeout=SETTLE_TIMEOUT_S)
            now = {s.id for s in live.owned(installation)}
            return (bool(now) and not (first & now)) or None

        poll(timed_out_and_replaced, timeout=BOOTSTRAP_TIMEOUT_S + live.timeout, what="first servers replaced")
        with corral.api() as api:
            reasons = [
                event["reason"]
                for runner in api.get("/api/v1/runners", params={"include_deleted": True}).json()
                for event in api.get(f"/api/v1/runners/{runner['id']}/events").json()
            ]
        assert any("bootstrap_timeout" in reason for reason in reasons), reasons
        live_seconds = time.monotonic() - started

        document["pools"]["live"]["min_idle"] = 0
        assert corral.reload(document) == []

        def nothing_left() -> bool | None:
            corral.settle(timeout=SETTLE_TIMEOUT_S)
            servers = live.owned(installation)
            registrations = control.get("/stats").json()["github"]["runners"]["registered"]
            return (not servers and registrations == 0) or None

        poll(nothing_left, timeout=BOOTSTRAP_TIMEOUT_S + live.timeout, what="no server or registration left")
        del document["pools"]["live"]
        document["pools"]["spare"] = pool_spec(["spare"], image=live.image, flavor=live.flavor, networks=[live.network])
        assert corral.reload(document) == []
        corral.settle(timeout=SETTLE_TIMEOUT_S)
        assert live.owned(installation) == []
        print(f"engine on the live cloud: warm servers replaced by the bootstrap-timeout path in {live_seconds:.0f}s")
    finally:
        corral.stop()
