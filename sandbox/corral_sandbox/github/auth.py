"""Who is calling: a personal access token, an installation access token, or the app itself (a JWT).

GitHub accepts `Authorization: token X` and `Authorization: Bearer X` for tokens. The app authenticates
with a short-lived RS256 JWT (`iss` = app id or client id, `iat` not in the future, `exp` in the future but
at most ten minutes ahead), and may only use it on the app's own endpoints; installation tokens and PATs
are refused there, the way GitHub refuses them, with "A JSON web token could not be decoded".
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Literal

import jwt
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey

from corral_sandbox.github.errors import GitHubError
from corral_sandbox.github.model import Installation

JWT_MAX_LIFETIME_S = 600
JWT_UNDECODABLE = "A JSON web token could not be decoded"

APP_ROUTE = re.compile(r"^/(app(/.*)?|(orgs|users|enterprises)/[^/]+/installation|repos/[^/]+/[^/]+/installation)$")
"""Endpoints that take the app's JWT (the same list githubkit and octokit route JWTs to)."""

PAT_RATE_LIMIT = 5000
INSTALLATION_RATE_LIMIT = 5000
APP_RATE_LIMIT = 5000


LEVELS = {"read": 1, "write": 2, "admin": 3}


@dataclass(frozen=True)
class Principal:
    """`permissions`: what an installation token was granted (the installation's, or the subset asked for)."""

    kind: Literal["pat", "installation", "app"]
    installation: Installation | None = None
    permissions: dict[str, str] = field(default_factory=dict)

    def may(self, permission: str, level: str) -> bool:
        """Whether an installation token holds `permission` at `level` or above; other principals always may
        (a PAT's scopes are not enforced by the sandbox, an app JWT is kept off these routes elsewhere)."""
        if self.kind != "installation":
            return True
        return LEVELS.get(self.permissions.get(permission, ""), 0) >= LEVELS[level]

    @property
    def rate_key(self) -> str:
        if self.installation is not None:
            return f"installation:{self.installation.id}"
        return self.kind

    @property
    def rate_limit(self) -> int:
        return {"pat": PAT_RATE_LIMIT, "installation": INSTALLATION_RATE_LIMIT, "app": APP_RATE_LIMIT}[self.kind]

    def rate_limit_subject(self, pat_user_id: int, app_id: int) -> str:
        """How GitHub names the credential in its rate-limit message."""
        if self.installation is not None:
            return f"installation ID {self.installation.id}"
        if self.kind == "app":
            return f"integration ID {app_id}"
        return f"user ID {pat_user_id}"


def bearer_token(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() not in ("token", "bearer") or not token.strip():
        return None
    return token.strip()


def is_app_route(path: str) -> bool:
    return APP_ROUTE.match(path) is not None


def verify_app_jwt(token: str, public_key: RSAPublicKey, app_id: int, client_id: str, now: float | None = None) -> None:
    """Check an app JWT with GitHub's rules at GitHub's time `now`; raise the 401 GitHub would send."""
    try:
        claims = jwt.decode(
            token,
            public_key,
            algorithms=["RS256"],
            options={"verify_exp": False, "verify_iat": False, "verify_iss": False},
        )
    except jwt.PyJWTError as exc:
        raise GitHubError(401, JWT_UNDECODABLE) from exc
    if str(claims.get("iss")) not in (str(app_id), client_id):
        raise GitHubError(401, JWT_UNDECODABLE)
    now = time.time() if now is None else now
    issued, expires = claims.get("iat"), claims.get("exp")
    if not isinstance(issued, int) or issued > now:
        raise GitHubError(
            401,
            "'Issued at' claim ('iat') must be an Integer representing the time that the assertion was issued",
        )
    if not isinstance(expires, int) or expires <= now:
        raise GitHubError(
            401,
            "'Expiration time' claim ('exp') must be a numeric value representing the future time at "
            "which the assertion expires",
        )
    if expires > now + JWT_MAX_LIFETIME_S:
        raise GitHubError(401, "'Expiration time' claim ('exp') is too far in the future")


def looks_like_jwt(token: str) -> bool:
    return token.count(".") == 2


def require_app(principal: Principal) -> None:
    if principal.kind != "app":
        raise GitHubError(401, JWT_UNDECODABLE)


def refuse_app(principal: Principal) -> None:
    """A JWT authenticates the app itself, which owns no organisation or repository resources."""
    if principal.kind == "app":
        raise GitHubError(403, "Resource not accessible by integration")
