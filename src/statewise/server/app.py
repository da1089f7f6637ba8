"""`create_app(...)`: serve agents, teams and workflows over HTTP, with a web page at `/`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.responses import FileResponse, Response
from fastapi.staticfiles import StaticFiles

from statewise.fleet import Fleet
from statewise.run.deadline import check_run_timeout
from statewise.server._agui import router as agui_router
from statewise.server._approvals import router as approvals_router
from statewise.server._auth import KeyRing, KeySpec
from statewise.server._docs import install_docs
from statewise.server._errors import install_error_handlers
from statewise.server._fleet import router as fleet_router
from statewise.server._lifespan import lifespan
from statewise.server._middleware import (
    DEFAULT_MAX_BODY_BYTES,
    BodyLimitMiddleware,
    LoopbackOnlyMiddleware,
)
from statewise.server._registry import Registry
from statewise.server._runs import router as runs_router
from statewise.server._schema import Health, ok, problems
from statewise.server._sessions import router as sessions_router

STATIC = Path(__file__).parent / "static"

DESCRIPTION = """\
Run statewise agents, teams and workflows, and inspect, change, diff, roll back, fork and
export their sessions' state. Authenticate with `Authorization: Bearer <key>` when the
server has API keys (then this schema, `/docs` and `/redoc` need a key too, unless the
server was started with public docs). Every error is an RFC 9457 problem document
(`application/problem+json`) with a `detail` saying what to change.
"""


def create_app(
    apps: Sequence[Any] | Mapping[str, Any] | Any,
    *,
    api_keys: KeySpec = None,
    admin_keys: KeySpec = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    title: str = "statewise",
    public_docs: bool = False,
    fleet: Fleet | None = None,
    run_timeout: float | None = None,
) -> FastAPI:
    """A FastAPI app serving `apps` (Agents, Teams, Workflows; a list, or a mapping of URL
    name -> object).

    `api_keys` maps each key to the user_id it acts as; `admin_keys` (a mapping, or a list
    of keys acting as user "admin") see every session. With neither, keys come from
    `STATEWISE_API_KEYS` / `STATEWISE_ADMIN_KEYS` ("key=user,key2=user2"); with no keys at
    all there is no auth and the app answers loopback clients only.

    With keys, `/openapi.json`, `/docs` and `/redoc` need a key like the API does;
    `public_docs=True` serves them to anyone.

    With a `fleet` (`statewise.fleet.Fleet`), `/v1/fleet/runs` and the web page list the
    runs on its durable queues with the worker running each.

    `run_timeout` (seconds) is the deadline of runs of served objects that set none
    themselves (`Agent(run_timeout=...)`): past it a run ends `failed` ("run exceeded its
    run_timeout of N s") and its request answers 504.
    """
    from statewise import __version__

    registry = Registry.build(apps, run_timeout=check_run_timeout(run_timeout))
    keys = KeyRing(api_keys, admin_keys)
    app = FastAPI(
        title=title,
        version=__version__,
        description=DESCRIPTION,
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
        # operationIds a generated client turns into function names: the route's name.
        generate_unique_id_function=lambda route: route.name,
        lifespan=lifespan,
    )
    app.state.statewise_registry = registry
    app.state.statewise_keys = keys
    install_error_handlers(app)
    app.include_router(runs_router)
    app.include_router(sessions_router)
    app.include_router(approvals_router)
    app.include_router(agui_router)
    if fleet is not None:
        app.state.statewise_fleet = fleet
        app.include_router(fleet_router)
    install_docs(app, registry, keys, public_docs=public_docs)

    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    @app.get(
        "/healthz",
        tags=["meta"],
        summary="Liveness",
        response_model=None,
        responses={**ok(Health, "The server is up"), **problems(403)},
    )
    def healthz() -> dict[str, Any]:
        return {"status": "ok", "auth": keys.enabled}

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon() -> Response:
        return Response(status_code=204)

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.add_middleware(BodyLimitMiddleware, max_bytes=max_body_bytes)
    if not keys.enabled:
        app.add_middleware(LoopbackOnlyMiddleware)
    return app
