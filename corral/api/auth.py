"""Bearer-token authentication for the REST API, with three scopes.

`read` sees everything the API shows, `admin` can also act (reload, drain, delete, reconcile), and
`metrics` can only scrape `/metrics`, so a Prometheus server needs no broader credential. Tokens are
created with `corral token create` and stored hashed.

A token travels in the `Authorization` header, or, for the dashboard, in the cookie its sign-in form sets
(`DASHBOARD_COOKIE`). Never in the URL: browser history, proxy and access logs keep URLs, so a request that
puts one there is refused, saying where the token goes instead.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import HTTPException, Request

from corral.store import Store, tokens
from corral.store.tokens import GRANTS, ApiToken, Scope

DASHBOARD_COOKIE = "corral_dashboard"
"""The dashboard's session: the token it signed in with, in a cookie scripts cannot read (HttpOnly) and that
no other site's page makes the browser send (SameSite=Strict). It admits `read` requests only: acting
(`admin`) and scraping (`metrics`) always need the header, so no page can ride the cookie into a change."""
URL_CREDENTIAL_REFUSAL = (
    "corral does not take a token in the URL, where browser history and proxy logs keep it: send it as "
    "'Authorization: Bearer <token>', or sign in with the dashboard's form; revoke a token that was in a URL "
    "(corral token revoke ID)"
)


def bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


def requires(store: Store, needed: Scope) -> Callable[[Request], Awaitable[ApiToken]]:
    """A FastAPI dependency admitting requests whose bearer token (or, for `read`, the dashboard's cookie)
    grants `needed`."""

    async def check(request: Request) -> ApiToken:
        if token_in_url(request):
            raise HTTPException(400, URL_CREDENTIAL_REFUSAL)
        text = bearer(request)
        if text is None and needed == "read":
            text = request.cookies.get(DASHBOARD_COOKIE) or None
        if text is None:
            raise HTTPException(401, "a bearer token is required", headers={"WWW-Authenticate": "Bearer"})
        return await admit(store, text, needed)

    return check


def token_in_url(request: Request) -> bool:
    """Whether the request's URL carries a token (`?token=`): refused rather than used, see the module."""
    return "token" in request.query_params


async def admit(store: Store, text: str, needed: Scope) -> ApiToken:
    """The token `text` names, if it grants `needed`: 401 (with a Bearer challenge) for an unknown or revoked
    token, 403 for a valid one whose scope does not allow `needed`."""
    token = await store.run(tokens.authenticate, text)
    if token is None:
        raise HTTPException(401, "invalid or revoked token", headers={"WWW-Authenticate": "Bearer"})
    if needed not in GRANTS.get(token.scope, frozenset()):
        raise HTTPException(403, f"this token's scope ({token.scope}) does not allow {needed}")
    return token
