"""A TCP proxy on loopback in front of a real PostgreSQL or Redis: it counts round trips
and injects faults, so tests see what the network sees, independent of the driver.

**Round trips.** A round trip is the client sending (any number of packets) after the
server last spoke on that connection: pipelined messages count once, a request whose
answer is split over packets counts once (`round_trips`).

**Faults.** Arm one, then let the client talk through `proxy.url`:

- `"before_request"`: the next request from the client is swallowed and the connection
  dropped; the server never sees it.
- `"after_request"`: the next request reaches the server, its answer is dropped with the
  connection (the server may still be executing it).
- `"after_reply"`: the next request and its answer both pass, then the connection drops.

`on_fault` (optional) runs inside the proxy when the fault fires, before the connection
is cut: e.g. another writer's commit, so a retry follows it. `fired` counts the faults
that fired. `drop_all()` cuts every open connection at once (a commit blocked behind
another writer loses its client); `server_gone()` does that and cuts every new one as it
connects, as a server that went away would.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

Fault = Literal["before_request", "after_request", "after_reply"]


@dataclass
class _Connection:
    """One client connection's pair of sockets and where it is in its conversation."""

    client: socket.socket
    server: socket.socket
    server_spoke: bool = True
    fault: Fault | None = None  # armed for this connection's request in flight
    hook: Callable[[], None] | None = None


class TcpProxy:
    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.target = (parts.hostname or "127.0.0.1", parts.port or 0)
        self.listener = socket.create_server(("127.0.0.1", 0))
        port = self.listener.getsockname()[1]
        netloc = parts.netloc.replace(f"{parts.hostname}:{parts.port}", f"127.0.0.1:{port}")
        self.url = urlunsplit(parts._replace(netloc=netloc))
        self.round_trips = 0
        self.fired = 0
        self.hook_errors: list[Exception] = []
        self._fault: Fault | None = None
        self._on_fault: Callable[[], None] | None = None
        self._match = b""
        self._lock = threading.Lock()
        self._open: list[_Connection] = []
        self._gone = False
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(
        self, fault: Fault, on_fault: Callable[[], None] | None = None, match: bytes = b""
    ) -> None:
        """Fire `fault` at the next request containing `match` (any request if empty)."""
        with self._lock:
            self._fault, self._on_fault, self._match = fault, on_fault, match

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self._gone:
                client.close()
                continue
            try:
                server = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            conn = _Connection(client, server)
            with self._lock:
                self._open.append(conn)
            for upstream in (True, False):
                threading.Thread(target=self._pump, args=(conn, upstream), daemon=True).start()

    def _request(self, conn: _Connection, data: bytes) -> bool:
        """Count a request's round trip and take the armed fault if it is for this
        request; False when the request must be swallowed (`before_request`)."""
        with self._lock:
            if conn.server_spoke:
                self.round_trips += 1
            conn.server_spoke = False
            if self._fault is None or (self._match and self._match not in data):
                return True
            fault, hook = self._fault, self._on_fault
            self._fault, self._on_fault = None, None
            self.fired += 1
        if fault == "before_request":
            self._fire(hook)
            return False
        conn.fault, conn.hook = fault, hook
        return True

    def _reply(self, conn: _Connection) -> tuple[bool, bool]:
        """Whether to forward the server's answer, and whether to cut the connection."""
        with self._lock:
            conn.server_spoke = True
        if conn.fault is None:
            return True, False
        self._fire(conn.hook)  # e.g. the other writer commits before our client hears back
        return conn.fault == "after_reply", True

    def _fire(self, hook: Callable[[], None] | None) -> None:
        if hook is not None:
            try:
                hook()
            except Exception as exc:  # reported by the test through `hook_errors`
                self.hook_errors.append(exc)

    def _pump(self, conn: _Connection, upstream: bool) -> None:
        src, dst = (conn.client, conn.server) if upstream else (conn.server, conn.client)
        try:
            while data := src.recv(65536):
                if upstream:
                    if not self._request(conn, data):
                        break
                    dst.sendall(data)
                    continue
                forward, cut = self._reply(conn)
                if forward:
                    dst.sendall(data)
                if cut:
                    break
        except OSError:
            pass
        _shut(conn)

    def drop_all(self) -> None:
        with self._lock:
            conns, self._open = self._open, []
        for conn in conns:
            _shut(conn)

    def server_gone(self) -> None:
        self._gone = True
        self.drop_all()

    def close(self) -> None:
        self.listener.close()
        self.drop_all()


def _shut(conn: _Connection) -> None:
    for s in (conn.client, conn.server):
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)
        s.close()
