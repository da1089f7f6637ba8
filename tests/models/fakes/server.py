"""A scriptable HTTP server on 127.0.0.1 with a random port.

A test enqueues `Reply`s (status, JSON or raw body, headers, or a list of SSE events) and
the server gives them, one per request, in order; every request is recorded as `Received`
(method, path, headers, parsed JSON body) for assertions. With no reply left the server
answers 599 with a message saying so, which makes a missing script obvious.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(kw_only=True)
class Reply:
    status: int = 200
    json: Any = None
    body: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    sse: list[str] | list[bytes] | None = None
    """Pre-formatted SSE events (each ends with a blank line), or binary event-stream
    messages, streamed one chunk each with chunked transfer encoding, as real servers
    stream. The content type is `text/event-stream` unless `headers` names another."""
    cut: bool = False
    """With `sse`: drop the connection after the events, without ending the chunked body
    (what a crashed server or a broken network looks like to the client)."""
    delay: float = 0.0
    """Seconds to wait before answering (for timeout tests)."""


@dataclass(kw_only=True)
class Received:
    method: str
    path: str
    headers: dict[str, str]
    json: Any


def sse_event(data: Any, event: str | None = None) -> str:
    """One server-sent event; `data` is JSON-encoded unless it is a string already."""
    payload = data if isinstance(data, str) else json.dumps(data)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n"


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients that hang up early (timeout tests) are expected; stay quiet."""


class FakeServer:
    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.received: list[Received] = []
        self._lock = threading.Lock()
        self._httpd = _QuietServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def enqueue(self, *replies: Reply) -> None:
        with self._lock:
            self.replies.extend(replies)

    @property
    def last(self) -> Received:
        return self.received[-1]

    def start(self) -> FakeServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _next(self, received: Received) -> Reply:
        with self._lock:
            self.received.append(received)
            if self.replies:
                return self.replies.popleft()
        return Reply(status=599, json={"error": {"message": "fake server: no scripted reply"}})

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._serve()

            def do_POST(self) -> None:
                self._serve()

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode("utf-8", "replace")
                reply = server._next(
                    Received(
                        method=self.command,
                        path=self.path,
                        headers={k.lower(): v for k, v in self.headers.items()},
                        json=body,
                    )
                )
                if reply.delay:
                    time.sleep(reply.delay)
                if reply.sse is not None:
                    self.send_response(reply.status)
                    headers = {"Content-Type": "text/event-stream", **reply.headers}
                    self.send_header("Transfer-Encoding", "chunked")
                    self.send_header("Connection", "close")
                    for key, value in headers.items():
                        self.send_header(key, value)
                    self.end_headers()
                    for event in reply.sse:
                        data = event if isinstance(event, bytes) else event.encode()
                        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                        self.wfile.flush()
                    if reply.cut:
                        self.connection.shutdown(socket.SHUT_RDWR)
                    else:
                        self.wfile.write(b"0\r\n\r\n")
                    self.close_connection = True
                    return
                payload = reply.body if reply.body is not None else json.dumps(reply.json).encode()
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(payload)

        return Handler
