"""Bearer-token authentication for the REST API, with three scopes.

`read` sees everything the API shows, `admin` can also act (reload, drain, delete, reconcile), and
`metrics` can only scrape `/metrics`, so a Prometheus server needs no broader credential. Tokens are
created with `corral token create` and stored hashed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Literal

from fastapi import HTTPException, Request

from corral.store import Store, tokens
from corral.store.tokens import ApiToken

Scope = Literal["read", "admin", "metrics"]
SCOPES: tuple[Scope, ...] = ("read", "admin", "metrics")
GRANTS: dict[str, frozenset[str]] = {
    "read": frozenset({"read", "metrics"}),
    "admin": frozenset({"read", "admin", "metrics"}),
    "metrics": frozenset({"metrics"}),
}


def bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


def requires(store: Store, needed: Scope) -> Callable[[Request], Awaitable[ApiToken]]:
    """A FastAPI dependency admitting requests whose bearer token grants `needed`."""

    async def check(request: Request) -> ApiToken:
        text = bearer(request)
        if text is None:
            raise HTTPException(401, "a bearer token is required", headers={"WWW-Authenticate": "Bearer"})
        token = await store.run(tokens.authenticate, text)
        if token is None:
            raise HTTPException(401, "invalid or revoked token", headers={"WWW-Authenticate": "Bearer"})
        if needed not in GRANTS.get(token.scope, frozenset()):
            raise HTTPException(403, f"this token's scope ({token.scope}) does not allow {needed}")
        return token

    return check
