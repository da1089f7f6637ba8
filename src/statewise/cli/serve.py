"""`statewise serve [path/to/app.py[:obj] | package.module[:obj]]`: the HTTP API and web page.

Register it on the CLI with `app.command("serve")(serve)`.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import socket
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from statewise import tune_collector
from statewise.exceptions import ConfigurationError, MissingDependencyError, StatewiseError

DEMO_TARGET = "statewise.server.demo:build_apps"
LOOPBACK = "127.0.0.1"


def _servable(obj: Any) -> bool:
    return hasattr(obj, "arun") and hasattr(obj, "_store")


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
    from statewise.db.url import resolve_db

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
            "Needs pip install 'statewise[dbos]'.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Serve agents, teams and workflows over HTTP, with a web page at / and API docs at
    /docs. API keys come from STATEWISE_API_KEYS="key=user,..." and STATEWISE_ADMIN_KEYS;
    without keys the server only binds to a loopback address (--host 127.0.0.1).
    --port 0 picks a free port and prints it."""
    try:
        import uvicorn

        from statewise.server import create_app
        from statewise.server._auth import KeyRing
        from statewise.server._middleware import is_loopback
    except ImportError as exc:
        missing = MissingDependencyError(getattr(exc, "name", None) or "fastapi", "server")
        typer.echo(f"statewise serve: {missing}", err=True)
        raise typer.Exit(2) from None

    if db:
        os.environ["STATEWISE_DB_URL"] = db
    try:
        keys = KeyRing()
        if not keys.enabled and not is_loopback(host):
            raise ConfigurationError(
                f"refusing to serve on {host} without API keys: anyone who can reach it "
                "could read and change every session. Set STATEWISE_API_KEYS='key=user,...' "
                f"(and STATEWISE_ADMIN_KEYS) to serve others, or use --host {LOOPBACK}."
            )
        objects = load_target(target)
        if db:
            _use_db(objects, db)
        fleet = _fleet(fleet_db) if fleet_db else None
        app = create_app(objects, public_docs=public_docs, fleet=fleet)
        sock = _bind(host, port)
    except StatewiseError as exc:
        typer.echo(f"statewise serve: {exc}", err=True)
        raise typer.Exit(2) from exc
    if not keys.enabled:
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
    sys.stdout.flush()
    tune_collector()  # this process is ours: see statewise.state.gcpause
    server = uvicorn.Server(uvicorn.Config(app, log_level=log_level))
    server.run(sockets=[sock])


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
