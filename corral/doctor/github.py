"""The GitHub half of `corral doctor`: the clock, the credential, each scope's installation and
permissions, the App's webhook and its recent deliveries.

What corral needs, by scope and credential (from GitHub's REST documentation for self-hosted runners,
workflow jobs and runs):

- organisation: an App installation with `organization_self_hosted_runners: write` and `actions: read`;
  a classic PAT with `admin:org` (and `repo` to read private repositories' jobs).
- repository: an App installation with `administration: write` and `actions: read`; a classic PAT with `repo`.
- enterprise: no App (the enterprise runner endpoints refuse installation tokens); a classic PAT with
  `manage_runners:enterprise` or `admin:enterprise` (and `repo`).

A classic PAT's scopes come back in every answer's `X-OAuth-Scopes`; a fine-grained one's do not, so for
those the doctor can only try a read (listing runners) and say what it could not verify.

The clock: githubkit signs App JWTs with `iat` one minute in the past and `exp` nine minutes ahead, and
reuses a JWT for eight minutes. GitHub refuses an `iat` in its future (a clock more than 60 s ahead) and
an `exp` in its past (a JWT minted 9 minutes ago by a clock more than 60 s behind is still being reused
at 8 minutes). So 60 s either way is where App authentication breaks, at once or intermittently.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

import httpx
from githubkit import AppAuthStrategy, GitHub, TokenAuthStrategy
from githubkit.cache import MemCacheStrategy
from githubkit.exception import RequestError, RequestFailed

from corral.config import CorralConfig, ScopeConfig
from corral.doctor.report import Section
from corral.doctor.scalesets import check_scale_sets
from corral.github.client import scope_path

CLOCK_LIMIT_S = 60.0
"""githubkit's backdating of `iat` (and its JWT reuse margin): a skew past this breaks App auth."""
CLOCK_WARN_S = 10.0
"""NTP keeps a clock within milliseconds; 10 s off means nothing is keeping it, and it will drift on."""
DELIVERIES_PAGE = 100
LEVELS = {"read": 1, "write": 2, "admin": 3}
APP_PERMISSIONS = {
    "org": {"organization_self_hosted_runners": "write", "actions": "read"},
    "repo": {"administration": "write", "actions": "read"},
}
PERMISSION_NAMES = {
    "organization_self_hosted_runners": "Organization permissions > Self-hosted runners",
    "administration": "Repository permissions > Administration",
    "actions": "Repository permissions > Actions",
}
PAT_SCOPES: dict[str, list[tuple[str, ...]]] = {
    "org": [("admin:org",)],
    "repo": [("repo",)],
    "enterprise": [("manage_runners:enterprise", "admin:enterprise")],
}
"""Per scope kind, the classic scopes a PAT needs: each tuple is "any one of these"."""
IMPLIED_SCOPES = {"admin:enterprise": {"manage_runners:enterprise"}}
WORKFLOW_JOB = "workflow_job"


@dataclass(frozen=True)
class Answer:
    status: int
    headers: httpx.Headers
    body: Any


class Unreachable(Exception):
    """GitHub did not answer (connection refused, timeout); the message names the call and the reason."""


def _message(body: Any) -> str:
    return str(body.get("message", ""))[:200] if isinstance(body, dict) else ""


class GitHubDoctor:
    def __init__(self, config: CorralConfig, section: Section, timeout_s: float) -> None:
        self.config = config
        self.github = config.github
        self.section = section
        self.timeout_s = timeout_s
        self.skew_s: float | None = None
        self.clock_broken = False
        common: dict[str, Any] = {
            "base_url": self.github.url + "/",
            "timeout": timeout_s,
            "auto_retry": False,
            "http_cache": False,
            "cache_strategy": MemCacheStrategy(),
        }
        self._common = common
        if self.github.uses_app:
            assert self.github.app_id is not None and self.github.private_key is not None
            self.client: GitHub[Any] = GitHub(
                AppAuthStrategy(self.github.app_id, self.github.private_key.get_secret_value()), **common
            )
        else:
            assert self.github.token is not None
            self.client = GitHub(TokenAuthStrategy(self.github.token.get_secret_value()), **common)

    # -- plumbing ---------------------------------------------------------------------------------

    def _get(self, path: str, params: dict[str, Any] | None = None, client: GitHub[Any] | None = None) -> Answer:
        """One GET; an HTTP error status is an `Answer` too (the checks read GitHub's message), only no
        answer at all raises."""
        try:
            response = (client or self.client).request("GET", path, params=params)
        except RequestFailed as exc:
            response = exc.response
        except RequestError as exc:
            raise Unreachable(f"GET {path}: {type(exc.exc).__name__}") from None
        except Exception as exc:  # githubkit's own failures (a JWT it cannot sign) carry no secret in the type
            raise Unreachable(f"GET {path}: {type(exc).__name__}") from None
        try:
            body = response.json()
        except ValueError:
            body = None
        return Answer(response.status_code, response.headers, body)

    # -- the checks -------------------------------------------------------------------------------

    def run(self) -> None:
        if not self._clock():
            self.section.skipped("credentials", "GitHub could not be reached")
            return
        if self.github.uses_app:
            self._app()
        else:
            self._token()
        check_scale_sets(self.config, self.section, self.timeout_s)

    def _clock(self) -> bool:
        """Reachability and clock skew from one unauthenticated request's `Date` header."""
        started = time.time()
        try:
            response = httpx.get(f"{self.github.url}/rate_limit", timeout=self.timeout_s)
        except httpx.HTTPError as exc:
            self.section.failed(
                "reachable",
                f"{self.github.url}: no answer ({type(exc).__name__})",
                "check github.url (https://api.github.com, or https://HOST/api/v3 for Enterprise Server) and that "
                "this machine can reach it (proxy, firewall)",
            )
            return False
        finished = time.time()
        self.section.passed("reachable", f"{self.github.url} answers (HTTP {response.status_code} without credentials)")
        date = response.headers.get("date")
        try:
            theirs = parsedate_to_datetime(date).timestamp() + 0.5 if date else None
        except (TypeError, ValueError):
            theirs = None
        if theirs is None:
            self.section.warned("clock", "GitHub's answer had no usable Date header", "check the clock with NTP")
            return True
        skew = (started + finished) / 2 - theirs
        uncertainty = 0.5 + (finished - started) / 2
        self.skew_s = skew
        direction = "ahead of" if skew > 0 else "behind"
        detail = f"this machine's clock is {abs(skew):.1f}s (±{uncertainty:.1f}s) {direction} GitHub's"
        fix = "synchronise the clock (NTP: chrony or systemd-timesyncd) and check it with `timedatectl`"
        if abs(skew) + uncertainty >= CLOCK_LIMIT_S:
            if self.github.uses_app:
                self.clock_broken = True
                self.section.failed(
                    "clock",
                    f"{detail}: GitHub refuses App JWTs from a clock {CLOCK_LIMIT_S:.0f}s or more off",
                    fix,
                )
            else:
                self.section.warned("clock", f"{detail} (a token does not depend on it; timestamps will be off)", fix)
        elif abs(skew) >= CLOCK_WARN_S:
            self.section.warned(
                "clock", f"{detail}: within the {CLOCK_LIMIT_S:.0f}s App JWTs tolerate, but drifting", fix
            )
        else:
            self.section.passed("clock", detail)
        return True

    # -- GitHub App -------------------------------------------------------------------------------

    def _app(self) -> None:
        app_id = self.github.app_id
        try:
            answer = self._get("/app")
        except Unreachable as exc:
            self.section.failed("github app", str(exc), "run the doctor again once GitHub answers")
            self._skip_app_items("the App could not be reached")
            return
        if answer.status != 200:
            if self.clock_broken:
                fix = "fix the clock first (see clock): GitHub judges the JWT by its own time"
            else:
                fix = (
                    f"the private key is not one of App {app_id}'s, or github.app_id is wrong: generate a private "
                    "key on the App's settings page (Private keys), point github.private_key_file at it, and "
                    "check app_id on the same page"
                )
            self.section.failed(
                "github app",
                f"GitHub refused the App's JWT for app_id {app_id}: HTTP {answer.status}: {_message(answer.body)}",
                fix,
            )
            self._skip_app_items("the App could not authenticate")
            return
        app = answer.body
        slug = str(app.get("slug", "?"))
        self.section.passed("github app", f"App {slug!r} (id {app.get('id')}) accepted the JWT signed with the key")
        install_url = f"{app.get('html_url') or 'the App page'}/installations/new"
        scopes = {pool.scope.key: pool.scope for pool in self.config.pools.values()}
        for scope in scopes.values():
            self._installation(scope, install_url)
        self._hook()

    def _skip_app_items(self, reason: str) -> None:
        for key in {pool.scope.key for pool in self.config.pools.values()}:
            self.section.skipped(f"installation {key}", reason)
        self.section.skipped("webhook", reason)

    def _installation(self, scope: ScopeConfig, install_url: str) -> None:
        item = f"installation {scope.key}"
        if scope.enterprise:
            self.section.failed(
                item,
                "GitHub's enterprise runner endpoints refuse GitHub App installation tokens",
                "use a classic PAT with manage_runners:enterprise (github.token_file) for enterprise pools, or "
                "register these runners at organisation scope",
            )
            return
        path = f"/orgs/{scope.org}/installation" if scope.org else f"/repos/{scope.repo}/installation"
        try:
            answer = self._get(path)
        except Unreachable as exc:
            self.section.failed(item, str(exc), "run the doctor again once GitHub answers")
            return
        if answer.status == 404:
            self.section.failed(
                item,
                f"the App is not installed on {scope.target}"
                + (" (or not given access to this repository)" if scope.repo else ""),
                f"install it there: {install_url}" + (f", with access to {scope.repo}" if scope.repo else ""),
            )
            return
        if answer.status != 200:
            detail = f"GET {path}: HTTP {answer.status}: {_message(answer.body)}"
            self.section.failed(item, detail, "see GitHub's answer")
            return
        installation = answer.body
        if installation.get("suspended_at"):
            self.section.failed(
                item,
                f"installation {installation.get('id')} on {scope.owner} is suspended",
                f"unsuspend it in {scope.owner}'s settings (GitHub Apps, Configure)",
            )
            return
        self.section.passed(
            item,
            f"installation {installation.get('id')} on {scope.owner} "
            f"(repositories: {installation.get('repository_selection', '?')})",
        )
        self._permissions(scope, installation)

    def _permissions(self, scope: ScopeConfig, installation: dict[str, Any]) -> None:
        item = f"permissions {scope.key}"
        granted: dict[str, str] = installation.get("permissions") or {}
        events: list[str] = installation.get("events") or []
        lacking = []
        for name, level in APP_PERMISSIONS[scope.kind].items():
            have = granted.get(name)
            if LEVELS.get(have or "", 0) < LEVELS[level]:
                lacking.append(f"{name}: {level} (has {have or 'none'})")
        wants_events = self.github.webhook_secret is not None
        missing_event = wants_events and WORKFLOW_JOB not in events
        if lacking:
            names = ", ".join(
                f"{PERMISSION_NAMES[name]}: {'Read and write' if level == 'write' else 'Read-only'}"
                for name, level in APP_PERMISSIONS[scope.kind].items()
                if LEVELS.get(granted.get(name) or "", 0) < LEVELS[level]
            )
            self.section.failed(
                item,
                f"the installation on {scope.owner} lacks {'; '.join(lacking)}",
                f"in the App's settings (Permissions & events) set {names}; then approve the new permissions on "
                f"{scope.owner}'s installation (Settings, GitHub Apps, Review request)",
            )
        elif missing_event:
            self.section.failed(
                item,
                f"the installation on {scope.owner} is not subscribed to {WORKFLOW_JOB} events, so no job "
                "reaches corral's /webhook",
                "in the App's settings (Permissions & events, Subscribe to events) tick Workflow job, and approve "
                f"the change on {scope.owner}'s installation",
            )
        else:
            wanted = ", ".join(f"{name}: {granted[name]}" for name in APP_PERMISSIONS[scope.kind])
            self.section.passed(item, wanted + (f"; events include {WORKFLOW_JOB}" if wants_events else ""))

    def _hook(self) -> None:
        try:
            config = self._get("/app/hook/config")
        except Unreachable as exc:
            self.section.failed("webhook", str(exc), "run the doctor again once GitHub answers")
            return
        if config.status != 200 or not isinstance(config.body, dict):
            self.section.failed(
                "webhook", f"GET /app/hook/config: HTTP {config.status}: {_message(config.body)}", "see GitHub's answer"
            )
            return
        hook = config.body
        url = str(hook.get("url") or "")
        secret_at_github = bool(hook.get("secret"))
        ours = self.github.webhook_secret is not None
        if not ours:
            self.section.warned(
                "webhook secret",
                "github.webhook_secret is not set: corral serves no /webhook and finds jobs only by polling "
                f"(every missed_job_scan, {self.config.missed_job_scan:g}s)"
                + (" although the App's hook sends deliveries" if url else ""),
                "set github.webhook_secret_file (`openssl rand -hex 32`) and the same secret in the App's "
                "settings (Webhook secret), with Webhook URL https://<corral>/webhook",
            )
        elif not url:
            self.section.failed(
                "webhook secret",
                "the App's webhook has no URL, so GitHub sends corral nothing",
                "in the App's settings set Webhook URL to https://<corral>/webhook and tick Active",
            )
        elif not secret_at_github:
            self.section.failed(
                "webhook secret",
                f"the App's webhook ({url}) has no secret: its deliveries are unsigned and corral refuses them",
                "set the secret of github.webhook_secret(_file) as the App's Webhook secret",
            )
        else:
            self.section.passed(
                "webhook secret",
                f"deliveries to {url} are signed (GitHub never shows the secret: one that differs shows as "
                "deliveries refused with 401, below)",
            )
        if str(hook.get("insecure_ssl", "0")) == "1":
            self.section.warned(
                "webhook TLS",
                "the App's webhook skips TLS certificate verification (insecure_ssl)",
                "give corral's endpoint a valid certificate and turn SSL verification back on",
            )
        self._deliveries()

    def _deliveries(self) -> None:
        try:
            answer = self._get("/app/hook/deliveries", params={"per_page": DELIVERIES_PAGE})
        except Unreachable as exc:
            self.section.failed("webhook deliveries", str(exc), "run the doctor again once GitHub answers")
            return
        if answer.status != 200 or not isinstance(answer.body, list):
            self.section.failed(
                "webhook deliveries",
                f"GET /app/hook/deliveries: HTTP {answer.status}: {_message(answer.body)}",
                "see GitHub's answer",
            )
            return
        deliveries: list[dict[str, Any]] = answer.body
        if not deliveries:
            self.section.passed("webhook deliveries", "none in the App's log yet")
            return
        succeeded = {d.get("guid") for d in deliveries if 200 <= int(d.get("status_code") or 0) < 300}
        failed: dict[str, dict[str, Any]] = {}
        for delivery in deliveries:  # newest first: keep each event's latest failed attempt
            guid = delivery.get("guid")
            # A ping carries no job: a failed one only says corral was not answering when the hook was set up.
            if delivery.get("event") == "ping":
                continue
            if guid not in succeeded and guid not in failed:
                failed[str(guid)] = delivery
        recovered = len({d.get("guid") for d in deliveries if not 200 <= int(d.get("status_code") or 0) < 300}) - len(
            failed
        )
        events = len({d.get("guid") for d in deliveries})
        if not failed:
            note = f" ({recovered} succeeded on a redelivery)" if recovered else ""
            self.section.passed("webhook deliveries", f"the last {events} events were all delivered{note}")
            return
        codes = [int(d.get("status_code") or 0) for d in failed.values()]
        newest = next(iter(failed.values()))
        detail = (
            f"{len(failed)} of the last {events} events were never delivered (newest: {newest.get('event')} at "
            f"{newest.get('delivered_at')}, {newest.get('status')!r})"
        )
        if 401 in codes:
            fix = (
                "corral refused their signatures (401): make the App's Webhook secret the same as "
                "github.webhook_secret(_file)"
            )
        elif 0 in codes:
            fix = (
                "GitHub could not connect to the webhook URL: make https://<corral>/webhook reachable from GitHub "
                "(DNS, TLS, firewall); corral redelivers failed ones every missed_job_scan once it can"
            )
        else:
            fix = "see each delivery's response in the App's settings (Advanced, Recent Deliveries)"
        self.section.failed("webhook deliveries", detail, fix)

    # -- personal access token --------------------------------------------------------------------

    def _token(self) -> None:
        try:
            answer = self._get("/rate_limit")
        except Unreachable as exc:
            self.section.failed("token", str(exc), "run the doctor again once GitHub answers")
            return
        if answer.status == 401:
            self.section.failed(
                "token",
                f"GitHub refused the token: HTTP 401: {_message(answer.body)}",
                "create a new token (Settings, Developer settings, Personal access tokens) and put it in "
                "github.token_file",
            )
            for key in {pool.scope.key for pool in self.config.pools.values()}:
                self.section.skipped(f"token scopes {key}", "the token was refused")
            return
        self.section.passed("token", f"accepted (HTTP {answer.status})")
        header = answer.headers.get("x-oauth-scopes")
        granted = {scope.strip() for scope in (header or "").split(",") if scope.strip()}
        for implied_by, implied in IMPLIED_SCOPES.items():
            if implied_by in granted:
                granted |= implied
        scopes = {pool.scope.key: pool.scope for pool in self.config.pools.values()}
        for scope in scopes.values():
            if header is None:
                self._probe(scope)
            else:
                self._classic_scopes(scope, granted)
        if self.github.webhook_secret is None:
            self.section.warned(
                "webhook secret",
                "github.webhook_secret is not set: corral serves no /webhook and finds jobs only by polling",
                "set github.webhook_secret_file and add a webhook (Workflow jobs) with the same secret to the "
                "organisation or repository",
            )
        else:
            self.section.skipped(
                "webhook",
                "with a token, the webhook is the organisation's or repository's own: check its Recent Deliveries "
                "in their settings (Webhooks)",
            )

    def _classic_scopes(self, scope: ScopeConfig, granted: set[str]) -> None:
        item = f"token scopes {scope.key}"
        missing = [" or ".join(options) for options in PAT_SCOPES[scope.kind] if not granted & set(options)]
        if missing:
            self.section.failed(
                item,
                f"the token's scopes ({', '.join(sorted(granted)) or 'none'}) lack {', '.join(missing)}",
                f"edit the token (Settings, Developer settings, Tokens (classic)) and tick {', '.join(missing)}",
            )
        elif scope.kind != "repo" and "repo" not in granted:
            self.section.warned(
                item,
                "the token lacks repo: corral cannot read the jobs of private repositories",
                "tick repo on the token if any repository it serves is private",
            )
        else:
            self.section.passed(item, f"has {', '.join(sorted(granted))}")

    def _probe(self, scope: ScopeConfig) -> None:
        """A fine-grained token: its permissions are not disclosed, so try reading the scope's runners."""
        item = f"token scopes {scope.key}"
        path = f"{scope_path(scope)}/actions/runners"
        try:
            answer = self._get(path, params={"per_page": 1})
        except Unreachable as exc:
            self.section.failed(item, str(exc), "run the doctor again once GitHub answers")
            return
        if answer.status == 200:
            self.section.warned(
                item,
                f"a fine-grained token (GitHub does not list its permissions) that can list runners at {scope.target}",
                "make sure it also has Self-hosted runners (organisations) or Administration (repositories): "
                "Read and write, and Actions: Read-only",
            )
        else:
            self.section.failed(
                item,
                f"GET {path}: HTTP {answer.status}: {_message(answer.body)}",
                "give the token Self-hosted runners (organisations) or Administration (repositories): Read and "
                f"write, and Actions: Read-only, on {scope.target}",
            )


def check_github(config: CorralConfig, section: Section, timeout_s: float) -> None:
    GitHubDoctor(config, section, timeout_s).run()
