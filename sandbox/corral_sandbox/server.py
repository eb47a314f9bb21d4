"""Serve a world over HTTP on loopback: the OpenStack side on one port, GitHub (and control) on another.

`Sandbox` is what tests, the demo, benchmarks and `corral sandbox` use. It binds free ports first so the
world knows its own URLs (they appear in catalogs and response bodies), writes the files a client needs
(`clouds.yaml`, the GitHub App's private key) and runs both uvicorn servers on one event loop, either in a
background thread (`start`/`stop`, for tests) or in the foreground (`serve`, for the CLI).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

import uvicorn
import yaml

from corral.files import write_private
from corral_sandbox.cloud.app import build_openstack_app
from corral_sandbox.control import build_control_router
from corral_sandbox.github.actions.settings import ActionsSettings
from corral_sandbox.github.app import build_github_app
from corral_sandbox.world import SECOND_CLOUD, Timings, World

T = TypeVar("T")

CLOUD_NAME = "sandbox"
SECOND_CLOUD_NAME = "sandbox-two"
APP_CREDENTIAL_CLOUD_NAME = "sandbox-appcred"
REGION = "RegionOne"
START_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class SandboxInfo:
    """Where the sandbox listens and how to authenticate; `corral sandbox` prints this as one JSON line."""

    openstack_url: str
    auth_url: str
    second_openstack_url: str
    """A second cloud (its own Keystone, quota and servers: another region or provider), as `second_cloud_name`
    in `clouds.yaml`."""
    github_url: str
    github_enterprise_url: str
    control_url: str
    clouds_yaml: str
    cloud_name: str
    app_credential_cloud_name: str
    region: str
    second_cloud_name: str
    webhook_url: str | None
    webhook_secret: str
    app_id: int
    private_key_path: str
    pat: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening socket bound before the server starts, so its URL is known up front (port 0: any free)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted connections inherit this: without it Nagle's algorithm meets delayed ACKs on loopback and
    # every small response waits ~40 ms.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    sock.listen(1024)
    sock.setblocking(False)
    return sock


class Sandbox:
    """A world served over HTTP. Use as a context manager, or `start()`/`stop()`, or `serve()`."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        openstack_port: int = 0,
        github_port: int = 0,
        workdir: Path | None = None,
        timings: Timings | None = None,
        webhook_url: str | None = None,
        seed: int = 0,
        actions: ActionsSettings | None = None,
    ) -> None:
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="corral-sandbox-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._openstack_socket = bind_socket(host, openstack_port)
        self._github_socket = bind_socket(host, github_port)
        self._second_openstack_socket = bind_socket(host, 0)
        openstack_url = "http://{}:{}".format(*self._openstack_socket.getsockname()[:2])
        second_openstack_url = "http://{}:{}".format(*self._second_openstack_socket.getsockname()[:2])
        github_url = "http://{}:{}".format(*self._github_socket.getsockname()[:2])
        self.world = World(
            timings=timings,
            seed=seed,
            openstack_url=openstack_url,
            second_openstack_url=second_openstack_url,
            github_url=github_url,
            webhook_url=webhook_url,
            workdir=self.workdir,
            actions=actions,
        )
        self.info = self._write_client_files()
        self._servers: list[uvicorn.Server] = []
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._failure: BaseException | None = None

    # -- files a client needs ------------------------------------------------------------------

    def _write_client_files(self) -> SandboxInfo:
        credentials = self.world.credentials
        key_path = self.workdir / "github-app.pem"
        write_private(key_path, credentials.private_key_pem())
        auth_url = f"{self.world.openstack_url}/identity"
        clouds = {
            "clouds": {
                CLOUD_NAME: {
                    "auth": {
                        "auth_url": auth_url,
                        "username": credentials.openstack_username,
                        "password": credentials.openstack_password,
                        "project_name": credentials.openstack_project,
                        "user_domain_name": "Default",
                        "project_domain_name": "Default",
                    },
                    "region_name": REGION,
                    "identity_api_version": 3,
                    "interface": "public",
                },
                SECOND_CLOUD_NAME: {
                    "auth": {
                        "auth_url": f"{self.world.clouds[SECOND_CLOUD].url}/identity",
                        "username": credentials.openstack_username,
                        "password": credentials.openstack_password,
                        "project_name": credentials.openstack_project,
                        "user_domain_name": "Default",
                        "project_domain_name": "Default",
                    },
                    "region_name": self.world.clouds[SECOND_CLOUD].region,
                    "identity_api_version": 3,
                    "interface": "public",
                },
                APP_CREDENTIAL_CLOUD_NAME: {
                    "auth_type": "v3applicationcredential",
                    "auth": {
                        "auth_url": auth_url,
                        "application_credential_id": credentials.app_credential_id,
                        "application_credential_secret": credentials.app_credential_secret,
                    },
                    "region_name": REGION,
                    "identity_api_version": 3,
                    "interface": "public",
                },
            }
        }
        clouds_path = self.workdir / "clouds.yaml"
        write_private(clouds_path, yaml.safe_dump(clouds, sort_keys=False))
        return SandboxInfo(
            openstack_url=self.world.openstack_url,
            auth_url=auth_url,
            second_openstack_url=self.world.clouds[SECOND_CLOUD].url,
            github_url=self.world.github_url,
            github_enterprise_url=f"{self.world.github_url}/api/v3",
            control_url=f"{self.world.github_url}/_sandbox",
            clouds_yaml=str(clouds_path),
            cloud_name=CLOUD_NAME,
            app_credential_cloud_name=APP_CREDENTIAL_CLOUD_NAME,
            region=REGION,
            second_cloud_name=SECOND_CLOUD_NAME,
            webhook_url=self.world.github.webhook_url,
            webhook_secret=credentials.webhook_secret,
            app_id=credentials.github_app_id,
            private_key_path=str(key_path),
            pat=credentials.github_pat,
        )

    # -- running -------------------------------------------------------------------------------

    def _build_servers(self) -> list[uvicorn.Server]:
        github_app = build_github_app(self.world)
        github_app.include_router(build_control_router(self.world))
        servers = []
        # GitHub's side stamps its own `Date`, on GitHub's clock (which a test may skew).
        apps = [(build_openstack_app(self.world, cloud), True) for cloud in self.world.clouds.values()]
        for app, date_header in [apps[0], (github_app, False), *apps[1:]]:
            config = uvicorn.Config(
                app,
                log_level="warning",
                lifespan="off",
                access_log=False,
                timeout_keep_alive=30,
                date_header=date_header,
            )
            servers.append(uvicorn.Server(config))
        return servers

    async def serve(self) -> None:
        """Serve in the current event loop until `shutdown()` (or the task is cancelled)."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        self.world.bind_loop(loop)
        self._servers = self._build_servers()
        sockets = (self._openstack_socket, self._github_socket, self._second_openstack_socket)
        tasks = [
            asyncio.create_task(server.serve(sockets=[sock]))
            for server, sock in zip(self._servers, sockets, strict=True)
        ]
        try:
            await asyncio.gather(*tasks)
        finally:
            await self.world.github.close()

    @property
    def running(self) -> bool:
        """Both servers have finished starting up and accept requests."""
        return bool(self._servers) and all(server.started for server in self._servers)

    def shutdown(self) -> None:
        """Ask the servers to exit; safe from any thread."""
        for server in self._servers:
            server.should_exit = True

    def start(self) -> SandboxInfo:
        """Serve from a background thread; returns once both ports answer."""

        def run() -> None:
            try:
                asyncio.run(self.serve())
            except BaseException as exc:
                self._failure = exc

        self._thread = threading.Thread(target=run, name="corral-sandbox", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.running:
            if self._failure is not None or not self._thread.is_alive():
                raise RuntimeError("sandbox failed to start") from self._failure
            if time.monotonic() > deadline:
                raise RuntimeError(f"sandbox did not start within {START_TIMEOUT_S:.0f}s")
            time.sleep(0.01)
        return self.info

    def stop(self) -> None:
        self.shutdown()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        for sock in (self._openstack_socket, self._github_socket, self._second_openstack_socket):
            with contextlib.suppress(OSError):
                sock.close()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def call(self, fn: Callable[[], T], timeout: float = 10.0) -> T:
        """Run `fn` on the sandbox's loop and return its result: the one safe way to touch the world
        from another thread (benchmarks and white-box checks)."""
        if self._loop is None:
            raise RuntimeError("sandbox is not running")
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            try:
                future.set_result(fn())
            except BaseException as exc:
                future.set_exception(exc)

        self._loop.call_soon_threadsafe(run)
        return future.result(timeout)

    def __enter__(self) -> Sandbox:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
