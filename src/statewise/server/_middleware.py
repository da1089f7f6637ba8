"""ASGI middleware: a request body size limit, and loopback-only when no keys are set."""

from __future__ import annotations

import functools
import ipaddress
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from statewise.server._errors import Problem, problem_response

DEFAULT_MAX_BODY_BYTES = 1024 * 1024


class BodyLimitMiddleware:
    """Refuse bodies over `max_bytes` with 413, by Content-Length or while reading.

    A body without Content-Length (chunked) is read here, up to the limit, before the app
    sees it: the app's own body parsing would turn a failure mid-read into a 400.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared: int | None = None
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = None
        if declared is not None:
            # The body cannot be longer than its Content-Length (the HTTP server reads
            # that many bytes and no more), so a declared size is the whole check.
            if declared > self.max_bytes:
                await self._refuse(scope, receive, send)
            else:
                await self.app(scope, receive, send)
            return
        buffered: list[Message] = []
        seen = 0
        while True:
            message = await receive()
            buffered.append(message)
            if message["type"] != "http.request":
                break
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:
                await self._refuse(scope, receive, send)
                return
            if not message.get("more_body", False):
                break

        async def replay() -> Message:
            if buffered:
                return buffered.pop(0)
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        problem = Problem(
            413,
            f"the request body is larger than the server's limit of {self.max_bytes} bytes",
            title="Request body too large",
        )
        await problem_response(problem, scope.get("path"))(scope, receive, send)


@functools.lru_cache(maxsize=1024)
def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


class LoopbackOnlyMiddleware:
    """With no API keys there is no auth: answer only clients on this machine."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            client: Any = scope.get("client")
            if client is not None and not is_loopback(client[0]):
                problem = Problem(
                    403,
                    "this server has no API keys configured, so it only answers clients on "
                    "the same machine; set STATEWISE_API_KEYS to serve others",
                    title="Remote access needs API keys",
                )
                if scope["type"] == "http":
                    await problem_response(problem, scope.get("path"))(scope, receive, send)
                return
        await self.app(scope, receive, send)
