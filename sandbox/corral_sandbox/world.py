"""The world between the two far ends: one loop, one clock, one set of faults and counters.

The cloud side (`sandbox.cloud`) and the GitHub side (`sandbox.github`) each keep their own state; the
world is the only place where they meet. A server that reaches ACTIVE hands its user data to the world,
which asks GitHub whether it carries a JIT config GitHub issued; if so, a simulated runner comes online.
When that ephemeral runner has run its one job and deregistered, the world powers its server off, the
way a VM whose runner exits and shuts down would look to corral.

Everything in here runs on the sandbox's single event loop, so state needs no locks.
"""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from corral_sandbox.cloud.state import CloudState
from corral_sandbox.faults import Faults
from corral_sandbox.github.actions.settings import ActionsSettings
from corral_sandbox.github.state import GitHubState
from corral_sandbox.stats import Stats


@dataclass
class Credentials:
    """Everything a client needs to talk to this world; generated fresh for every sandbox."""

    openstack_username: str = "corral"
    openstack_password: str = field(default_factory=lambda: secrets.token_urlsafe(16))
    openstack_project: str = "corral"
    app_credential_id: str = field(default_factory=lambda: secrets.token_hex(16))
    app_credential_secret: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    github_app_id: int = 424242
    github_app_slug: str = "corral-sandbox"
    github_pat: str = field(default_factory=lambda: "ghp_" + secrets.token_hex(18))
    webhook_secret: str = field(default_factory=lambda: secrets.token_hex(20))
    app_private_key: rsa.RSAPrivateKey = field(
        default_factory=lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048)
    )

    def private_key_pem(self) -> bytes:
        return self.app_private_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )

    def public_key_pem(self) -> bytes:
        return self.app_private_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )


SECOND_CLOUD = "two"


@dataclass
class Timings:
    """How long the simulated world takes; all in seconds and switchable through the control API."""

    boot_delay: float = 1.0
    """BUILD -> ACTIVE."""
    register_delay: float = 0.0
    """ACTIVE -> runner online (the time a guest needs to start the runner)."""
    delete_delay: float = 0.0
    """DELETE request -> server gone from listings."""
    schedule_delay: float = 0.0
    """Create accepted -> Nova's conductor schedules the server, which only then counts against the quota:
    creates within it race past Nova's quota check, and the surplus goes to ERROR ("Quota exceeded for ...")."""
    lost_contact_delay: float = 0.0
    """Runner offline mid-job -> GitHub fails its job ("The self-hosted runner lost communication with the
    server"). GitHub waits minutes; 0 fails it at once."""


class World:
    """Shared services for both sides: the loop, faults, stats, credentials and the cloud/GitHub bridge."""

    def __init__(
        self,
        *,
        timings: Timings | None = None,
        seed: int = 0,
        credentials: Credentials | None = None,
        openstack_url: str = "http://127.0.0.1:0",
        second_openstack_url: str | None = None,
        github_url: str = "http://127.0.0.1:0",
        webhook_url: str | None = None,
        workdir: Path | None = None,
        actions: ActionsSettings | None = None,
    ) -> None:
        self.timings = timings or Timings()
        self._initial_timings = dataclasses.replace(self.timings)
        self._generation = 0
        self.faults = Faults(seed=seed)
        self.stats = Stats()
        self.credentials = credentials or Credentials()
        self.openstack_url = openstack_url.rstrip("/")
        self.github_url = github_url.rstrip("/")
        self.workdir = workdir
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._server_of_runner: dict[int, str] = {}
        self._runner_of_server: dict[str, int] = {}
        self._starting: dict[int, str] = {}
        """Runners whose guest is ACTIVE but has not started them yet (within `register_delay`)."""
        self.cloud = CloudState(self, url=self.openstack_url)
        """The first cloud: what a client of one cloud talks to."""
        self.clouds = {self.cloud.name: self.cloud}
        """Every cloud, by name: a second (`two`, on its own port, with its own Keystone, quota and servers)
        stands for another region or provider; its guests reach the same GitHub."""
        if second_openstack_url is not None:
            second = CloudState(self, name=SECOND_CLOUD, url=second_openstack_url, region="RegionTwo")
            self.clouds[second.name] = second
        self.github = GitHubState(self, webhook_url=webhook_url, actions_settings=actions)

    # -- scheduling --------------------------------------------------------------------------

    def bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> asyncio.TimerHandle:
        """Run `callback(*args)` on the world's loop after `delay` seconds (0 means next iteration).

        A callback scheduled before a `reset()` is dropped: it belongs to a world that no longer exists.
        """
        generation = self._generation

        def guarded() -> None:
            if generation == self._generation:
                callback(*args)

        return self.loop.call_later(max(delay, 0.0), guarded)

    def spawn(self, coro: Any) -> asyncio.Task[Any]:
        """Start a background coroutine on the world's loop, keeping a reference so it is not collected."""
        task = self.loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- the bridge --------------------------------------------------------------------------

    def server_active(self, server_id: str, user_data: bytes | None) -> None:
        """Called by the cloud when a server reaches ACTIVE: its guest reads the user data."""
        runner_id = self.github.runner_for_user_data(user_data or b"")
        if runner_id is None:
            self.stats.incr("servers_without_runner")
            return
        if self.faults.chance(self.faults.world.never_register_rate):
            self.stats.incr("runners_never_registered")
            return
        self._server_of_runner[runner_id] = server_id
        self._runner_of_server[server_id] = runner_id
        self._starting[runner_id] = server_id
        self.call_later(self.timings.register_delay, self._connect, runner_id, server_id)

    def _connect(self, runner_id: int, server_id: str) -> None:
        if self._starting.get(runner_id) != server_id:
            return  # started early (`start_runners_now`), or its server is gone (`server_gone`, `reset`)
        del self._starting[runner_id]
        self.github.connect_runner(runner_id)

    def start_runners_now(self) -> int:
        """Every guest still within `register_delay` starts its runner now; returns how many did.

        A test that must see the window between a server's ACTIVE and its runner online sets a long
        `register_delay`, observes, then closes the window with this: no race against the clock."""
        starting = list(self._starting.items())
        for runner_id, server_id in starting:
            self._connect(runner_id, server_id)
        return len(starting)

    def server_gone(self, server_id: str) -> None:
        """Called by the cloud when a server is deleted or fails: its runner loses its machine."""
        runner_id = self._runner_of_server.pop(server_id, None)
        if runner_id is not None:
            self._server_of_runner.pop(runner_id, None)
            self._starting.pop(runner_id, None)
            self.github.disconnect_runner(runner_id)

    def server_of_runner(self, runner_id: int) -> str | None:
        """The server a connected runner runs on."""
        return self._server_of_runner.get(runner_id)

    def crash_server(self, server_id: str) -> None:
        """The server's host fails under it (`lost_mid_job_rate`): ERROR with a fault, its runner gone."""
        for cloud in self.clouds.values():
            cloud.crash(server_id)  # server ids are unique across clouds; others ignore it

    def runner_exited(self, runner_id: int) -> None:
        """Called by GitHub when an ephemeral runner has finished its job: the guest shuts down."""
        server_id = self._server_of_runner.pop(runner_id, None)
        if server_id is not None:
            self._runner_of_server.pop(server_id, None)
            for cloud in self.clouds.values():
                cloud.power_off(server_id)  # server ids are unique across clouds; others ignore it

    def reset(self) -> None:
        """Forget every server, runner, job, fault and counter; keep ports, credentials and catalog."""
        self._generation += 1
        self.timings = dataclasses.replace(self._initial_timings)
        self.faults.configure({"seed": self.faults.seed, "endpoints": [], "world": {}})
        self.stats.reset()
        self._server_of_runner.clear()
        self._runner_of_server.clear()
        self._starting.clear()
        for cloud in self.clouds.values():
            cloud.reset()
        self.github.reset()

    def snapshot(self) -> dict[str, Any]:
        """The figures `/_sandbox/stats` returns."""
        return {
            **self.stats.snapshot(),
            "cloud": self.cloud.snapshot(),
            "clouds": {name: cloud.snapshot() for name, cloud in self.clouds.items()},
            "github": self.github.snapshot(),
        }
