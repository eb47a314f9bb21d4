"""Tenants, runner groups and runner scale sets: what `runnergroups` and `runnerscalesets` read and change.

A tenant is the Actions service's face of one scope (organisation, repository or enterprise); its URL carries
an id only this world gives out. Every scope has the `Default` runner group (id 1, as on GitHub); others are
added through the control API, the REST API having no route that creates one. Scale-set names are unique
within a runner group, case-insensitively, as GitHub enforces since ARC #2413.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import count

from corral_sandbox.github.actions import errors
from corral_sandbox.github.actions.model import RunnerGroup, ScaleSet, Tenant
from corral_sandbox.github.clock import utcnow
from corral_sandbox.github.directory import Directory
from corral_sandbox.github.model import DEFAULT_GROUP_ID, DEFAULT_GROUP_NAME, Repository, Scope

DEFAULT_GROUP = RunnerGroup(DEFAULT_GROUP_ID, DEFAULT_GROUP_NAME, is_default=True)


class Registry:
    def __init__(self, directory: Directory) -> None:
        self.directory = directory
        self.tenants: dict[str, Tenant] = {}
        self._tenant_of: dict[Scope, Tenant] = {}
        self.groups: dict[Scope, list[RunnerGroup]] = {}
        self.scale_sets: dict[int, ScaleSet] = {}
        self._group_ids = count(DEFAULT_GROUP_ID + 1)
        self._scale_set_ids = count(1)
        self.version = 0
        """Bumped whenever a scale set appears, changes or goes: what fits a job may have changed."""

    # -- tenants -------------------------------------------------------------------------------

    def tenant_for(self, owner_path: str) -> Tenant | None:
        """The tenant a GitHub config URL's path names (`org`, `org/repo`, `enterprises/ent`), or None."""
        parts = [part for part in owner_path.strip("/").split("/") if part]
        if len(parts) == 1:
            account = self.directory.account(parts[0])
            if account.type != "Organization":
                return None
            return self._tenant(f"o{account.id}", Scope("orgs", account.login.lower()), account.login)
        if len(parts) == 2 and parts[0].lower() == "enterprises":
            enterprise = self.directory.account(parts[1], "Enterprise")
            return self._tenant(
                f"e{enterprise.id}", Scope("enterprises", enterprise.login.lower()), f"enterprises/{enterprise.login}"
            )
        if len(parts) == 2:
            repo = self.directory.repo(parts[0], parts[1])
            return self._tenant(f"r{repo.id}", Scope("repos", repo.full_name.lower()), repo.full_name)
        return None

    def _tenant(self, tenant_id: str, scope: Scope, owner_path: str) -> Tenant:
        tenant = self._tenant_of.get(scope)
        if tenant is None:
            tenant = Tenant(tenant_id, scope, owner_path)
            self.tenants[tenant_id] = tenant
            self._tenant_of[scope] = tenant
        return tenant

    # -- runner groups -------------------------------------------------------------------------

    def groups_of(self, scope: Scope) -> list[RunnerGroup]:
        return [DEFAULT_GROUP, *self.groups.get(scope, [])]

    def group(self, scope: Scope, group_id: int) -> RunnerGroup:
        found = next((g for g in self.groups_of(scope) if g.id == group_id), None)
        if found is None:
            raise errors.group_not_found(group_id)
        return found

    def add_group(self, scope: Scope, name: str) -> RunnerGroup:
        """A runner group of an organisation or enterprise; names are unique in a scope, case-insensitively."""
        if any(g.name.lower() == name.lower() for g in self.groups_of(scope)):
            raise ValueError(f"a runner group named {name} already exists")
        group = RunnerGroup(next(self._group_ids), name, is_default=False)
        self.groups.setdefault(scope, []).append(group)
        return group

    # -- scale sets ----------------------------------------------------------------------------

    def in_tenant(self, tenant: Tenant) -> Iterator[ScaleSet]:
        return (s for s in self.scale_sets.values() if s.tenant.id == tenant.id)

    def get(self, tenant: Tenant, scale_set_id: int) -> ScaleSet:
        found = self.scale_sets.get(scale_set_id)
        if found is None or found.tenant.id != tenant.id:
            raise errors.scale_set_not_found(scale_set_id)
        return found

    def _check_name(self, tenant: Tenant, group: RunnerGroup, name: str, keep: ScaleSet | None = None) -> None:
        for other in self.in_tenant(tenant):
            if other is not keep and other.group_id == group.id and other.name.lower() == name.lower():
                raise errors.scale_set_exists(name, group.name)

    def create(
        self, tenant: Tenant, name: str, group_id: int, labels: list[str], settings: dict[str, bool]
    ) -> ScaleSet:
        group = self.group(tenant.scope, group_id)
        self._check_name(tenant, group, name)
        scale_set = ScaleSet(
            id=next(self._scale_set_ids),
            name=name,
            tenant=tenant,
            group_id=group.id,
            labels=labels or [name],
            created_on=utcnow(),
            **settings,
        )
        self.scale_sets[scale_set.id] = scale_set
        self.version += 1
        return scale_set

    def update(
        self,
        scale_set: ScaleSet,
        name: str | None,
        group_id: int | None,
        labels: list[str] | None,
        settings: dict[str, bool] | None,
    ) -> None:
        group = self.group(scale_set.scope, group_id if group_id is not None else scale_set.group_id)
        new_name = name if name is not None else scale_set.name
        self._check_name(scale_set.tenant, group, new_name, keep=scale_set)
        scale_set.group_id = group.id
        scale_set.name = new_name
        if labels is not None:
            scale_set.labels = labels or [new_name]
        if settings is not None:
            for key, value in settings.items():
                setattr(scale_set, key, value)
        self.version += 1

    def remove(self, scale_set: ScaleSet) -> None:
        self.scale_sets.pop(scale_set.id, None)
        self.version += 1

    def matching(self, repo: Repository, labels: list[str]) -> list[ScaleSet]:
        """The scale sets that may run a job of `repo` asking for `labels`, oldest first."""
        return [s for s in self.scale_sets.values() if s.serves(repo, labels)]
