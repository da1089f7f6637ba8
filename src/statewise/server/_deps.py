"""FastAPI dependencies: the registry and the caller, from the app's state."""

from __future__ import annotations

from typing import Annotated

from fastapi import Header, Request

from statewise.server._auth import KeyRing, Principal
from statewise.server._registry import Registry


def get_registry(request: Request) -> Registry:
    registry: Registry = request.app.state.statewise_registry
    return registry


def get_principal(
    request: Request,
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> Principal:
    keys: KeyRing = request.app.state.statewise_keys
    return keys.authenticate(authorization)
