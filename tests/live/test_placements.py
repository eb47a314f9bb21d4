"""corral's placements on a real OpenStack: the pool's first placement asks for a flavor the cloud does not
have, so its check keeps it out of service, and the pool's warm runners are made in its second placement,
under another cloud name (the same project here, reached through a connection of its own). Each runner
records the placement's cloud, is deleted there, and nothing is left.

(A second project with its own quota would show spill-over for quota too; on ministack, reading a fresh
project's quotas hung its services, so the sandbox's second cloud covers that path.)
"""

from __future__ import annotations

from pathlib import Path

from corral.cloud.clouds import CloudSet
from corral_sandbox.local import LocalCorral, corral_config
from corral_sandbox.server import Sandbox
from tests.live.support import SETTLE_TIMEOUT_S, LiveCloud, cloud_config, poll

BOOTSTRAP_TIMEOUT_S = 15  # no guest boots here: each warm server is replaced after this, and goes with min_idle 0


def test_a_pool_whose_first_placement_the_cloud_cannot_serve_keeps_its_runners_in_the_second(
    live: LiveCloud, github_sandbox: Sandbox, tmp_path: Path
) -> None:
    installation = f"{live.installation}-placed"
    pool = live.warm_pool(
        bootstrap_timeout=f"{BOOTSTRAP_TIMEOUT_S}s",
        placements=[{"cloud": "first", "flavor": f"corral-{live.run}-no-such-flavor"}, {"cloud": "second"}],
    )
    document = corral_config(
        github_sandbox.info, f"sqlite:///{tmp_path / 'corral.db'}", {"live": pool}, installation=installation
    )
    del document["cloud"]
    document["clouds"] = {"first": {"cloud": cloud_config().name}, "second": {"cloud": cloud_config().name}}
    clouds = CloudSet({"first": live.new_provider(installation), "second": live.new_provider(installation)})
    corral = LocalCorral(github_sandbox.info, tmp_path / "corral.yaml", document, cloud=clouds).start()
    try:
        # Each warm server lives bootstrap_timeout from its create; on a loaded cloud some take most of that to
        # boot, so the test counts servers seen ACTIVE over the polls rather than needing two at one moment.
        seen_active: set[str] = set()

        def warm() -> set[str] | None:
            corral.settle(timeout=SETTLE_TIMEOUT_S)
            seen_active.update(s.id for s in live.owned(installation) if s.status == "ACTIVE")
            return seen_active if len(seen_active) >= 2 else None

        poll(warm, timeout=live.timeout, what="two warm servers ACTIVE from the second placement")
        with corral.api() as api:
            runners = api.get("/api/v1/runners", params={"include_deleted": True}).json()
            (shown,) = api.get("/api/v1/pools").json()
        assert {runner["cloud"] for runner in runners} == {"second"}
        # A runner's cloud is chosen before its create is sent, so the cloud set above is what was sent where.
        # A warm server may still outlive bootstrap_timeout on a loaded cloud (its replacement is the design);
        # any other message is a failure worth seeing.
        unexpected = [r["message"] for r in runners if r["message"] and "bootstrap_timeout" not in r["message"]]
        assert not unexpected, "a runner failed for another reason than a slow boot"
        assert shown["ready"], "a pool is ready while one of its placements is"

        document["pools"]["live"]["min_idle"] = 0
        assert corral.reload(document) == []

        def emptied() -> bool | None:
            corral.settle(timeout=SETTLE_TIMEOUT_S)
            return not live.owned(installation) or None

        poll(emptied, timeout=BOOTSTRAP_TIMEOUT_S + live.timeout, what="the warm servers gone once min_idle is 0")
    finally:
        corral.stop()
