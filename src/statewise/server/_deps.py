"""FastAPI dependencies: the registry and the caller, from the app's state.

Both are `async def` although they never await: they do no I/O, and FastAPI runs a sync
dependency in its thread pool, a hop per request that under load waits for a free thread
and the GIL before the endpoint even starts.

The run routes, the server's hot path, call `caller(request)` instead: FastAPI resolves
each dependency with another pass over the request (its query string, cookies, headers),
which cost a run request more CPU than the route's own work outside the run."""

from __future__ import annotations

from typing import Annotated

from fastapi import Header, Request

from statewise.server._auth import Authenticator, Principal
from statewise.server._registry import Registry


async def get_registry(request: Request) -> Registry:
    registry: Registry = request.app.state.statewise_registry
    return registry


async def get_principal(
    request: Request,
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> Principal:
    auth: Authenticator = request.app.state.statewise_auth
    return auth.principal(request)


def caller(request: Request) -> tuple[Registry, Principal]:
    """`get_registry` and `get_principal` in one plain call."""
    state = request.app.state
    auth: Authenticator = state.statewise_auth
    registry: Registry = state.statewise_registry
    return registry, auth.principal(request)
