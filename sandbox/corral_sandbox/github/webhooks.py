"""Webhook deliveries: signed POSTs from a bounded pool of workers, and the app's delivery log.

Events are serialised when they happen (so a payload shows the job as it was), then queued to one of
`WORKERS` delivery tasks chosen by the event's ordering key (the job id), so one job's `queued`,
`in_progress` and `completed` arrive in order while different jobs go out in parallel, and a slow receiver
never blocks a REST handler. Each attempt is logged the way `GET /app/hook/deliveries` shows it;
failed ones can be redelivered with the same GUID.

Two world faults apply: `webhook_drop_rate` (the attempt fails and is logged as failed) and
`webhook_lose_rate` (the event is never attempted and leaves no trace, as when GitHub has an incident).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import time
import uuid
import zlib
from collections import Counter, OrderedDict
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import httpx

from corral_sandbox.github.clock import isoformat, utcnow

if TYPE_CHECKING:
    from corral_sandbox.world import World

WORKERS = 16
TIMEOUT_S = 10.0
"""GitHub gives a receiver ten seconds to answer."""
LOG_LIMIT = 20_000
"""Deliveries kept in the log (bodies compressed); GitHub keeps three days' worth."""
FIRST_DELIVERY_ID = 10_000_000_001
USER_AGENT = "GitHub-Hookshot/5f3a2b1"


@dataclass
class Outgoing:
    """One attempt to make: the serialised event plus where it belongs in the log."""

    generation: int
    guid: str
    event: str
    action: str | None
    body: bytes
    installation_id: int | None
    repository_id: int | None
    redelivery: bool


@dataclass
class Delivery:
    """One attempt, as the delivery log shows it."""

    id: int
    guid: str
    event: str
    action: str | None
    installation_id: int | None
    repository_id: int | None
    redelivery: bool
    delivered_at: datetime
    duration: float
    status: str
    status_code: int
    url: str
    request_headers: dict[str, str]
    compressed_body: bytes
    response_headers: dict[str, str]
    response_body: str

    @property
    def body(self) -> bytes:
        return zlib.decompress(self.compressed_body)

    @property
    def succeeded(self) -> bool:
        return 200 <= self.status_code < 300

    def item(self) -> dict[str, Any]:
        """The `hook-delivery-item` shape of the list endpoint."""
        return {
            "id": self.id,
            "guid": self.guid,
            "delivered_at": isoformat(self.delivered_at),
            "redelivery": self.redelivery,
            "duration": round(self.duration, 2),
            "status": self.status,
            "status_code": self.status_code,
            "event": self.event,
            "action": self.action,
            "installation_id": self.installation_id,
            "repository_id": self.repository_id,
            "throttled_at": None,
        }


def signature_headers(secret: str, body: bytes) -> dict[str, str]:
    """`X-Hub-Signature-256` (HMAC-SHA256) and the legacy `X-Hub-Signature` (HMAC-SHA1) of the raw body."""
    key = secret.encode()
    return {
        "X-Hub-Signature": "sha1=" + hmac.new(key, body, hashlib.sha1).hexdigest(),
        "X-Hub-Signature-256": "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest(),
    }


class WebhookDispatcher:
    """Queues, sends, signs and logs the app's webhook deliveries."""

    def __init__(self, world: World, hook_id: int) -> None:
        self.world = world
        self.hook_id = hook_id
        self.url: str | None = None
        self.secret: str | None = None
        """What deliveries are signed with; None: the hook has no secret and deliveries carry no signature."""
        self.log: OrderedDict[int, Delivery] = OrderedDict()
        self.lost: list[tuple[str, str | None, int]] = []
        """Events `webhook_lose_rate` swallowed, as (event, action, ordering key): GitHub keeps no trace of
        them, but a benchmark must tell a job nobody was told about from one corral lost."""
        self.counts: Counter[str] = Counter()
        self._generation = 0
        self._next_id = FIRST_DELIVERY_ID
        self._queues: list[asyncio.Queue[Outgoing]] = []
        self._workers: list[asyncio.Task[None]] = []
        self._client: httpx.AsyncClient | None = None

    def reset(self) -> None:
        """Forget the log and counters; attempts queued before now are skipped."""
        self._generation += 1
        self.log.clear()
        self.lost.clear()
        in_queue = self.counts["queued"]
        self.counts.clear()
        self.counts["queued"] = in_queue
        self._next_id = FIRST_DELIVERY_ID

    async def close(self) -> None:
        for worker in self._workers:
            worker.cancel()
        for worker in self._workers:
            with contextlib.suppress(asyncio.CancelledError):
                await worker
        self._workers.clear()
        self._queues.clear()
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    # -- producing ---------------------------------------------------------------------------

    def emit(
        self,
        event: str,
        payload: dict[str, Any],
        *,
        ordering_key: int,
        installation_id: int | None,
        repository_id: int | None,
    ) -> None:
        """Serialise `payload` now and queue its delivery (unless no hook is set or the event is lost)."""
        if self.url is None:
            return
        if self.world.faults.chance(self.world.faults.world.webhook_lose_rate):
            self.counts["lost"] += 1
            action = payload.get("action")
            if len(self.lost) < LOG_LIMIT:
                self.lost.append((event, action if isinstance(action, str) else None, ordering_key))
            return
        body = json.dumps(payload, separators=(",", ":")).encode()
        action = payload.get("action")
        self._enqueue(
            ordering_key,
            Outgoing(
                generation=self._generation,
                guid=str(uuid.uuid4()),
                event=event,
                action=action if isinstance(action, str) else None,
                body=body,
                installation_id=installation_id,
                repository_id=repository_id,
                redelivery=False,
            ),
        )

    def redeliver(self, delivery_id: int) -> bool:
        """Queue another attempt of a logged delivery: same GUID and payload, marked as a redelivery."""
        original = self.log.get(delivery_id)
        if original is None or self.url is None:
            return False
        self._enqueue(
            delivery_id,
            Outgoing(
                generation=self._generation,
                guid=original.guid,
                event=original.event,
                action=original.action,
                body=original.body,
                installation_id=original.installation_id,
                repository_id=original.repository_id,
                redelivery=True,
            ),
        )
        return True

    def _enqueue(self, ordering_key: int, outgoing: Outgoing) -> None:
        if not self._workers:
            self._start_workers()
        self.counts["queued"] += 1
        self._queues[ordering_key % WORKERS].put_nowait(outgoing)

    def _start_workers(self) -> None:
        self._queues = [asyncio.Queue() for _ in range(WORKERS)]
        self._workers = [self.world.spawn(self._work(queue)) for queue in self._queues]

    # -- delivering --------------------------------------------------------------------------

    async def _work(self, queue: asyncio.Queue[Outgoing]) -> None:
        while True:
            outgoing = await queue.get()
            try:
                if outgoing.generation == self._generation and self.url is not None:
                    await self._attempt(outgoing, self.url)
            finally:
                self.counts["queued"] -= 1

    def _headers(self, outgoing: Outgoing) -> dict[str, str]:
        return {
            "Accept": "*/*",
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            "X-GitHub-Delivery": outgoing.guid,
            "X-GitHub-Event": outgoing.event,
            "X-GitHub-Hook-ID": str(self.hook_id),
            "X-GitHub-Hook-Installation-Target-ID": str(self.world.credentials.github_app_id),
            "X-GitHub-Hook-Installation-Target-Type": "integration",
            **(signature_headers(self.secret, outgoing.body) if self.secret else {}),
        }

    async def _attempt(self, outgoing: Outgoing, url: str) -> None:
        headers = self._headers(outgoing)
        started = time.monotonic()
        delivered_at = utcnow()
        response_headers: dict[str, str] = {}
        response_body = ""
        dropped = self.world.faults.chance(self.world.faults.world.webhook_drop_rate)
        if dropped:
            status_code, status = 0, "failed to connect to host"
        else:
            if self._client is None:
                self._client = httpx.AsyncClient(timeout=TIMEOUT_S)
            try:
                response = await self._client.post(url, content=outgoing.body, headers=headers)
            except httpx.TimeoutException:
                status_code, status = 0, "timed out"
            except httpx.HTTPError:
                status_code, status = 0, "failed to connect to host"
            else:
                status_code = response.status_code
                status = "OK" if response.is_success else f"Invalid HTTP Response: {status_code}"
                response_headers = dict(response.headers.items())
                response_body = response.text
        if outgoing.generation != self._generation:
            return
        if dropped:
            self.counts["dropped"] += 1
        else:
            self.counts["sent" if 200 <= status_code < 300 else "failed"] += 1
        self._record(
            outgoing,
            url,
            headers,
            delivered_at,
            time.monotonic() - started,
            status_code,
            status,
            response_headers,
            response_body,
        )

    def _record(
        self,
        outgoing: Outgoing,
        url: str,
        headers: dict[str, str],
        delivered_at: datetime,
        duration: float,
        status_code: int,
        status: str,
        response_headers: dict[str, str],
        response_body: str,
    ) -> None:
        delivery = Delivery(
            id=self._next_id,
            guid=outgoing.guid,
            event=outgoing.event,
            action=outgoing.action,
            installation_id=outgoing.installation_id,
            repository_id=outgoing.repository_id,
            redelivery=outgoing.redelivery,
            delivered_at=delivered_at,
            duration=duration,
            status=status,
            status_code=status_code,
            url=url,
            request_headers=headers,
            compressed_body=zlib.compress(outgoing.body, 1),
            response_headers=response_headers,
            response_body=response_body,
        )
        self._next_id += 1
        self.log[delivery.id] = delivery
        while len(self.log) > LOG_LIMIT:
            self.log.popitem(last=False)

    # -- reading -----------------------------------------------------------------------------

    def newest_first(self, status: str | None = None) -> list[Delivery]:
        deliveries = reversed(self.log.values())
        if status == "success":
            return [d for d in deliveries if d.succeeded]
        if status == "failure":
            return [d for d in deliveries if not d.succeeded]
        return list(deliveries)

    def detail(self, delivery: Delivery) -> dict[str, Any]:
        """The `hook-delivery` shape: the item plus the request and response."""
        return {
            **delivery.item(),
            "url": delivery.url,
            "request": {"headers": delivery.request_headers, "payload": json.loads(delivery.body)},
            "response": {"headers": delivery.response_headers, "payload": delivery.response_body},
        }

    def snapshot(self) -> dict[str, int]:
        return {
            "sent": self.counts["sent"],
            "failed": self.counts["failed"],
            "dropped": self.counts["dropped"],
            "lost": self.counts["lost"],
            "pending": self.counts["queued"],
            "logged": len(self.log),
        }
