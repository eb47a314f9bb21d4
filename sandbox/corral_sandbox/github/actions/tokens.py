"""The three credentials of the scale-set protocol: registration tokens, admin JWTs and queue tokens.

A registration token (from `.../actions/runners/registration-token`) is exchanged once per hour or so for the
Actions service URL and an admin JWT; the JWT's `exp` is all a client reads of it (the Go client renews a
minute before). A session's `messageQueueAccessToken` is a second JWT, accepted only by the message queue
and `acquirejobs`. Both are signed with a key of this world, remembered by `jti` and checked against
GitHub's clock, so a token can be expired early (a fault) and a copied token from another world is refused.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass

import jwt

from corral_sandbox.github.model import Scope

ISSUER = "https://vstoken.actions.githubusercontent.invalid/sandbox"


@dataclass(frozen=True)
class Issued:
    subject: str
    """The tenant an admin token serves, or the session a queue token belongs to."""
    expires_at: float


class Tokens:
    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now
        self._key = secrets.token_bytes(32)
        self._registration: dict[str, tuple[Scope, float]] = {}
        self._admin: dict[str, Issued] = {}
        self._queue: dict[str, Issued] = {}

    # -- registration tokens -------------------------------------------------------------------

    def remember_registration(self, token: str, scope: Scope, ttl_s: float) -> None:
        self._registration[token] = (scope, self._now() + ttl_s)

    def registration_scope(self, token: str) -> Scope | None:
        """The scope a live registration token was issued for."""
        found = self._registration.get(token)
        if found is None or found[1] <= self._now():
            return None
        return found[0]

    # -- JWTs ----------------------------------------------------------------------------------

    def _mint(self, kind: str, subject: str, ttl_s: float, book: dict[str, Issued]) -> str:
        now = self._now()
        jti = secrets.token_hex(16)
        expires_at = now + ttl_s
        claims = {
            "iss": ISSUER,
            "aud": ISSUER,
            "sub": subject,
            "kind": kind,
            "jti": jti,
            "iat": int(now),
            "nbf": int(now),
            "exp": int(expires_at),
        }
        book[jti] = Issued(subject, expires_at)
        return jwt.encode(claims, self._key, algorithm="HS256")

    def _check(self, token: str, kind: str, book: dict[str, Issued]) -> str | None:
        try:
            # Expiry is checked below, against GitHub's clock (which a test may skew), not this machine's.
            claims = jwt.decode(
                token,
                self._key,
                algorithms=["HS256"],
                audience=ISSUER,
                options={"verify_exp": False, "verify_nbf": False},
            )
        except jwt.PyJWTError:
            return None
        issued = book.get(str(claims.get("jti")))
        if claims.get("kind") != kind or issued is None or issued.expires_at <= self._now():
            return None
        return issued.subject

    def mint_admin(self, tenant: str, ttl_s: float) -> str:
        return self._mint("admin", tenant, ttl_s, self._admin)

    def admin_tenant(self, token: str) -> str | None:
        """The tenant a live admin token serves, None for anything else."""
        return self._check(token, "admin", self._admin)

    def revoke_admin(self) -> int:
        """Expire every admin token issued so far; how many were live."""
        live = sum(1 for issued in self._admin.values() if issued.expires_at > self._now())
        self._admin.clear()
        return live

    def mint_queue(self, session_id: str, ttl_s: float) -> str:
        return self._mint("queue", session_id, ttl_s, self._queue)

    def queue_session(self, token: str) -> str | None:
        """The session a live queue token belongs to, None for anything else."""
        return self._check(token, "queue", self._queue)

    def revoke_queue(self, session_id: str | None = None) -> int:
        """Expire the queue tokens of one session (every session's if None); how many were live."""
        doomed = [jti for jti, issued in self._queue.items() if session_id is None or issued.subject == session_id]
        live = sum(1 for jti in doomed if self._queue[jti].expires_at > self._now())
        for jti in doomed:
            del self._queue[jti]
        return live
