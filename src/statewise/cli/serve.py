"""`statewise serve [path/to/app.py[:obj] | package.module[:obj]]`: the HTTP API and web page.

Register it on the CLI with `app.command("serve")(serve)`.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import json
import os
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer

from statewise import Agent, Workflow, tune_collector
from statewise.exceptions import ConfigurationError, MissingDependencyError, StatewiseError

DEMO_TARGET = "statewise.server.demo:build_apps"
LOOPBACK = "127.0.0.1"


def _servable(obj: Any) -> bool:
    return isinstance(obj, Agent | Workflow)  # (a Team is an Agent)


def split_target(target: str) -> tuple[str, str | None]:
    """'app.py:agent' -> ('app.py', 'agent'); a ':' inside a path (C:\\) is not a split."""
    head, sep, tail = target.rpartition(":")
    if sep and head and tail and "/" not in tail and "\\" not in tail:
        return head, tail
    return target, None


def load_module(where: str) -> Any:
    path = Path(where)
    if where.endswith(".py") or path.exists():
        if not path.is_file():
            raise ConfigurationError(f"no Python file at {where!r}")
        name = f"_statewise_serve_{path.stem}"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ConfigurationError(f"cannot import {where!r}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        sys.path.insert(0, str(path.resolve().parent))
        spec.loader.exec_module(module)
        return module
    try:
        return importlib.import_module(where)
    except ModuleNotFoundError as exc:
        raise ConfigurationError(f"cannot import {where!r}: {exc}") from exc


def load_target(target: str) -> Any:
    """The object(s) to serve: `obj` of the file or module, else every Agent, Team and
    Workflow defined at its top level."""
    where, attr = split_target(target)
    module = load_module(where)
    if attr is not None:
        if not hasattr(module, attr):
            raise ConfigurationError(f"{where!r} has no attribute {attr!r}")
        obj = getattr(module, attr)
        if callable(obj) and not _servable(obj) and not isinstance(obj, type):
            obj = obj()
        return obj
    found = {k: v for k, v in vars(module).items() if not k.startswith("_") and _servable(v)}
    if not found:
        raise ConfigurationError(
            f"{where!r} defines no Agent, Team or Workflow at its top level; name one as "
            f"{where}:name"
        )
    unique: dict[int, Any] = {}
    for value in found.values():
        unique.setdefault(id(value), value)
    return list(unique.values())


def _use_db(objects: Any, url: str) -> None:
    """Point every served object at one database (the same object, so they share it)."""
    from statewise.agent.service import resolve_db

    shared = resolve_db(url)
    items = (
        objects.values()
        if isinstance(objects, dict)
        else ([objects] if _servable(objects) else list(objects))
    )
    for obj in items:
        if not callable(getattr(obj, "use_db", None)):
            raise ConfigurationError(f"--db: {type(obj).__name__} cannot change its database")
        obj.use_db(shared)


@dataclass(kw_only=True)
class ServeConfig:
    """What a served process builds its app from; workers get it through the environment
    (each worker process imports the target again)."""

    target: str
    db: str | None = None
    public_docs: bool = False
    fleet_db: str | None = None
    cors_origins: list[str] = field(default_factory=list)
    jwt_secret: str | None = None
    jwt_public_key: str | None = None
    jwt_jwks: str | None = None
    jwt_issuer: str | None = None
    jwt_audience: str | None = None
    run_timeout: float | None = None

    @property
    def jwt(self) -> bool:
        return any((self.jwt_secret, self.jwt_public_key, self.jwt_jwks))


CONFIG_VARIABLE = "STATEWISE_SERVE_CONFIG"


def build_app(config: ServeConfig) -> Any:
    """The app `statewise serve` runs, from its options."""
    from statewise.server import JWTAuth, create_app

    if config.db:
        os.environ["STATEWISE_DB_URL"] = config.db
    objects = load_target(config.target)
    if config.db:
        _use_db(objects, config.db)
    fleet = _fleet(config.fleet_db) if config.fleet_db else None
    auth = None
    if config.jwt:
        auth = JWTAuth(
            secret=config.jwt_secret,
            public_key=config.jwt_public_key,
            jwks_file=config.jwt_jwks,
            issuer=config.jwt_issuer,
            audience=config.jwt_audience,
        )
    app = create_app(
        objects,
        public_docs=config.public_docs,
        fleet=fleet,
        auth=auth,
        cors_origins=config.cors_origins,
        run_timeout=config.run_timeout,
    )
    app.state.statewise_owns_databases = True  # (loaded from the app file: closed at exit)
    return app


def app_from_environment() -> Any:
    """uvicorn's app factory in each worker process of `statewise serve --workers N`."""
    tune_collector()  # this process is ours: see statewise.state.gcpause
    return build_app(ServeConfig(**json.loads(os.environ[CONFIG_VARIABLE])))


def serve(
    target: Annotated[
        str,
        typer.Argument(
            help="path/to/app.py[:obj] or package.module[:obj]; obj is an Agent, Team, "
            "Workflow, a list or dict of them, or a function returning one. Default: the demo.",
        ),
    ] = DEMO_TARGET,
    host: Annotated[str, typer.Option(help="Interface to bind.")] = LOOPBACK,
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 7777,
    db: Annotated[
        str | None,
        typer.Option(
            "--db",
            help="Database URL to use instead of the objects' own db= "
            "(sqlite:///file.db, memory://, postgresql://..., redis://...).",
        ),
    ] = None,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "info",
    public_docs: Annotated[
        bool,
        typer.Option(
            "--public-docs",
            help="Serve /openapi.json, /docs and /redoc without an API key (they need one "
            "by default when API keys are configured).",
        ),
    ] = False,
    fleet_db: Annotated[
        str | None,
        typer.Option(
            "--fleet-db",
            help="Also show the runs on this fleet's durable queues (its PostgreSQL URL, "
            "as given to `statewise worker --db`) at /v1/fleet/runs and on the page. "
            "Needs pip install 'statewise\\[dbos]'.",
            show_default=False,
        ),
    ] = None,
    run_timeout: Annotated[
        float | None,
        typer.Option(
            "--run-timeout",
            help="Seconds a run may take when its agent, team or workflow sets no "
            "run_timeout; past them the run ends failed (HTTP 504). Default: no limit.",
            show_default=False,
        ),
    ] = None,
    workers: Annotated[
        int,
        typer.Option(
            "--workers",
            min=1,
            help="Worker processes (each imports the target again). Needs a database "
            "every process can reach: a SQLite file, PostgreSQL or Redis, not memory://.",
        ),
    ] = 1,
    cors_origin: Annotated[
        list[str] | None,
        typer.Option(
            "--cors-origin",
            help="Let a browser app on this origin call the API (repeat for more; '*' for "
            "any origin).",
            show_default=False,
        ),
    ] = None,
    root_path: Annotated[
        str,
        typer.Option(
            "--root-path",
            help="The path prefix a reverse proxy serves this under (e.g. /ai), when the "
            "proxy strips it.",
        ),
    ] = "",
    forwarded_allow_ips: Annotated[
        str | None,
        typer.Option(
            "--forwarded-allow-ips",
            help="Trust X-Forwarded-For/-Proto from these proxy addresses (uvicorn's "
            "option; default: 127.0.0.1).",
            show_default=False,
        ),
    ] = None,
    jwt_secret: Annotated[
        str | None,
        typer.Option(
            "--jwt-secret",
            envvar="STATEWISE_JWT_SECRET",
            help="Authenticate with HS256 JWTs signed with this secret "
            "(default: $STATEWISE_JWT_SECRET).",
            show_default=False,
        ),
    ] = None,
    jwt_public_key: Annotated[
        str | None,
        typer.Option(
            "--jwt-public-key",
            envvar="STATEWISE_JWT_PUBLIC_KEY",
            help="Authenticate with RS256/ES256 JWTs checked against this PEM file.",
            show_default=False,
        ),
    ] = None,
    jwt_jwks: Annotated[
        str | None,
        typer.Option(
            "--jwt-jwks",
            envvar="STATEWISE_JWT_JWKS_FILE",
            help="Authenticate with JWTs checked against this JWKS file.",
            show_default=False,
        ),
    ] = None,
    jwt_issuer: Annotated[
        str | None,
        typer.Option("--jwt-issuer", envvar="STATEWISE_JWT_ISSUER", show_default=False),
    ] = None,
    jwt_audience: Annotated[
        str | None,
        typer.Option("--jwt-audience", envvar="STATEWISE_JWT_AUDIENCE", show_default=False),
    ] = None,
) -> None:
    """Serve agents, teams and workflows over HTTP, with a web page at / and API docs at
    /docs.

    Who may call: API keys from STATEWISE_API_KEYS="key=user,..." and
    STATEWISE_ADMIN_KEYS, or JWTs (--jwt-secret, --jwt-public-key or --jwt-jwks); with
    neither, the server only binds to a loopback address (--host 127.0.0.1). --port 0
    picks a free port and prints it. SIGTERM lets runs in flight finish before it exits."""
    try:
        import uvicorn

        from statewise.server._auth import KeyRing
        from statewise.server._middleware import is_loopback
    except ImportError as exc:
        missing = MissingDependencyError(getattr(exc, "name", None) or "fastapi", "server")
        typer.echo(f"statewise serve: {missing}", err=True)
        raise typer.Exit(2) from None

    config = ServeConfig(
        target=target,
        db=db,
        public_docs=public_docs,
        fleet_db=fleet_db,
        cors_origins=list(cors_origin or []),
        jwt_secret=jwt_secret,
        jwt_public_key=jwt_public_key,
        jwt_jwks=jwt_jwks,
        jwt_issuer=jwt_issuer,
        jwt_audience=jwt_audience,
        run_timeout=run_timeout,
    )
    try:
        keys = KeyRing()
        if config.jwt and keys.enabled:
            raise ConfigurationError("give API keys (STATEWISE_API_KEYS) or a JWT option, not both")
        authenticated = keys.enabled or config.jwt
        if not authenticated and not is_loopback(host):
            raise ConfigurationError(
                f"refusing to serve on {host} without API keys: anyone who can reach it "
                "could read and change every session. Set STATEWISE_API_KEYS='key=user,...' "
                f"(and STATEWISE_ADMIN_KEYS) or a JWT option to serve others, or use --host "
                f"{LOOPBACK}."
            )
        if workers > 1 and (db or os.environ.get("STATEWISE_DB_URL", "")).startswith("memory:"):
            raise ConfigurationError(
                "--workers with memory:// would give each worker sessions of its own; use "
                "a SQLite file, PostgreSQL or Redis"
            )
        app = build_app(config)  # in this process too: a mistake shows before any worker
        if workers > 1 and any(_in_memory(s) for s in app.state.statewise_registry.all()):
            raise ConfigurationError(
                "--workers: a served object keeps its sessions in memory, which each worker "
                "would hold apart; give it db= or pass --db"
            )
        sock = _bind(host, port)
    except StatewiseError as exc:
        typer.echo(f"statewise serve: {exc}", err=True)
        raise typer.Exit(2) from exc
    if not authenticated:
        typer.echo(
            "statewise serve: no API keys configured (STATEWISE_API_KEYS): no auth, "
            f"loopback only ({host}).",
            err=True,
        )
    port = int(sock.getsockname()[1])
    registry = app.state.statewise_registry
    shown = "localhost" if host in ("0.0.0.0", "::") else host
    shown = f"[{shown}]" if ":" in shown else shown
    typer.echo(f"statewise serve: http://{shown}:{port}/  (API docs: http://{shown}:{port}/docs)")
    for served in registry.all():
        typer.echo(f"  {served.kind}/{served.name}  POST /v1/{served.kind}/{served.name}/runs")
    if fleet_db:
        typer.echo("  fleet runs  GET /v1/fleet/runs")
    if workers > 1:
        typer.echo(f"  {workers} worker processes")
    sys.stdout.flush()
    tune_collector()  # this process is ours: see statewise.state.gcpause
    options: dict[str, Any] = {
        "log_level": log_level,
        "root_path": root_path,
        "timeout_graceful_shutdown": 30,
    }
    if forwarded_allow_ips is not None:
        options["forwarded_allow_ips"] = forwarded_allow_ips
    if workers == 1:
        uvicorn.Server(uvicorn.Config(app, **options)).run(sockets=[sock])
        return
    os.environ[CONFIG_VARIABLE] = json.dumps(dataclasses.asdict(config))
    for db_, _served in registry.databases():  # the workers open their own
        db_.close()
    uvicorn.run(
        "statewise.cli.serve:app_from_environment",
        factory=True,
        workers=workers,
        fd=sock.fileno(),
        **options,
    )


def _in_memory(served: Any) -> bool:
    from statewise.agent.service import is_in_memory

    return is_in_memory(served.db)


def _fleet(url: str) -> Any:
    from statewise.fleet import Fleet

    return Fleet(url)


def _bind(host: str, port: int) -> socket.socket:
    """Bind before starting uvicorn, so `--port 0` can print the port the system chose."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigurationError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def main() -> None:  # pragma: no cover - `python -m statewise.cli.serve`
    typer.run(serve)


if __name__ == "__main__":  # pragma: no cover
    main()
