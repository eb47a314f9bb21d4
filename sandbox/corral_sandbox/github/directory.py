"""Accounts, repositories and the app's installations, all created the first time they are named.

A test or the demo never has to set GitHub up: naming `octo-org/app` in a request makes the organisation,
the repository and the app's installation on that organisation exist, with stable ids from then on.
Logins are matched case-insensitively, as GitHub matches them.
"""

from __future__ import annotations

from itertools import count

from corral_sandbox.github.clock import utcnow
from corral_sandbox.github.model import Account, AccountType, Installation, Repository
from corral_sandbox.github.payloads import APP_EVENTS, APP_PERMISSIONS

PAT_OWNER = "corral-admin"
"""The user the sandbox's personal access token belongs to; also the app's owner and jobs' actor."""


class Directory:
    def __init__(self) -> None:
        self.accounts: dict[str, Account] = {}
        self.repos: dict[str, Repository] = {}
        self.installations: dict[int, Installation] = {}
        self._installation_of: dict[int, Installation] = {}
        self._account_ids = count(9_000_001)
        self._repo_ids = count(700_000_001)
        self._installation_ids = count(40_000_001)
        self.pat_owner = self.account(PAT_OWNER, "User")

    def account(self, login: str, kind: AccountType = "Organization") -> Account:
        """The account `login`, created as `kind` if new; an org/user gets the app installed on it."""
        key = ("enterprise:" if kind == "Enterprise" else "") + login.lower()
        account = self.accounts.get(key)
        if account is None:
            account = Account(id=next(self._account_ids), login=login, type=kind, created_at=utcnow())
            self.accounts[key] = account
            if kind != "Enterprise":
                self._install(account)
        return account

    def existing_account(self, account_id: int) -> Account | None:
        return next((a for a in self.accounts.values() if a.id == account_id), None)

    def repo(self, owner: str, name: str) -> Repository:
        key = f"{owner}/{name}".lower()
        repo = self.repos.get(key)
        if repo is None:
            repo = Repository(id=next(self._repo_ids), owner=self.account(owner), name=name, created_at=utcnow())
            self.repos[key] = repo
        return repo

    def existing_repo(self, repo_id: int) -> Repository | None:
        return next((r for r in self.repos.values() if r.id == repo_id), None)

    def installation_of(self, account: Account) -> Installation | None:
        return self._installation_of.get(account.id)

    def _install(self, account: Account) -> None:
        installation = Installation(
            id=next(self._installation_ids),
            account=account,
            created_at=utcnow(),
            permissions=dict(APP_PERMISSIONS),
            events=list(APP_EVENTS),
        )
        self.installations[installation.id] = installation
        self._installation_of[account.id] = installation

    def uninstall(self, installation: Installation) -> None:
        """Forget an installation; its account stays, uninstalled (naming it again does not reinstall)."""
        self.installations.pop(installation.id, None)
        self._installation_of.pop(installation.account.id, None)
