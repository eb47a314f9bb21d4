"""A loopback TCP proxy that can cut connections or answer 503, put in front of one OpenStack service.

Faults are injected on the wire, below openstacksdk and keystoneauth, so the test sees exactly what a
load balancer dropping a connection or an overloaded API returning 503 would produce in production.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

Fault = Literal["drop", "503", "hang"]
"""`drop`: read the request, then close without answering. `503`: answer 503 without reaching the service.
`hang`: read the request and never answer (until the fault is cleared), like an API stuck on a database lock."""

_BODY = b'{"computeFault": {"code": 503, "message": "injected by the test proxy: try again later"}}'
SERVICE_UNAVAILABLE = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
    + f"Content-Length: {len(_BODY)}\r\nConnection: close\r\n\r\n".encode()
    + _BODY
)


@dataclass
class Injection:
    fault: Fault
    remaining: int | None
    """How many more connections get the fault; None for every one until cleared."""


@dataclass
class TcpProxy:
    """Forwards 127.0.0.1:<port> to a target; `inject` makes the next connections fail instead."""

    target: tuple[str, int]
    connections: int = 0
    faulted: int = 0
    _injection: Injection | None = None
    _listener: socket.socket = field(init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _open: set[socket.socket] = field(default_factory=set)
    _closed: threading.Event = field(default_factory=threading.Event)
    _release: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        threading.Thread(target=self._accept, name="tcp-proxy", daemon=True).start()

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    def inject(self, fault: Fault, connections: int | None = None) -> None:
        """Fail the next `connections` new connections (all of them when None), and cut the open ones."""
        with self._lock:
            self._injection = Injection(fault, connections)
        self.cut()

    def clear(self) -> None:
        """Forward new connections again, and let go of the connections held by `hang`."""
        with self._lock:
            self._injection = None
            release, self._release = self._release, threading.Event()
        release.set()

    def cut(self) -> None:
        """Close every forwarded connection, as an idle-timeout on a load balancer would."""
        with self._lock:
            sockets, self._open = list(self._open), set()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
        self.clear()
        self.cut()

    def _take_fault(self) -> Fault | None:
        with self._lock:
            self.connections += 1
            injection = self._injection
            if injection is None:
                return None
            if injection.remaining is not None:
                injection.remaining -= 1
                if injection.remaining <= 0:
                    self._injection = None
            self.faulted += 1
            return injection.fault

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            fault = self._take_fault()
            handler = self._forward if fault is None else self._fail
            threading.Thread(target=handler, args=(client, fault), daemon=True).start()

    def _fail(self, client: socket.socket, fault: Fault | None) -> None:
        with self._lock:
            release = self._release
        with client:
            _read_request_head(client)
            if fault == "503":
                client.sendall(SERVICE_UNAVAILABLE)
            elif fault == "hang":
                release.wait()

    def _forward(self, client: socket.socket, _: Fault | None) -> None:
        try:
            upstream = socket.create_connection(self.target, timeout=10)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        with self._lock:
            self._open.update((client, upstream))
        threading.Thread(target=_pipe, args=(upstream, client), daemon=True).start()
        _pipe(client, upstream)


def _read_request_head(sock: socket.socket) -> bytes:
    """Consume the request line and headers, so the client has sent its request before the fault."""
    sock.settimeout(5)
    data = b""
    with contextlib.suppress(OSError):
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    return data


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while chunk := source.recv(65536):
            sink.sendall(chunk)
    for sock in (source, sink):
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


@contextlib.contextmanager
def proxy_to(host: str, port: int) -> Iterator[TcpProxy]:
    proxy = TcpProxy((host, port))
    try:
        yield proxy
    finally:
        proxy.close()
