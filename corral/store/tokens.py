"""API tokens: created once and shown once, stored as a hash, checked on every authenticated request."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from sqlalchemy import Connection, insert, select, update

from corral.clock import utcnow
from corral.store.schema import API_TOKENS as TOKENS

Scope = Literal["read", "admin", "metrics"]
"""What a token grants (`corral token create --scope`): kept with the tokens, not the API, so that the command
that creates them does not import the web framework that checks them."""
SCOPES: tuple[Scope, ...] = ("read", "admin", "metrics")
GRANTS: dict[str, frozenset[str]] = {
    "read": frozenset({"read", "metrics"}),
    "admin": frozenset({"read", "admin", "metrics"}),
    "metrics": frozenset({"metrics"}),
}
"""The scopes each token's scope admits."""
LAST_USED_RESOLUTION = timedelta(seconds=60)
"""`last_used_at` is refreshed at most this often, so reading the API does not write on every request."""


@dataclass(frozen=True, slots=True)
class ApiToken:
    id: str
    name: str
    scope: str
    """`read`, `admin` (read and act) or `metrics` (only /metrics)."""
    created_at: datetime
    last_used_at: datetime | None = None
    revoked_at: datetime | None = None


COLUMNS = (
    TOKENS.c.id,
    TOKENS.c.name,
    TOKENS.c.scope,
    TOKENS.c.created_at,
    TOKENS.c.last_used_at,
    TOKENS.c.revoked_at,
)


def hash_token(text: str) -> str:
    """Tokens are 256 random bits, so a plain SHA-256 is the right hash: fast to check, useless to invert."""
    return hashlib.sha256(text.encode()).hexdigest()


def _token(row: Any) -> ApiToken:
    return ApiToken(*row)


def create(connection: Connection, name: str, scope: str, *, now: datetime | None = None) -> tuple[ApiToken, str]:
    """A new token; returns it and its text, which is never stored and never shown again. `now`: its
    creation time (the caller's clock; the system's by default)."""
    token_id = secrets.token_hex(4)
    text = f"corral_{token_id}_{secrets.token_urlsafe(32)}"
    token = ApiToken(id=token_id, name=name, scope=scope, created_at=now or utcnow())
    connection.execute(
        insert(TOKENS).values(
            id=token.id, name=name, scope=scope, token_hash=hash_token(text), created_at=token.created_at
        )
    )
    return token, text


def listing(connection: Connection) -> list[ApiToken]:
    return [_token(row) for row in connection.execute(select(*COLUMNS).order_by(TOKENS.c.created_at))]


def revoke(connection: Connection, token_id: str, *, now: datetime | None = None) -> bool:
    result = connection.execute(
        update(TOKENS).where(TOKENS.c.id == token_id, TOKENS.c.revoked_at.is_(None)).values(revoked_at=now or utcnow())
    )
    return bool(result.rowcount)


def authenticate(connection: Connection, text: str, *, now: datetime | None = None) -> ApiToken | None:
    """The live token with this text, if any; `now` is when it was used."""
    row = connection.execute(select(*COLUMNS).where(TOKENS.c.token_hash == hash_token(text))).first()
    if row is None:
        return None
    token = _token(row)
    if token.revoked_at is not None:
        return None
    now = now or utcnow()
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        connection.execute(update(TOKENS).where(TOKENS.c.id == token.id).values(last_used_at=now))
    return token
