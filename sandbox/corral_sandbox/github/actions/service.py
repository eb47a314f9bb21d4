"""The Actions service of one world: what the routes, the control API and GitHub's state call.

It ties the registry (tenants, groups, scale sets), the sessions and their queues, the job router and the
tokens together, and does what touches several of them: the registration exchange, JIT configs for a scale
set's runners, deleting a scale set (as an admin does, or as GitHub does to a set left inactive for days:
its session ends, its idle runners are removed, the jobs it had not started wait for another set).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from corral_sandbox.github import jitconfig
from corral_sandbox.github.actions import errors, views
from corral_sandbox.github.actions.jobs import JobRouter
from corral_sandbox.github.actions.model import ScaleSet, Session, Tenant
from corral_sandbox.github.actions.registry import Registry
from corral_sandbox.github.actions.sessions import Sessions
from corral_sandbox.github.actions.settings import ActionsSettings
from corral_sandbox.github.actions.tokens import Tokens
from corral_sandbox.github.errors import GitHubError
from corral_sandbox.github.model import Runner

if TYPE_CHECKING:
    from corral_sandbox.github.state import GitHubState
    from corral_sandbox.world import World

SERVICE_PREFIX = "/_actions"
BROKER_PATH = f"{SERVICE_PREFIX}/broker/scalesets/message"


class ActionsService:
    def __init__(self, world: World, state: GitHubState, settings: ActionsSettings) -> None:
        self.world = world
        self.state = state
        self.settings = settings
        self.tokens = Tokens(state.now)
        self.registry = Registry(state.directory)
        self.sessions = Sessions(state.now, lambda: self.settings, self.tokens)
        self.jobs = JobRouter(
            world, state.scheduler, self.registry, self.sessions, lambda: self.settings, self.service_url
        )

    # -- addresses -----------------------------------------------------------------------------

    def service_url(self, tenant: Tenant) -> str:
        """The Actions service URL the exchange hands out; with its trailing slash, as GitHub's has one."""
        return f"{self.world.github_url}{SERVICE_PREFIX}/{tenant.id}/"

    @property
    def queue_url(self) -> str:
        """Where every session's messages are polled, as github.com's broker: the queue token names the session."""
        return f"{self.world.github_url}{BROKER_PATH}"

    # -- authentication ------------------------------------------------------------------------

    def exchange(self, registration_token: str, owner_path: str) -> tuple[Tenant, str]:
        """The tenant and an admin token for a live registration token of the scope `owner_path` names."""
        scope = self.tokens.registration_scope(registration_token)
        tenant = self.registry.tenant_for(owner_path) if scope is not None else None
        if tenant is None or tenant.scope != scope:
            raise GitHubError(404, "Not Found")
        return tenant, self.tokens.mint_admin(tenant.id, self.settings.admin_token_ttl_s)

    def admin(self, token: str | None, tenant_id: str) -> Tenant:
        """The tenant a live admin token serves, if it is the one the URL names; 401 otherwise."""
        serves = self.tokens.admin_tenant(token) if token else None
        tenant = self.registry.tenants.get(tenant_id)
        if serves is None or tenant is None or serves != tenant_id:
            raise errors.unauthorized()
        return tenant

    # -- scale sets ----------------------------------------------------------------------------

    def scale_set_json(self, scale_set: ScaleSet) -> dict[str, Any]:
        group = self.registry.group(scale_set.scope, scale_set.group_id)
        return views.scale_set(
            scale_set, group.name, self.service_url(scale_set.tenant), self.jobs.statistics(scale_set)
        )

    def created(self, scale_set: ScaleSet) -> None:
        """A new or changed scale set may fit jobs waiting on classic runners or on other sets."""
        self.jobs.adopt_queued()

    def delete_scale_set(self, scale_set: ScaleSet) -> None:
        session = self.sessions.active(scale_set.id)
        if session is not None:
            self.sessions.drop(session)
        self.registry.remove(scale_set)
        self.jobs.scale_set_removed(scale_set)
        for runner in self.runners_of(scale_set):
            if not runner.busy:
                self.state.scheduler.delete(runner)

    def runners_of(self, scale_set: ScaleSet) -> list[Runner]:
        return [r for r in self.state.scheduler.in_scope(scale_set.scope) if r.scale_set_id == scale_set.id]

    def generate_jit(self, scale_set: ScaleSet, name: str, work_folder: str) -> tuple[Runner, str]:
        """Register a runner of the set (listed offline until a guest starts it) and its JIT config."""
        try:
            scheduler = self.state.scheduler
            runner = scheduler.register(scale_set.scope, name, scale_set.group_id, scale_set.labels, work_folder)
        except GitHubError as exc:
            raise errors.agent_exists(name) from exc
        runner.scale_set_id = scale_set.id
        config = jitconfig.encode(runner, self.world.github_url, scale_set.tenant.owner_path)
        self.state.jit_config_issued(config)
        return runner, config

    # -- sessions ------------------------------------------------------------------------------

    def session_json(self, session: Session, scale_set: ScaleSet, token: str) -> dict[str, Any]:
        return views.session(
            session, self.scale_set_json(scale_set), self.queue_url, token, self.jobs.statistics(scale_set)
        )

    def open_session(self, scale_set: ScaleSet, owner: str) -> dict[str, Any]:
        session, token = self.sessions.open(scale_set, owner)
        self.jobs.session_opened(scale_set)
        return self.session_json(session, scale_set, token)

    def kill_session(self, scale_set_id: int) -> bool:
        """GitHub drops the set's session (an eviction): True if it had one."""
        session = self.sessions.active(scale_set_id)
        if session is None:
            return False
        self.sessions.drop(session)
        return True

    def advertise(self, session: Session, capacity: int | None) -> None:
        """The capacity a poll advertised: github.com fills each set up to it (more room may pull jobs in)."""
        scale_set = self.registry.scale_sets.get(session.scale_set_id)
        if scale_set is not None and capacity is not None and capacity != scale_set.capacity:
            scale_set.capacity = capacity
            self.jobs.schedule()

    # -- the world's views ---------------------------------------------------------------------

    def view(self) -> list[dict[str, Any]]:
        """Every scale set with its session and statistics, for the control API."""
        now = self.state.now()
        sets = []
        for scale_set in self.registry.scale_sets.values():
            session = self.sessions.active(scale_set.id)
            sets.append(
                {
                    "id": scale_set.id,
                    "name": scale_set.name,
                    "tenant": scale_set.tenant.id,
                    "scope": f"{scale_set.scope.kind}/{scale_set.tenant.owner_path.removeprefix('enterprises/')}",
                    "runner_group_id": scale_set.group_id,
                    "labels": list(scale_set.labels),
                    "capacity": scale_set.capacity,
                    "session": None
                    if session is None
                    else {
                        "id": session.id,
                        "owner": session.owner,
                        "idle_s": 0.0 if session.polls else round(now - session.last_seen, 3),
                        "pending": len(session.pending),
                        "inflight_message_id": session.inflight.message_id if session.inflight else None,
                    },
                    "statistics": self.jobs.statistics(scale_set),
                }
            )
        return sets

    def snapshot(self) -> dict[str, Any]:
        return {
            "scale_sets": len(self.registry.scale_sets),
            "sessions": sum(1 for s in self.registry.scale_sets if self.sessions.active(s) is not None),
            "jobs": len(self.jobs.tracked),
        }

    def shutdown(self) -> None:
        """The world is reset: every session ends, so a poll held open answers (401) instead of hanging on."""
        self.sessions.drop_all()
