"""A real HTTP endpoint on loopback that records what the sandbox's webhook deliveries carry."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class ReceivedDelivery:
    headers: dict[str, str]
    body: bytes


class WebhookReceiver:
    """Answers every POST with `status` (200 by default) and keeps the request."""

    def __init__(self) -> None:
        self.deliveries: list[ReceivedDelivery] = []
        self.status = 200
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                with receiver._lock:
                    receiver.deliveries.append(ReceivedDelivery(dict(self.headers.items()), body))
                self.send_response(receiver.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                """Silence the per-request access log."""

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/webhook"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self) -> WebhookReceiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def snapshot(self) -> list[ReceivedDelivery]:
        with self._lock:
            return list(self.deliveries)

    def clear(self) -> None:
        with self._lock:
            self.deliveries.clear()
