"""A lean HTTP/1.1 load generator: keep-alive connections over asyncio streams, no client library.

A benchmark of corral's webhook intake must not be capped by its own client: httpx spends more CPU per
request than the corral it measures, on the same two cores. This writes pre-built requests and reads
answers with the least parsing that HTTP/1.1 allows (status line, Content-Length, body).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import uuid
from collections import Counter
from collections.abc import Sequence
from urllib.parse import urlsplit


def delivery_headers(secret: str, body: bytes) -> dict[str, str]:
    """The headers of one `workflow_job` delivery of `body`, signed with `secret` as GitHub signs it."""
    return {
        "X-GitHub-Event": "workflow_job",
        "X-GitHub-Delivery": str(uuid.uuid4()),
        "X-Hub-Signature-256": "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest(),
        "Content-Type": "application/json",
    }


def build_request(url: str, body: bytes, headers: dict[str, str]) -> bytes:
    parts = urlsplit(url)
    lines = [
        f"POST {parts.path or '/'} HTTP/1.1",
        f"Host: {parts.netloc}",
        f"Content-Length: {len(body)}",
        *(f"{name}: {value}" for name, value in headers.items()),
        "",
        "",
    ]
    return "\r\n".join(lines).encode() + body


async def _answer(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    if length:
        await reader.readexactly(length)
    return status


async def post_all(url: str, requests: Sequence[bytes], concurrency: int) -> Counter[int]:
    """Send every request, `concurrency` connections at a time each waiting for its answer; count statuses."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    pending = list(reversed(requests))
    statuses: Counter[int] = Counter()

    async def connection() -> None:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            while pending:
                writer.write(pending.pop())
                statuses[await _answer(reader)] += 1
        finally:
            writer.close()

    await asyncio.gather(*(connection() for _ in range(concurrency)))
    return statuses


async def post_round_robin(urls: Sequence[str], requests: Sequence[bytes], concurrency: int) -> Counter[int]:
    """Request i to `urls[i mod n]`, as a round-robin balancer would, each URL with its share of the
    `concurrency` connections; count statuses over all."""
    count = len(urls)
    shares = [concurrency // count + (1 if index < concurrency % count else 0) for index in range(count)]
    answers = await asyncio.gather(
        *(
            post_all(url, requests[index::count], max(share, 1))
            for index, (url, share) in enumerate(zip(urls, shares, strict=True))
        )
    )
    return sum(answers, Counter())
