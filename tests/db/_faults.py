"""A fault-injecting TCP proxy on loopback, in front of a real PostgreSQL or Redis.

Arm one fault, then let the client talk through `proxy.url`:

- `"before_request"`: the next request from the client is swallowed and the connection
  dropped; the server never sees it.
- `"after_request"`: the next request reaches the server, its answer is dropped with the
  connection (the server may still be executing it).
- `"after_reply"`: the next request and its answer both pass, then the connection drops.

`on_fault` (optional) runs inside the proxy when the fault fires, before the connection
is cut: e.g. another writer's commit, so a retry follows it. `drop_all()` cuts every open
connection at once (a commit blocked behind another writer loses its client).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

Fault = Literal["before_request", "after_request", "after_reply"]


class FaultProxy:
    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.target = (parts.hostname or "127.0.0.1", parts.port or 0)
        self.listener = socket.create_server(("127.0.0.1", 0))
        port = self.listener.getsockname()[1]
        netloc = parts.netloc.replace(f"{parts.hostname}:{parts.port}", f"127.0.0.1:{port}")
        self.url = urlunsplit(parts._replace(netloc=netloc))
        self.fault: Fault | None = None
        self.on_fault: Callable[[], None] | None = None
        self.match: bytes | None = None
        self.fired = 0
        self.hook_errors: list[Exception] = []
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(
        self, fault: Fault, on_fault: Callable[[], None] | None = None, match: bytes = b""
    ) -> None:
        """Fire `fault` at the next request containing `match` (any request if empty)."""
        with self._lock:
            self.fault = fault
            self.on_fault = on_fault
            self.match = match

    def _take(self, fault: Fault, data: bytes) -> object:
        """The armed fault's hook (None if it has none) if `fault` is armed for this
        request, else False."""
        with self._lock:
            if self.fault != fault or (self.match and self.match not in data):
                return False
            self.fault = None
            self.fired += 1
            hook, self.on_fault = self.on_fault, None
            return hook

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._pairs.append((client, server))
            conn: dict[str, object] = {}
            threading.Thread(
                target=self._pump, args=(client, server, True, conn), daemon=True
            ).start()
            threading.Thread(
                target=self._pump, args=(server, client, False, conn), daemon=True
            ).start()

    def _fire(self, hook: object) -> None:
        if callable(hook):
            try:
                hook()
            except Exception as exc:  # reported by the test through `hook_errors`
                self.hook_errors.append(exc)

    def _pump(
        self, src: socket.socket, dst: socket.socket, upstream: bool, conn: dict[str, object]
    ) -> None:
        try:
            while data := src.recv(65536):
                if upstream:
                    hook = self._take("before_request", data)
                    if hook is not False:
                        self._fire(hook)
                        raise OSError("cut before request")
                    armed: tuple[Fault, ...] = ("after_request", "after_reply")
                    for fault in armed:
                        hook = self._take(fault, data)
                        if hook is not False:
                            conn["fault"], conn["hook"] = fault, hook
                            break
                    dst.sendall(data)
                else:
                    cut = conn.get("fault")
                    if cut == "after_request":
                        self._fire(conn.get("hook"))
                        raise OSError("cut after request")
                    if cut == "after_reply":
                        # The other writer commits before our client sees the reply.
                        self._fire(conn.get("hook"))
                        dst.sendall(data)
                        raise OSError("cut after reply")
                    dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def drop_all(self) -> None:
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            for s in pair:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()

    def close(self) -> None:
        self.listener.close()
        self.drop_all()
