"""HTTP API and web page for statewise sessions (needs the `server` extra).

    from statewise.server import create_app
    app = create_app([agent], api_keys={"secret-key-1": "alice"})

Then `uvicorn module:app`, or `statewise serve path/to/app.py:agent`.
"""

from __future__ import annotations

try:
    import fastapi  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    from statewise.exceptions import MissingDependencyError

    raise MissingDependencyError("fastapi", "server") from exc

from statewise.server._auth import (
    Principal,
    Unauthorized,
    approvers_with_role,
    owner_approves,
)
from statewise.server._jwt import JWTAuth
from statewise.server.app import create_app

__all__ = [
    "JWTAuth",
    "Principal",
    "Unauthorized",
    "approvers_with_role",
    "create_app",
    "owner_approves",
]
