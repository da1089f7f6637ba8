"""FastAPI dependencies: the registry and the caller, from the app's state.

Both are `async def` although they never await: they do no I/O, and FastAPI runs a sync
dependency in its thread pool, a hop per request that under load waits for a free thread
and the GIL before the endpoint even starts."""

from __future__ import annotations

from typing import Annotated

from fastapi import Header, Request

from statewise.server._auth import KeyRing, Principal
from statewise.server._registry import Registry


async def get_registry(request: Request) -> Registry:
    registry: Registry = request.app.state.statewise_registry
    return registry


async def get_principal(
    request: Request,
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> Principal:
    keys: KeyRing = request.app.state.statewise_keys
    return keys.authenticate(authorization)
