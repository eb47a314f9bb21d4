"""Message sessions and their queues: one listener per scale set, job messages in batches, at least once.

A scale set has at most one session. A second `POST .../sessions` gets 409 while the first lives, and the
first lives until it is deleted or, if its owner crashed and never deleted it, until nobody has polled it for
`session_expiry_s` (GitHub does not document its figure; see `ActionsSettings`). A session that GitHub drops
(expiry, a kill fault, its scale set deleted) is gone at once: its queue token stops working (401, which
the Go client answers by refreshing), the refresh answers 404 and a delete 400, as GitHub answers an evicted
session (actions/scaleset #123, ARC #4285).

Job messages are queued on the session (none while there is no session: a new listener learns the state
from the session's statistics, as the reference listener does). A poll takes up to 50 of them as one
message; until that message is acknowledged (`DELETE {queue}/{messageId}`) every poll gets it again, same id
and body. `lastMessageId` is accepted but acknowledges nothing: only the delete does.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from itertools import count
from typing import Any

from corral_sandbox.github.actions import errors
from corral_sandbox.github.actions.model import Delivery, ScaleSet, Session
from corral_sandbox.github.actions.settings import MESSAGE_BATCH, ActionsSettings
from corral_sandbox.github.actions.tokens import Tokens

MESSAGE_TYPE = "RunnerScaleSetJobMessages"


class Sessions:
    def __init__(self, now: Callable[[], float], settings: Callable[[], ActionsSettings], tokens: Tokens) -> None:
        self._now = now
        self._settings = settings
        self._tokens = tokens
        self.by_id: dict[str, Session] = {}
        self._of_set: dict[int, str] = {}
        self._message_ids = count(100_000_001)

    # -- lifetime ------------------------------------------------------------------------------

    def _idle_too_long(self, session: Session) -> bool:
        return session.polls == 0 and self._now() - session.last_seen > self._settings().session_expiry_s

    def active(self, scale_set_id: int) -> Session | None:
        """The scale set's live session; one its owner abandoned long enough is dropped here."""
        session_id = self._of_set.get(scale_set_id)
        session = self.by_id.get(session_id) if session_id is not None else None
        if session is not None and self._idle_too_long(session):
            self.drop(session)
            return None
        return session

    def open(self, scale_set: ScaleSet, owner: str) -> tuple[Session, str]:
        """A new session and its queue token, or 409 while another lives."""
        current = self.active(scale_set.id)
        if current is not None:
            raise errors.session_conflict(scale_set.name, current.owner)
        session = Session(id=str(uuid.uuid4()), owner=owner, scale_set_id=scale_set.id, last_seen=self._now())
        self.by_id[session.id] = session
        self._of_set[scale_set.id] = session.id
        return session, self._tokens.mint_queue(session.id, self._settings().queue_token_ttl_s)

    def find(self, scale_set_id: int, session_id: str) -> Session | None:
        session = self.active(scale_set_id)
        return session if session is not None and session.id == session_id.lower() else None

    def refresh(self, session: Session) -> str:
        """A fresh queue token; the session's older ones stop working."""
        self._tokens.revoke_queue(session.id)
        session.last_seen = self._now()
        return self._tokens.mint_queue(session.id, self._settings().queue_token_ttl_s)

    def drop(self, session: Session) -> None:
        """End a session: its tokens die and a poll waiting on it wakes (to its 401)."""
        self.by_id.pop(session.id, None)
        if self._of_set.get(session.scale_set_id) == session.id:
            del self._of_set[session.scale_set_id]
        self._tokens.revoke_queue(session.id)
        session.wakeup.set()

    def drop_all(self) -> None:
        for session in list(self.by_id.values()):
            self.drop(session)

    # -- the queue -----------------------------------------------------------------------------

    def authenticate(self, token: str | None) -> Session:
        """The live session a queue token belongs to, or 401."""
        session_id = self._tokens.queue_session(token) if token else None
        session = self.by_id.get(session_id) if session_id is not None else None
        if session is None or self.active(session.scale_set_id) is not session:
            raise errors.unauthorized()
        return session

    def emit(self, scale_set_id: int, message: dict[str, Any]) -> None:
        """Queue a job message for the scale set's listener, if it has one."""
        session = self.active(scale_set_id)
        if session is not None:
            session.pending.append(message)
            session.wakeup.set()

    def next_delivery(self, session: Session, statistics: Callable[[], dict[str, int]]) -> Delivery | None:
        """The unacknowledged message again, else a new one of up to 50 job messages, else None."""
        if session.inflight is None and session.pending:
            batch, session.pending = session.pending[:MESSAGE_BATCH], session.pending[MESSAGE_BATCH:]
            session.inflight = Delivery(next(self._message_ids), json.dumps(batch), statistics())
        return session.inflight

    def acknowledge(self, session: Session, message_id: int) -> bool:
        """Delete the in-flight message if it is `message_id`; acknowledging any other id changes nothing."""
        if session.inflight is not None and session.inflight.message_id == message_id:
            session.inflight = None
            return True
        return False

    def seen(self, session: Session) -> None:
        session.last_seen = self._now()
