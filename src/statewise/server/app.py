"""`create_app(...)`: serve agents, teams and workflows over HTTP, with a web page at `/`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import HTMLResponse, Response
from fastapi.staticfiles import StaticFiles

from statewise.agent.service import BaseDb, check_run_timeout, resolve_db
from statewise.exceptions import ConfigurationError
from statewise.fleet import Fleet
from statewise.server._agui import router as agui_router
from statewise.server._approvals import router as approvals_router
from statewise.server._auth import (
    ApprovalRule,
    Authenticator,
    HookAuth,
    KeyRing,
    KeySpec,
    Principal,
    owner_approves,
)
from statewise.server._docs import install_docs
from statewise.server._errors import install_error_handlers
from statewise.server._fleet import router as fleet_router
from statewise.server._lifespan import lifespan
from statewise.server._middleware import (
    DEFAULT_MAX_BODY_BYTES,
    BodyLimitMiddleware,
    LoopbackOnlyMiddleware,
)
from statewise.server._registry import Registry, check_databases
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
    auth: Authenticator | Callable[[Request], Principal | str | None] | None = None,
    approve: ApprovalRule = owner_approves,
    cors_origins: Sequence[str] = (),
    db: BaseDb | str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    title: str = "statewise",
    public_docs: bool = False,
    fleet: Fleet | None = None,
    run_timeout: float | None = None,
) -> FastAPI:
    """A FastAPI app serving `apps` (Agents, Teams, Workflows; a list, or a mapping of URL
    name -> object).

    Who is calling: by default `api_keys` maps each key to the user_id it acts as, and
    `admin_keys` (a mapping, or a list of keys acting as user "admin") see every session.
    With neither, keys come from `STATEWISE_API_KEYS` / `STATEWISE_ADMIN_KEYS`
    ("key=user,key2=user2"); with no keys and no `auth` there is no auth and the app
    answers loopback clients only. An app with its own login gives `auth`: a
    `JWTAuth(...)`, or a callable turning the request into a `Principal` (or a user id;
    None or `Unauthorized` for 401). Every tenancy rule applies to every principal.

    `approve(principal, session_record)` says who may approve, reject or edit a paused
    run (default: the session's owner, or an admin); `approvers_with_role("approver")`
    lets a role approve in every session, and `GET /v1/paused-runs` lists what the
    caller may approve.

    `cors_origins` lets browser apps on those origins (e.g. "https://app.example.com",
    or "*") call the API, AG-UI and streams included. `db` is the database of every
    served object built without one (`db=` on the object wins).

    With keys, `/openapi.json`, `/docs` and `/redoc` need a key like the API does;
    `public_docs=True` serves them to anyone.

    With a `fleet` (`statewise.fleet.Fleet`), `/v1/fleet/runs` and the web page list the
    runs on its durable queues with the worker running each.

    `run_timeout` (seconds) is the deadline of runs of served objects that set none
    themselves (`Agent(run_timeout=...)`): past it a run ends `failed` ("run exceeded its
    run_timeout of N s") and its request answers 504.
    """
    from statewise import __version__

    if db is not None:
        _give_db(apps, db)
    registry = Registry.build(apps, run_timeout=check_run_timeout(run_timeout))
    if auth is not None and (api_keys is not None or admin_keys is not None):
        raise ConfigurationError("give auth= or api_keys=/admin_keys=, not both")
    keys: Authenticator
    if auth is None:
        keys = KeyRing(api_keys, admin_keys)
    elif isinstance(auth, Authenticator):
        keys = auth
    elif callable(auth):
        keys = HookAuth(auth)
    else:
        raise ConfigurationError(
            f"auth must be a JWTAuth or a callable(request), not {type(auth).__name__}"
        )
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
    app.state.statewise_auth = keys
    app.state.statewise_approve = approve
    install_error_handlers(app)
    app.include_router(runs_router)
    app.include_router(sessions_router)
    app.include_router(approvals_router)
    app.include_router(agui_router)
    if fleet is not None:
        app.state.statewise_fleet = fleet
        app.include_router(fleet_router)
    install_docs(app, registry, keys, public_docs=public_docs)

    page = (STATIC / "index.html").read_text(encoding="utf-8")
    page = page.replace("__FLEET__", "1" if fleet is not None else "0")

    @app.get("/", include_in_schema=False)
    def index() -> HTMLResponse:
        return HTMLResponse(page, headers={"Cache-Control": "no-cache"})

    @app.get(
        "/healthz",
        tags=["meta"],
        summary="Liveness",
        response_model=None,
        responses={**ok(Health, "The server is up"), **problems(403)},
    )
    def healthz() -> dict[str, Any]:
        return {"status": "ok", "auth": keys.enabled}

    @app.get(
        "/readyz",
        tags=["meta"],
        summary="Readiness: every served object's database answers",
        response_model=None,
        responses={**ok(Health, "Ready to serve"), **problems(503)},
    )
    async def readyz() -> dict[str, Any]:
        await check_databases(registry)
        return {"status": "ok", "auth": keys.enabled}

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon() -> Response:
        return Response(status_code=204)

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.add_middleware(BodyLimitMiddleware, max_bytes=max_body_bytes)
    if not keys.enabled:
        app.add_middleware(LoopbackOnlyMiddleware)
    if cors_origins:
        # Outermost, so that a preflight is answered before anything else looks at it and
        # every answer (errors included) carries the CORS headers.
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(cors_origins),
            allow_methods=["*"],
            allow_headers=["*"],
            expose_headers=["ETag", "Location", "Retry-After"],
            allow_credentials="*" not in cors_origins,
            max_age=600,
        )
    return app


def _give_db(apps: Sequence[Any] | Mapping[str, Any] | Any, db: BaseDb | str) -> None:
    """`create_app(db=...)`: every served object built without a database uses `db` (one
    object, so they share it)."""
    shared = resolve_db(db)
    items = (
        apps.values()
        if isinstance(apps, Mapping)
        else (apps if isinstance(apps, Sequence) and not isinstance(apps, str) else [apps])
    )
    for obj in items:
        if not getattr(obj, "has_own_db", True):
            obj.use_db(shared)
