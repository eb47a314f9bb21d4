"""corral and the sandbox on one machine: what the demo, the benchmarks and the tests run.

`LocalCorral` is the same Service that `corral serve` builds, from a config file, on its own event loop
in a background thread, with its API served by uvicorn on a free loopback port so that the sandbox's
webhooks reach it over HTTP. Nothing is faked on corral's side: only the far ends are the sandbox.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import functools
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import httpx
import openstack.config
import openstack.connection
import uvicorn
import yaml

from corral.api.app import build_app
from corral.cloud.clouds import CloudSet
from corral.cloud.openstack import OpenStackProvider
from corral.cloud.provider import DEFAULT_CLOUD, CloudProvider
from corral.config import CloudConfig
from corral.files import create_private, write_private
from corral.model import Job, Runner, RunnerEvent, RunnerState
from corral.serve import server_config
from corral.service import Service
from corral.store import jobs, runners, tokens
from corral.store.database import Store, is_sqlite, sqlite_file
from corral.store.tokens import ApiToken
from corral_sandbox.server import SandboxInfo, bind_socket

T = TypeVar("T")


def sandbox_cloud_config(clouds_yaml: str) -> openstack.config.OpenStackConfig:
    """openstacksdk's configuration from the sandbox's `clouds.yaml` alone.

    By default openstacksdk puts the file `OS_CLIENT_CONFIG_FILE` names before the one it is given (and the
    first file found wins), merges `secure.yaml` from the usual places or `OS_CLIENT_SECURE_FILE` into it,
    and reads `OS_CLOUD`, `OS_REGION_NAME` and every other `OS_*` variable. With an OpenStack user's shell,
    the sandbox's helpers then talked to the user's cloud (a real one, had an entry shared the sandbox's
    cloud name). Nothing from the environment or the home directory is read here."""
    return openstack.config.OpenStackConfig(
        config_files=[clouds_yaml], secure_files=[], vendor_files=[], load_envvars=False
    )


def sandbox_connection(sandbox: SandboxInfo, entry: str | None = None) -> openstack.connection.Connection:
    """openstacksdk connected to one of the sandbox's `clouds.yaml` entries (its first cloud by default),
    whatever the environment holds."""
    config = sandbox_cloud_config(sandbox.clouds_yaml)
    return openstack.connection.Connection(config=config.get_one(cloud=entry or sandbox.cloud_name))


def sandbox_environment(clouds_yaml: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a child `corral serve` against the sandbox: `environ` (this process's by
    default) without any `OS_*` variable, the sandbox's `clouds.yaml` as both the config file and the
    secure file (so that no `secure.yaml` of the user's is merged into its entries)."""
    source = os.environ if environ is None else environ
    child = {name: value for name, value in source.items() if not name.startswith("OS_")}
    return {**child, "OS_CLIENT_CONFIG_FILE": clouds_yaml, "OS_CLIENT_SECURE_FILE": clouds_yaml}


def sandbox_clouds(sandbox: SandboxInfo, document: dict[str, Any]) -> CloudSet:
    """The clouds a corral.yaml document names, each connected through the sandbox's `clouds.yaml` (a single
    `cloud:` is the sandbox's first cloud)."""
    installation = document.get("installation", "corral")
    entries = {name: entry.get("cloud") for name, entry in document.get("clouds", {}).items()}

    def provider(settings: CloudConfig) -> CloudProvider:
        return OpenStackProvider(sandbox_connection(sandbox, settings.name), installation)

    return CloudSet(
        {name: provider(CloudConfig(name=entry)) for name, entry in (entries or {DEFAULT_CLOUD: None}).items()},
        connect=provider,
    )


def corral_config(sandbox: SandboxInfo, database_url: str, pools: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A corral.yaml document pointing at the sandbox (token auth unless `github` is overridden)."""
    return {
        "github": {
            "url": sandbox.github_url,
            "token": sandbox.pat,
            "webhook_secret": sandbox.webhook_secret,
        },
        "cloud": {"name": sandbox.cloud_name, "quota_retry": "2s"},
        "database_url": database_url,
        "reconcile_interval": "1s",
        "pools": pools,
        **extra,
    }


def app_github(sandbox: SandboxInfo) -> dict[str, Any]:
    """The `github` section for the sandbox's GitHub App (installation tokens, redeliveries) instead of a PAT."""
    return {
        "url": sandbox.github_url,
        "app_id": sandbox.app_id,
        "private_key_file": sandbox.private_key_path,
        "webhook_secret": sandbox.webhook_secret,
    }


def pool_spec(labels: list[str], **overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "scope": {"org": "octo-org"},
        "labels": labels,
        "image": "ubuntu-24.04-runner",
        "flavor": "m1.small",
        "networks": ["private"],
        "min_idle": 0,
        "max_runners": 10,
        "idle_grace": "1s",
    }
    spec.update(overrides)
    return spec


@functools.cache
def _migrated_template() -> Path:
    """An empty SQLite database at this code's newest schema, made once per process (removed at exit)."""
    folder = Path(tempfile.mkdtemp(prefix="corral-template-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    path = folder / "corral.db"
    store = Store(f"sqlite:///{path}")
    try:
        store.migrate()
    finally:
        store.close()
    return path


def start_from_template(database_url: str) -> None:
    """Give a SQLite database that does not exist yet the newest schema by copying a migrated empty one.

    Every corral started here would otherwise replay every migration on a new file: a third of a start's CPU,
    paid by hundreds of tests (the migrations themselves are tested on their own, on both databases). The
    file is created 0600 first, as the store would create it. Other databases are left to `corral serve`.
    """
    if not is_sqlite(database_url):
        return
    path = sqlite_file(database_url)
    if path is None or path.exists() or not path.parent.is_dir():
        return
    create_private(path)
    shutil.copyfile(_migrated_template(), path)


class LocalCorral:
    """corral serving on loopback; `call` runs a coroutine on its loop and returns the result."""

    def __init__(
        self,
        sandbox: SandboxInfo,
        config_path: Path,
        document: dict[str, Any],
        *,
        port: int = 0,
        cloud: CloudProvider | CloudSet | None = None,
        replica: str | None = None,
    ) -> None:
        """`cloud` replaces the sandbox's OpenStack with another (a real cloud, or several), GitHub staying the
        sandbox. `replica` names this corral among others on one PostgreSQL (several may run in one process)."""
        self.sandbox = sandbox
        self.config_path = config_path
        self.write_config(document)
        if isinstance(document.get("database_url"), str):
            start_from_template(document["database_url"])
        self.service = Service.from_file(config_path, cloud=cloud or sandbox_clouds(sandbox, document), replica=replica)
        self._socket = bind_socket("127.0.0.1", port)
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}"
        self._server = uvicorn.Server(
            server_config(build_app(self.service), "127.0.0.1", self._socket.getsockname()[1])
        )
        _, self.token = self.service.store.run_blocking(tokens.create, "local", "admin")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name="corral-under-test")

    def write_config(self, document: dict[str, Any]) -> None:
        write_private(self.config_path, yaml.safe_dump(document))

    def _run(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            engine = asyncio.create_task(self.service.run())
            await self._server.serve(sockets=[self._socket])
            self.service.stop()
            await engine

        asyncio.run(main())

    def start(self) -> LocalCorral:
        self._thread.start()
        deadline = time.monotonic() + 20
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("corral did not start")
            time.sleep(0.01)
        with httpx.Client(base_url=self.sandbox.control_url) as control:
            control.put("/webhook", json={"url": f"{self.url}/webhook"}).raise_for_status()
        return self

    def call(self, make: Callable[[], Awaitable[T]], timeout: float = 30.0) -> T:
        assert self._loop is not None
        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(make(), self._loop)  # type: ignore[arg-type]
        return future.result(timeout)

    def settle(self, timeout: float = 30.0) -> None:
        """Have the engine look at both far ends now, let every pool's worker act on what it saw, and wait
        for the creates and deletes that started. Nothing runs beside the engine's own loop and workers."""

        async def run() -> None:
            async with asyncio.timeout(timeout):
                await self.service.engine.settle()
                await self.service.engine.drain()

        self.call(run, timeout=timeout + 5)

    def reload(self, document: dict[str, Any]) -> list[str]:
        self.write_config(document)
        return self.call(self.service.reload)

    def job(self, job_id: int) -> Job | None:
        """A job as corral's store has it (read from this thread, not corral's loop)."""
        return self.service.store.run_blocking(jobs.get, job_id)

    def runners(self, *, pool: str | None = None, states: Iterable[RunnerState] | None = None) -> list[Runner]:
        return self.service.store.run_blocking(runners.listing, pool=pool, states=states)

    def events(self, runner_id: str) -> list[RunnerEvent]:
        """The runner's history, oldest first."""
        return self.service.store.run_blocking(runners.events, runner_id)

    def create_token(self, name: str, scope: str) -> tuple[ApiToken, str]:
        return self.service.store.run_blocking(tokens.create, name, scope)

    def api(self) -> httpx.Client:
        """An HTTP client for corral's API, authenticated with an admin token made for this run."""
        return httpx.Client(base_url=self.url, timeout=10, headers={"Authorization": f"Bearer {self.token}"})

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=30)
        with contextlib.suppress(Exception):
            self.service.close()
