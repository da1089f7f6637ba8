"""Record which status each route answered while the API tests ran (when
STATEWISE_RECORD_STATUSES names a file), so a test can check they are all declared."""

from __future__ import annotations

import json
import os
import re
import threading
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

RECORD_ENV = "STATEWISE_RECORD_STATUSES"
_lock = threading.Lock()


def route_of(app: Any, scope: Scope) -> str | None:
    """The path template of the schema route this request matched, if any: the route the
    router picked, else (answered by a middleware before routing) the schema path whose
    template fits the request, the one with the most literal segments first."""
    schema = app.openapi()
    method = scope["method"].lower()
    template = getattr(scope.get("route"), "path_format", None)
    if template in schema["paths"]:  # (a 405 matches the path but has no operation)
        return str(template) if method in schema["paths"][template] else None
    fits = [
        path
        for path, item in schema["paths"].items()
        if method in item
        and re.fullmatch(re.sub(r"\\{[^}]+\\}", "[^/]+", re.escape(path)), scope["path"])
    ]
    fits.sort(key=lambda p: -sum(1 for part in p.split("/") if not part.startswith("{")))
    return fits[0] if fits else None


class StatusRecorder:
    def __init__(self, app: ASGIApp, path: str) -> None:
        self.app = app
        self.path = path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 0

        async def tracking(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, tracking)
        finally:
            route = route_of(self.app, scope)
            if route is not None and status:
                line = json.dumps({"method": scope["method"], "path": route, "status": status})
                with _lock, open(self.path, "a") as f:
                    f.write(line + "\n")


def maybe_record(app: Any) -> Any:
    path = os.environ.get(RECORD_ENV)
    return StatusRecorder(app, path) if path else app
