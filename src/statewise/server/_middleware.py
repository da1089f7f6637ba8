"""ASGI middleware: a request body size limit, and loopback-only when no keys are set."""

from __future__ import annotations

import ipaddress
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from statewise.server._errors import Problem, problem_response

DEFAULT_MAX_BODY_BYTES = 1024 * 1024


class _TooLarge(Exception):
    pass


class BodyLimitMiddleware:
    """Refuse bodies over `max_bytes` with 413, by Content-Length or while reading."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        problem = Problem(
            413,
            f"the request body is larger than the server's limit of {self.max_bytes} bytes",
            title="Request body too large",
        )
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    too_large = int(value) > self.max_bytes
                except ValueError:
                    too_large = False
                if too_large:
                    await problem_response(problem, scope.get("path"))(scope, receive, send)
                    return
        seen = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise _TooLarge
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _TooLarge:
            if not started:
                await problem_response(problem, scope.get("path"))(scope, receive, send)


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
