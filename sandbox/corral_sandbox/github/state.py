"""GitHub's state: the facade the world, the control API and the REST routes use.

Interface the world and the control API rely on:
- `runner_for_user_data(user_data) -> runner id | None`: the runner whose unused JIT config the user data
  carries (verbatim, inside base64 blobs, gzip-compressed, or nested).
- `connect_runner(runner_id)`: the runner comes online and takes a queued job it fits.
- `disconnect_runner(runner_id)`: its machine is gone: offline; a job it was running fails.
- calls `world.runner_exited(runner_id)` when an ephemeral runner finished its job and deregistered.
- `submit_job(repo, labels, duration, workflow_name=None) -> dict`, `job_view(job_id) -> dict | None`,
  `jobs_view()`, `cancel_job(job_id) -> dict | None`: the control API's job shape.
- `webhook_url` (settable; setting a new URL sends a `ping`, as creating a hook does), `webhooks.secret`
  (settable; None: deliveries go unsigned, as from a hook without a secret), `clock_offset_s` (GitHub's
  clock against this machine's: the `Date` header and JWT checks use it), `pat_scopes` (a classic PAT's
  `X-OAuth-Scopes`),
  `deliveries_view()`, `lost_view()`, `set_rate_limit(remaining, reset_in)`, `snapshot()`, `reset()`, `close()`.
- `actions`: the Actions service of the runner scale-set protocol (`github/actions/`), rebuilt on reset with
  the settings this state was made with.
- `jit_config_watchers`: callables handed every `encoded_jit_config` as it is issued (emptied on reset). The
  state itself keeps no config, only each registered runner's secret: tests that look for configs where
  none may be watch for them instead.
"""

from __future__ import annotations

import dataclasses
import secrets
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from corral_sandbox.github import jitconfig, payloads
from corral_sandbox.github.actions.service import ActionsService
from corral_sandbox.github.actions.settings import ActionsSettings
from corral_sandbox.github.auth import Principal, looks_like_jwt, verify_app_jwt
from corral_sandbox.github.clock import utcnow
from corral_sandbox.github.directory import Directory
from corral_sandbox.github.errors import bad_credentials
from corral_sandbox.github.model import Installation, Job
from corral_sandbox.github.payloads import AppIdentity, Urls
from corral_sandbox.github.ratelimit import RateLimits
from corral_sandbox.github.scheduler import Scheduler
from corral_sandbox.github.webhooks import WebhookDispatcher

if TYPE_CHECKING:
    from corral_sandbox.world import World

INSTALLATION_TOKEN_TTL_S = 3600
HOOK_ID = 480_000_001
PAT_SCOPES = ("admin:org", "manage_runners:enterprise", "repo", "workflow")
"""The sandbox PAT's classic scopes: enough for runners at every scope and for reading jobs."""


class GitHubState:
    """Organisations, repositories, installations, tokens, runners, jobs and webhook deliveries."""

    def __init__(
        self, world: World, webhook_url: str | None = None, actions_settings: ActionsSettings | None = None
    ) -> None:
        self.world = world
        self._initial_webhook_url = webhook_url
        self._actions_settings = actions_settings or ActionsSettings()
        self.client_id = "Iv23li" + secrets.token_hex(7)
        self._public_key = world.credentials.app_private_key.public_key()
        self.rate_limits = RateLimits()
        self.webhooks = WebhookDispatcher(world, HOOK_ID)
        self._build()
        self.webhooks.url = webhook_url
        self.webhooks.secret = world.credentials.webhook_secret

    def _build(self) -> None:
        self.directory = Directory()
        self.scheduler = Scheduler(self.world, self._job_event)
        self.tokens: dict[str, tuple[Installation, float, dict[str, str]]] = {}
        self.tokens_issued = 0
        self.clock_offset_s = 0.0
        self.pat_scopes: list[str] = list(PAT_SCOPES)
        self.hook_insecure_ssl = "0"
        # Keeping every config handed out grew without bound (38 MB at 10k runners); whoever needs them watches.
        self.jit_config_watchers: list[Callable[[str], None]] = []
        self.actions = ActionsService(self.world, self, dataclasses.replace(self._actions_settings))
        self.scheduler.delegate = self.actions.jobs

    def reset(self) -> None:
        """Drop runners, jobs, deliveries and issued tokens; restore rate limits and the webhook URL."""
        self.actions.shutdown()
        self._build()
        self.rate_limits.reset()
        self.webhooks.reset()
        self.webhooks.url = self._initial_webhook_url
        self.webhooks.secret = self.world.credentials.webhook_secret

    def now(self) -> float:
        """GitHub's clock: this machine's, shifted by `clock_offset_s` (a skew test moves this one)."""
        return time.time() + self.clock_offset_s

    async def close(self) -> None:
        await self.webhooks.close()

    # -- identity ----------------------------------------------------------------------------

    @property
    def app_identity(self) -> AppIdentity:
        credentials = self.world.credentials
        return AppIdentity(
            id=credentials.github_app_id,
            slug=credentials.github_app_slug,
            client_id=self.client_id,
            owner=self.directory.pat_owner,
        )

    @property
    def urls(self) -> Urls:
        """URLs for webhook payloads: the github.com shape at the sandbox's address."""
        return Urls(api=self.world.github_url, html=self.world.github_url)

    def authenticate(self, token: str) -> Principal:
        """The principal `token` stands for, or GitHub's 401."""
        if secrets.compare_digest(token, self.world.credentials.github_pat):
            return Principal("pat")
        if token.startswith("ghs_"):
            issued = self.tokens.get(token)
            if issued is None or issued[1] <= self.now():
                raise bad_credentials()
            return Principal("installation", issued[0], issued[2])
        if looks_like_jwt(token):
            verify_app_jwt(
                token, self._public_key, self.world.credentials.github_app_id, self.client_id, now=self.now()
            )
            return Principal("app")
        raise bad_credentials()

    def issue_token(self, installation: Installation, permissions: dict[str, str]) -> tuple[str, float]:
        token = "ghs_" + secrets.token_urlsafe(27).replace("-", "A").replace("_", "b")[:36]
        expires_at = self.now() + INSTALLATION_TOKEN_TTL_S
        self.tokens[token] = (installation, expires_at, permissions)
        self.tokens_issued += 1
        return token, expires_at

    def uninstall(self, installation: Installation) -> None:
        """The app removed from an account, as `DELETE /app/installations/{id}` does: its tokens die with it."""
        self.directory.uninstall(installation)
        for token, (issued_to, _, _) in list(self.tokens.items()):
            if issued_to.id == installation.id:
                del self.tokens[token]

    def jit_config_issued(self, config: str) -> None:
        """Hand a newly issued `encoded_jit_config` to the watchers; the state keeps nothing of it."""
        for watch in self.jit_config_watchers:
            watch(config)

    def set_rate_limit(self, remaining: int, reset_in: int) -> None:
        """Give every credential `remaining` requests until `reset_in` seconds from now."""
        self.rate_limits.force(remaining, reset_in)

    # -- the world's bridge ------------------------------------------------------------------

    def runner_for_user_data(self, user_data: bytes) -> int | None:
        return self.scheduler.consume(list(jitconfig.find_secrets(user_data)))

    def connect_runner(self, runner_id: int) -> None:
        self.scheduler.connect(runner_id)

    def disconnect_runner(self, runner_id: int) -> None:
        self.scheduler.disconnect(runner_id)

    # -- jobs (control API) ------------------------------------------------------------------

    def submit_job(
        self,
        repo: str,
        labels: list[str],
        duration: float,
        workflow_name: str | None = None,
        conclusion: str = "success",
    ) -> dict[str, Any]:
        """A new job; `conclusion` is how it ends if its runner runs it to the end."""
        owner, _, name = repo.partition("/")
        if not owner or not name:
            raise ValueError(f"repo must be 'owner/name', got {repo!r}")
        job = self.scheduler.submit(self.directory.repo(owner, name), labels, duration, workflow_name, conclusion)
        return self._job_view(job)

    def _job_view(self, job: Job) -> dict[str, Any]:
        """The control API's job, with its life on the scale-set path (`scale_set`, None for other jobs)."""
        return {**self.scheduler.job_view(job), "scale_set": self.actions.jobs.view(job.id)}

    def job_view(self, job_id: int) -> dict[str, Any] | None:
        job = self.scheduler.jobs.get(job_id)
        return self._job_view(job) if job is not None else None

    def jobs_view(self) -> list[dict[str, Any]]:
        return [self._job_view(job) for job in self.scheduler.jobs.values()]

    def cancel_job(self, job_id: int) -> dict[str, Any] | None:
        job = self.scheduler.jobs.get(job_id)
        if job is None:
            return None
        self.scheduler.cancel(job)
        return self._job_view(job)

    # -- webhooks ----------------------------------------------------------------------------

    @property
    def webhook_url(self) -> str | None:
        return self.webhooks.url

    @webhook_url.setter
    def webhook_url(self, url: str | None) -> None:
        changed = url != self.webhooks.url
        self.webhooks.url = url
        if url is not None and changed:
            self.webhooks.emit(
                "ping",
                payloads.ping(HOOK_ID, self.app_identity, url, utcnow(), self.urls),
                ordering_key=HOOK_ID,
                installation_id=None,
                repository_id=None,
            )

    def _job_event(self, job: Job, action: str) -> None:
        urls = self.urls
        owner = job.repo.owner
        installation = self.directory.installation_of(owner)
        payload: dict[str, Any] = {
            "action": action,
            "workflow_job": payloads.workflow_job(job, urls),
            "repository": payloads.repository(job.repo, urls),
            "sender": payloads.user(self.directory.pat_owner, urls),
        }
        if owner.type == "Organization":
            payload["organization"] = payloads.organization(owner, urls)
        if installation is not None:
            payload["installation"] = payloads.installation_lite(installation)
        self.webhooks.emit(
            "workflow_job",
            payload,
            ordering_key=job.id,
            installation_id=installation.id if installation else None,
            repository_id=job.repo.id,
        )
        self.actions.jobs.job_event(job, action)

    def lost_view(self) -> list[dict[str, Any]]:
        """Events never attempted (`webhook_lose_rate`), oldest first; `job_id` for `workflow_job` events."""
        return [
            {"event": event, "action": action, "job_id": key if event == "workflow_job" else None}
            for event, action, key in self.webhooks.lost
        ]

    def deliveries_view(self) -> list[dict[str, Any]]:
        """The delivery log, oldest first, for the control API."""
        return [{**delivery.item(), "url": delivery.url} for delivery in reversed(self.webhooks.newest_first())]

    # -- stats -------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        return {
            **self.scheduler.snapshot(),
            "webhooks": self.webhooks.snapshot(),
            "scale_sets": self.actions.snapshot(),
            "installation_tokens_issued": self.tokens_issued,
            "accounts": len(self.directory.accounts),
            "repositories": len(self.directory.repos),
        }
