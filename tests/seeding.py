"""A fleet of idle runners put in place directly, for tests and benchmarks that measure what a pass costs over it.

Letting corral create a thousand runners through the sandbox takes 15 to 80 s on a loaded 2-core machine (a JIT
config, a create, a boot and a registration each, over HTTP, and the passes that follow them), and is set-up, not
what such a test counts. Here each
side gets what corral's creates would have left, made the way corral makes it, so a pass then sees exactly a
fleet of idle runners:

- corral's store: each runner's intent written and moved to `idle` with corral's own store functions
  (`runners.add`, `runners.apply`), with the events its creator and judge would record on the way;
- GitHub: a JIT runner registered per runner with the name, labels and group corral asks for, and its
  `encoded_jit_config` issued as the JIT route issues it;
- OpenStack: a server per runner from the very create request corral's provider sends
  (`OpenStackProvider.create_request`: name, metadata, tags, user data with the JIT config), accepted by the
  sandbox's Nova as its `POST /servers` route accepts it; the sandbox's world then boots each one and its
  guest brings the runner online, as for any server.

Only the HTTP calls and corral's engine are skipped, so the engine must not run yet: seed a `LocalCorral`
before `start()`, or its first pass would create the runners itself.
"""

from __future__ import annotations

from corral.clock import utcnow
from corral.cloud.openstack import OpenStackProvider
from corral.engine.creator import server_spec
from corral.model import Reason, Runner, RunnerState, Transition
from corral.store import runners
from corral.store.runners import NewRunner
from corral.userdata import render_user_data
from corral_sandbox.cloud.microversion import NOVA, Version
from corral_sandbox.cloud.server_request import parse_server_request
from corral_sandbox.github import jitconfig
from corral_sandbox.github.model import DEFAULT_GROUP_ID, Scope
from corral_sandbox.local import LocalCorral
from corral_sandbox.server import Sandbox
from tests.waiting import wait_until

WORK_FOLDER = "_work"
"""What corral's JIT request names as the runner's work folder."""
SECONDS_PER_RUNNER = 0.05
"""Time allowed per runner for the sandbox to boot the servers and bring their runners online."""


def seed_idle_runners(corral: LocalCorral, sandbox: Sandbox, pool: str, count: int) -> list[Runner]:
    """Put `count` idle runners of `pool` (an `org` scope, in its first placement, which must be the sandbox's
    first cloud) in corral's store, the sandbox's GitHub and its OpenStack; returns them as the store has them.

    `corral` must not be started yet (its pool's room would then be taken by runners it writes itself, and the
    seeding refuses). Returns once every server is ACTIVE and every runner online on GitHub."""
    config = corral.service.config
    spec = config.pools[pool]
    placement = config.placements(pool)[0]
    if spec.scope.org is None:
        raise ValueError(f"pool {pool}: only an org scope is seeded, not {spec.scope.key}")
    provider = corral.service.cloud.provider(placement.cloud)
    if not isinstance(provider, OpenStackProvider):
        raise TypeError(f"pool {pool}: its cloud {placement.cloud!r} is not the sandbox's OpenStack")
    store, world = corral.service.store, sandbox.world

    intents = [
        NewRunner(pool=pool, scope=spec.scope.key, labels=tuple(spec.labels), reason=Reason.WARM, cloud=placement.cloud)
    ] * count
    pending = store.run_blocking(runners.add, config.name_prefix, intents, max_runners=spec.max_runners, now=utcnow())
    if len(pending) != count:
        raise ValueError(f"pool {pool}: max_runners {spec.max_runners} leaves room for {len(pending)} of {count}")

    def register() -> list[tuple[int, str]]:
        """`POST /orgs/{org}/actions/runners/generate-jitconfig` for each runner, as its route serves it."""
        account = world.github.directory.account(spec.scope.org or "")
        scope = Scope("orgs", account.login.lower())
        issued = []
        for runner in pending:
            registered = world.github.scheduler.register(
                scope, runner.name, DEFAULT_GROUP_ID, list(spec.labels), WORK_FOLDER
            )
            encoded = jitconfig.encode(registered, world.github_url, account.login)
            world.github.jit_config_issued(encoded)
            issued.append((registered.id, encoded))
        return issued

    issued = sandbox.call(register, timeout=60)
    creating = _moved(
        corral,
        [
            Transition(runner, RunnerState.CREATING, Reason.CREATE_REQUESTED, github_runner_id=github_id)
            for runner, (github_id, _) in zip(pending, issued, strict=True)
        ],
    )

    requests = []
    for runner, (_, encoded) in zip(creating, issued, strict=True):
        user_data = render_user_data(
            corral.service.engine.running.template,
            jit_config=encoded,
            runner_name=runner.name,
            pool=pool,
            labels=list(spec.labels),
            runner_download_url=config.runner_download_url,
        )
        requests.append(provider.create_request(server_spec(config, pool, runner, user_data, placement=placement)))
    image_id = provider.image_id(server_spec(config, pool, None, placement=placement))

    def create() -> list[str]:
        """`POST /servers` for each runner, as the sandbox's Nova route serves it."""
        ids = []
        for body, microversion in requests:
            version = _version(microversion) if microversion else NOVA.minimum
            ids.append(world.cloud.create_server(parse_server_request(world.cloud, body, version)).id)
        return ids

    server_ids = sandbox.call(create, timeout=60)
    booting = _moved(
        corral,
        [
            Transition(runner, RunnerState.BOOTING, Reason.SERVER_CREATED, server_id=server_id, image_id=image_id)
            for runner, server_id in zip(creating, server_ids, strict=True)
        ],
    )

    def online() -> bool:
        registered = world.github.scheduler.runners
        return all(registered[github_id].status == "online" for github_id, _ in issued)

    wait_until(
        lambda: sandbox.call(online),
        timeout=10 + count * SECONDS_PER_RUNNER,
        what=f"{count} seeded servers active and their runners online",
    )
    store.run_blocking(runners.mark_active, [runner.id for runner in booting], now=utcnow())
    now = corral.service.engine.clock.now()
    return _moved(
        corral,
        [Transition(runner, RunnerState.IDLE, Reason.CAME_ONLINE, registered_at=now) for runner in booting],
    )


def start_with_idle_runners(corral: LocalCorral, sandbox: Sandbox, pool: str, count: int) -> LocalCorral:
    """Start `corral` once `count` idle runners of `pool` are in place (none: just start it). A failed seeding
    closes the service it opened, since a corral never started cannot be stopped."""
    try:
        if count:
            seed_idle_runners(corral, sandbox, pool, count)
    except BaseException:
        corral.service.close()
        raise
    return corral.start()


def _moved(corral: LocalCorral, transitions: list[Transition]) -> list[Runner]:
    """Apply the moves in one transaction, as the engine's mover would, each of which must hold."""
    moved = corral.service.store.run_blocking(runners.apply, transitions, now=utcnow())
    done = [runner for runner in moved if runner is not None]
    if len(done) != len(transitions):
        raise RuntimeError(f"{len(transitions) - len(done)} seeded runners moved by someone else meanwhile")
    return done


def _version(microversion: str) -> Version:
    """`2.52` as the sandbox's Nova negotiates it from the request's header."""
    major, _, minor = microversion.partition(".")
    return int(major), int(minor)
