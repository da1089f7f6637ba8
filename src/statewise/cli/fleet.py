"""`statewise enqueue`, `statewise worker` and `statewise runs show|list`: runs on a
fleet's durable queues (needs `pip install 'statewise[dbos]'`).

Register on the CLI with `app.command("enqueue")(enqueue)`,
`app.command("worker")(worker)` and `app.add_typer(runs_app)`.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from statewise.cli._errors import CliError, fail
from statewise.cli._load import find_runnable, is_runnable, load_module, module_file, split_target
from statewise.cli._options import JsonOption
from statewise.exceptions import StatewiseError

console = Console()

FleetDbOption = Annotated[
    str,
    typer.Option(
        "--db",
        envvar="STATEWISE_FLEET_URL",
        help="The fleet's PostgreSQL URL (postgresql://...), where DBOS keeps queues and "
        "runs (default: $STATEWISE_FLEET_URL). With statewise's own options "
        "(postgresql://...?schema=x) a worker also keeps sessions there, unless "
        "--sessions-db says otherwise.",
        show_default=False,
    ),
]
SessionsDbOption = Annotated[
    str | None,
    typer.Option(
        "--sessions-db",
        help="Keep sessions in this database instead of the objects' own db= "
        "(postgresql://..., redis://...; shared by every worker).",
        show_default=False,
    ),
]
QueueOption = Annotated[str, typer.Option("--queue", help="The queue to put the run on.")]
TargetArgument = Annotated[
    str,
    typer.Argument(
        help="path/to/app.py[:obj]: the file that defines the agents and workflows.",
        show_default=False,
    ),
]


@contextmanager
def _clear_errors() -> Iterator[None]:
    try:
        yield
    except (CliError, StatewiseError) as exc:
        fail(str(exc), hint=getattr(exc, "hint", None))


def _fleet(url: str) -> Any:
    from statewise.fleet import Fleet

    return Fleet(url)


def _sessions_in_fleet_db(url: str) -> str | None:
    """The fleet URL as the sessions' database when it carries statewise's own storage
    options (`?schema=`): the URL form the docs give for PostgreSQL storage means it."""
    from statewise.agent.service import names_storage_options

    return url if names_storage_options(url) else None


def _targets(target: str, sessions_db: str | None) -> list[Any]:
    path, name = split_target(target)
    module = load_module(module_file(path))
    if name is not None:
        objects = [find_runnable(module, name, path)[1]]
    else:
        unique: dict[int, Any] = {}
        for key, value in vars(module).items():
            if not key.startswith("_") and is_runnable(value):
                unique.setdefault(id(value), value)
        objects = list(unique.values())
        if not objects:
            raise CliError(f"no Agent, Team or Workflow in {path}")
    if sessions_db:
        from statewise.agent.service import resolve_db

        shared = resolve_db(sessions_db)
        for obj in objects:
            obj.use_db(shared)
    return objects


def enqueue(
    target: TargetArgument,
    input: Annotated[str, typer.Argument(help="The run's input (a message).", show_default=False)],
    session: Annotated[
        str, typer.Option("--session", help="Session id of the run.", show_default=False)
    ],
    db: FleetDbOption,
    user: Annotated[
        str | None,
        typer.Option("--user", help="User id that owns the session.", show_default=False),
    ] = None,
    queue: QueueOption = "statewise",
    as_json: JsonOption = False,
) -> None:
    """Put a run on a fleet's queue and print its run id; a `statewise worker` runs it."""
    with _clear_errors():
        path, name = split_target(target)
        obj = find_runnable(load_module(module_file(path)), name, path)[1]
        with _fleet(db) as fleet:
            handle = fleet.enqueue(obj, input, session_id=session, user_id=user, queue=queue)
    if as_json:
        typer.echo(json.dumps({"run_id": handle.run_id, "queue": queue, "session_id": session}))
    else:
        typer.echo(handle.run_id)


def worker(
    target: TargetArgument,
    db: FleetDbOption,
    executor_id: Annotated[
        str,
        typer.Option(
            "--executor-id",
            help="This worker's name, unique in the fleet. Restart a worker with the same "
            "name to resume its unfinished runs.",
            show_default=False,
        ),
    ],
    concurrency: Annotated[
        int | None,
        typer.Option(
            "--concurrency",
            help="Most runs of a queue in flight on each worker. DBOS keeps this limit "
            "with the queue in PostgreSQL, so it applies to every worker of the queue (the "
            "last worker started with --concurrency sets it).",
            show_default=False,
        ),
    ] = None,
    queue: Annotated[
        list[str] | None,
        typer.Option("--queue", help="Queue(s) to take runs from (default: statewise)."),
    ] = None,
    recover: Annotated[
        list[str] | None,
        typer.Option(
            "--recover",
            help="Take over the unfinished runs of this executor id (a worker that is gone "
            "for good; a crashed worker that comes back restarts with its own "
            "--executor-id instead). Repeatable.",
            show_default=False,
        ),
    ] = None,
    sessions_db: SessionsDbOption = None,
    drain: Annotated[
        float,
        typer.Option("--drain", help="Seconds runs in flight get to finish on SIGTERM."),
    ] = 10.0,
) -> None:
    """Run agents and workflows from a fleet's queues until SIGTERM, one log line per run."""
    # One plain line per record (a log line per run, fit for log collectors), never wrapped.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    fleet_log = logging.getLogger("statewise.fleet")
    fleet_log.addHandler(handler)
    fleet_log.setLevel(logging.INFO)
    fleet_log.propagate = False
    with _clear_errors():
        from statewise.fleet import Worker

        objects = _targets(target, sessions_db or _sessions_in_fleet_db(db))
        runner = Worker(
            db,
            objects,
            executor_id=executor_id,
            queues=queue or ["statewise"],
            concurrency=concurrency,
        )
        runner.serve_forever(recover=recover or (), drain_seconds=drain)


runs_app = typer.Typer(
    name="runs",
    help="Runs: on a fleet's queues (list, show: queued, running, completed and failed, with "
    "their worker), and a session's paused runs (paused, approve, reject).",
    no_args_is_help=True,
)


SessionOption = Annotated[
    str | None,
    typer.Option(
        "--session",
        help="A session's runs instead of the fleet's: --db is then the session database "
        "(sqlite:///..., postgresql://..., redis://...).",
        show_default=False,
    ),
]


@runs_app.command("show")
def runs_show(
    run_id: Annotated[str, typer.Argument(help="The run id.", show_default=False)],
    db: FleetDbOption,
    session: SessionOption = None,
    as_json: JsonOption = False,
) -> None:
    """One run's status, executor, session, output or error (with --session, one run of
    that session: status, input, answer, error, metrics)."""
    if session is not None:
        _session_run(db, session, run_id, as_json)
        return
    with _clear_errors(), _fleet(db) as fleet:
        info = fleet.info(run_id)
    if as_json:
        typer.echo(json.dumps(info.to_dict(), default=str))
        return
    for key, value in info.to_dict().items():
        console.print(f"[bold]{key}[/]: {value}")


@runs_app.command("list")
def runs_list(
    db: FleetDbOption,
    session: SessionOption = None,
    status: Annotated[
        str | None,
        typer.Option("--status", help="Only queued, running, completed, failed or cancelled runs."),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", help="At most this many runs.")] = 50,
    as_json: JsonOption = False,
) -> None:
    """The latest runs, newest first (with --session, that session's runs, oldest first)."""
    if session is not None:
        from statewise.cli.sessions import sessions_runs

        with _clear_errors():
            if status is not None:
                raise CliError("--status lists a fleet's runs; a session's runs all show")
        sessions_runs(session, db=db, limit=limit, as_json=as_json)
        return
    with _clear_errors():
        if status not in (None, "queued", "running", "completed", "failed", "cancelled"):
            raise CliError(
                f"unknown --status {status!r}",
                hint="One of: queued, running, completed, failed, cancelled.",
            )
        with _fleet(db) as fleet:
            infos = fleet.runs(status=status, limit=limit)
    if as_json:
        typer.echo(json.dumps([i.to_dict() for i in infos], default=str))
        return
    table = Table("run id", "status", "target", "session", "executor", "updated", "error")
    for info in infos:
        table.add_row(
            info.run_id,
            info.status,
            info.target or "",
            info.session_id or "",
            info.executor or "",
            info.updated_at.strftime("%H:%M:%S") if info.updated_at else "",
            info.error or "",
        )
    console.print(table)


def _session_run(db: str, session: str, run_id: str, as_json: bool) -> None:
    from statewise.cli._state import need_session, open_db, when

    with _clear_errors(), open_db(db) as sessions:
        need_session(sessions, session)
        run = sessions.run(session, run_id)
        if run is None:
            raise CliError(f"session {session!r} has no run {run_id!r}")
    data = {k: v for k, v in run.to_dict().items() if k != "messages"} | {
        "created_at": when(run.created_at),
        "updated_at": when(run.updated_at),
    }
    if as_json:
        typer.echo(json.dumps(data, default=str))
        return
    for key, value in data.items():
        console.print(f"[bold]{key}[/]: {value}", markup=True, highlight=False)
