"""`statewise sessions list|show|delete|compact|export|import|prune`, `statewise state
rollback|fork` and `statewise runs paused|approve|reject`: managing sessions on a database
through the public session service (`statewise.Sessions`), never its storage directly.

Register on the CLI with `app.add_typer(sessions_app)`, `register_state(state_app)` and
`register_runs(runs_app)`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from statewise import Retention
from statewise.cli._errors import CliError, err_console, fail
from statewise.cli._options import DbOption, JsonOption
from statewise.cli._state import current, need_session, open_db, unique_tails, when
from statewise.exceptions import StatewiseError

console = Console()

SessionArg = Annotated[str, typer.Argument(help="The session id.", show_default=False)]

sessions_app = typer.Typer(
    name="sessions",
    help="The sessions on a database: list them, look at one, export, import, delete, prune, "
    "compact.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@contextmanager
def _clear_errors() -> Iterator[None]:
    """A mistake or a refused operation is one red line and exit code 2."""
    try:
        yield
    except (CliError, StatewiseError) as exc:
        fail(str(exc), hint=getattr(exc, "hint", None))


def _json(data: Any) -> None:
    console.print(json.dumps(data, ensure_ascii=False, indent=2), markup=False, highlight=False)


def _record(record: Any) -> dict[str, Any]:
    data: dict[str, Any] = record.to_dict()
    data["created_at"] = when(record.created_at)
    data["updated_at"] = when(record.updated_at)
    return data


@sessions_app.command("list")
def sessions_list(
    db: DbOption = None,
    user: Annotated[
        str | None, typer.Option("--user", help="Only this user's sessions.", show_default=False)
    ] = None,
    app_name: Annotated[
        str | None, typer.Option("--app", help="Only this app's sessions.", show_default=False)
    ] = None,
    limit: Annotated[int, typer.Option("--limit", help="At most this many sessions.")] = 50,
    offset: Annotated[
        int,
        typer.Option("--offset", help="Skip this many first (slower the more it skips)."),
    ] = 0,
    cursor: Annotated[
        str | None,
        typer.Option(
            "--cursor",
            help="Start after the page that printed this cursor (as fast at any depth).",
            show_default=False,
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Sessions, most recently updated first; prints the cursor of the next page."""
    with _clear_errors(), open_db(db) as sessions:
        page = sessions.list_page(
            user_id=user, app_name=app_name, limit=limit, offset=offset, cursor=cursor
        )
    if page.next_cursor is not None:
        # (on stderr, so that --json's stdout stays the list of sessions)
        err_console.print(f"next page: --cursor {page.next_cursor}", markup=False, soft_wrap=True)
    if as_json:
        _json([_record(r) for r in page.sessions])
        return
    if not page.sessions:
        console.print("no sessions")
        return
    table = Table("session", "user", "app", "kind", "updated", "events")
    for record in page.sessions:
        table.add_row(
            record.session_id,
            record.user_id or "-",
            record.app_name or "-",
            record.kind,
            when(record.updated_at),
            str(record.last_seq),
        )
    console.print(table)


@sessions_app.command("show")
def sessions_show(session: SessionArg, db: DbOption = None, as_json: JsonOption = False) -> None:
    """One session: its owner, app, times, state version and state, runs, paused runs."""
    with _clear_errors(), open_db(db) as sessions:
        state, version, record = current(sessions, session)
        runs = sessions.runs(session)
        paused = sessions.paused_runs(session)
    summary = {
        **_record(record),
        "version": version,
        "state": state,
        "runs": len(runs),
        "runs_by_status": {s: sum(r.status == s for r in runs) for s in {r.status for r in runs}},
        "paused_runs": [p.to_dict() for p in paused],
    }
    if as_json:
        _json(summary)
        return
    console.print(
        Text.assemble(
            ("session ", "dim"),
            (session, "bold"),
            (f"  user {record.user_id or '-'}  app {record.app_name or '-'}  {record.kind}", "dim"),
        )
    )
    console.print(
        f"created {summary['created_at']}  updated {summary['updated_at']}  "
        f"state version {version}  {len(runs)} runs"
        + "".join(f", {n} {s}" for s, n in sorted(summary["runs_by_status"].items()))
    )
    for item in paused:
        for call in item.pending:
            console.print(
                Text(
                    f"paused: run {item.run.run_id} waits on {call.tool_name}"
                    f"({json.dumps(call.arguments, ensure_ascii=False)}) [{call.kind}]",
                    style="yellow",
                ),
                soft_wrap=True,
            )
    console.print_json(data=state)


def _confirm(what: str, yes: bool) -> None:
    if yes:
        return
    if not sys.stdin.isatty():
        raise CliError(f"{what}: add --yes to confirm (nobody is at a terminal to ask)")
    if not typer.confirm(f"{what}?", default=False, err=True):
        fail("nothing deleted", code=1)


@sessions_app.command("runs")
def sessions_runs(
    session: SessionArg,
    db: DbOption = None,
    limit: Annotated[
        int | None, typer.Option("--limit", help="Only the last N runs.", show_default=False)
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """A session's runs, oldest first: id, status, agent, when, input, error."""
    with _clear_errors(), open_db(db) as sessions:
        need_session(sessions, session)
        runs = sessions.runs(session, limit=limit)
    if as_json:
        _json([{**r.to_dict(), "created_at": when(r.created_at)} for r in runs])
        return
    if not runs:
        console.print(f"session {session} has no runs")
        return
    labels = unique_tails([r.run_id for r in runs])
    table = Table("run", "status", "agent", "started", "input", "error")
    for run in runs:
        table.add_row(
            labels[run.run_id],
            run.status,
            run.agent_name or "-",
            when(run.created_at),
            (run.input or "")[:60],
            run.error or "",
        )
    console.print(table)


@sessions_app.command("delete")
def sessions_delete(
    session: SessionArg,
    db: DbOption = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
) -> None:
    """Delete a session with its state, history and runs, for good."""
    with _clear_errors(), open_db(db) as sessions:
        need_session(sessions, session)
        _confirm(f"delete session {session} with its state, history and runs", yes)
        sessions.delete(session)
    typer.echo(f"deleted session {session}")


@sessions_app.command("prune")
def sessions_prune(
    older_than: Annotated[
        float,
        typer.Option("--older-than", help="Delete sessions not updated for this many days.", min=0),
    ],
    db: DbOption = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
) -> None:
    """Delete every session not updated for --older-than days."""
    with _clear_errors(), open_db(db) as sessions:
        _confirm(f"delete every session not updated for {older_than:g} days", yes)
        count = sessions.prune(older_than=timedelta(days=older_than))
    typer.echo(f"deleted {count} sessions")


@sessions_app.command("compact")
def sessions_compact(
    db: DbOption = None,
    session: Annotated[
        str | None,
        typer.Option(
            "--session", help="Only this session (default: every one).", show_default=False
        ),
    ] = None,
    keep_versions: Annotated[
        int | None,
        typer.Option(
            "--keep-versions", help="Keep this many versions of each session's state.", min=1
        ),
    ] = None,
    keep_days: Annotated[
        float | None,
        typer.Option("--keep-days", help="Keep this many days of each session's history."),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Fold history older than the retention policy into a snapshot and remove it. The
    current state, the history kept and the event numbers stay exact; older versions
    are gone for good (rollback, fork, diff and history below them are refused). Without
    --keep-versions/--keep-days, the policy given in the --db URL (?keep_versions=...)."""
    with _clear_errors(), open_db(db) as sessions:
        policy = None
        if keep_versions is not None or keep_days is not None:
            policy = Retention(keep_versions=keep_versions, keep_days=keep_days)
        if policy is None and sessions.db.retention is None:
            raise CliError(
                "no retention policy: pass --keep-versions and/or --keep-days",
                hint="or give the database one: --db 'sqlite:///app.db?keep_versions=1000'",
            )
        if session is not None:
            need_session(sessions, session)
        done = sessions.compact(session, retention=policy)
    if as_json:
        _json([c.to_dict() for c in done])
        return
    removed = {
        name: sum(getattr(c, name) for c in done)
        for name in ("deltas", "snapshots", "events", "runs", "commit_ids")
    }
    typer.echo(
        f"compacted {len(done)} sessions: removed "
        + ", ".join(f"{n} {name.replace('_', ' ')}" for name, n in removed.items())
    )


@sessions_app.command("export")
def sessions_export(
    session: SessionArg,
    db: DbOption = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", "-o", help="Write to this file (default: standard output).", show_default=False
        ),
    ] = None,
) -> None:
    """A session as JSON Lines (state history, events, runs), as `statewise sessions
    import` reads it. Secret values stay encrypted."""
    with _clear_errors(), open_db(db) as sessions:
        need_session(sessions, session)
        lines = (
            json.dumps(r, ensure_ascii=False) + "\n"
            for r in sessions.iter_export(session, as_stored=True)
        )
        if out is None:
            for line in lines:
                sys.stdout.write(line)
            sys.stdout.flush()
            return
        with open(out, "w", encoding="utf-8") as file:
            file.writelines(lines)
    typer.echo(f"exported session {session} to {out}", err=True)


@sessions_app.command("import")
def sessions_import(
    file: Annotated[Path, typer.Argument(help="A JSON Lines file written by `sessions export`.")],
    db: DbOption = None,
) -> None:
    """Import sessions exported by `statewise sessions export`; an existing session is
    never overwritten."""
    with _clear_errors():
        if not file.is_file():
            raise CliError(f"no file at {file}")
        try:
            with open_db(db) as sessions:
                imported = sessions.import_sessions(file)
        except json.JSONDecodeError as exc:
            raise CliError(f"{file} is not JSON Lines: {exc}") from None
    for session_id in imported:
        typer.echo(f"imported session {session_id}")


# ---- statewise state rollback|fork -------------------------------------------------------


def rollback(
    session: SessionArg,
    to: Annotated[
        str,
        typer.Option(
            "--to", help="The version number or run id to go back to.", show_default=False
        ),
    ],
    db: DbOption = None,
    include_shared: Annotated[
        bool,
        typer.Option("--include-shared", help="Bring the session's user: and app: keys back too."),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Bring a session's state back to a version or run, as a new commit (history is
    kept: the rollback is recorded and can itself be rolled back)."""
    from statewise.cli._state import existing_version

    with _clear_errors(), open_db(db) as sessions:
        _, version, _ = current(sessions, session)
        target = existing_version(session, "--to", to, version)
        assert target is not None
        state = sessions.rollback_state(session, to=target, include_shared=include_shared)
        _, now, _ = current(sessions, session)
    if as_json:
        _json({"session_id": session, "version": now, "state": state})
        return
    console.print(f"session {session} rolled back to {to}: now at version {now}")
    console.print_json(data=state)


def fork(
    session: SessionArg,
    db: DbOption = None,
    at: Annotated[
        str | None,
        typer.Option(
            "--at", help="Fork from this version or run (default: now).", show_default=False
        ),
    ] = None,
    new_id: Annotated[
        str | None,
        typer.Option(
            "--new-id", help="The new session's id (default: a new uuid).", show_default=False
        ),
    ] = None,
) -> None:
    """A new session that starts from this one's state (and the runs that led there)."""
    from statewise.cli._state import existing_version

    with _clear_errors(), open_db(db) as sessions:
        _, version, _ = current(sessions, session)
        created = sessions.fork_session(
            session, at=existing_version(session, "--at", at, version), new_session_id=new_id
        )
    typer.echo(created)


def register_state(state_app: typer.Typer) -> None:
    state_app.command("rollback")(rollback)
    state_app.command("fork")(fork)


# ---- statewise runs paused|approve|reject ------------------------------------------------


def paused(session: SessionArg, db: DbOption = None, as_json: JsonOption = False) -> None:
    """A session's paused runs and the tool calls each waits on."""
    with _clear_errors(), open_db(db) as sessions:
        need_session(sessions, session)
        found = sessions.paused_runs(session)
    if as_json:
        _json([p.to_dict() for p in found])
        return
    if not found:
        console.print(f"session {session} has no paused run")
        return
    table = Table("run", "since", "waits on", "kind", "tool call")
    labels = unique_tails([p.run.run_id for p in found])
    for item in found:
        for call in item.pending:
            table.add_row(
                labels[item.run.run_id],
                when(item.run.updated_at),
                f"{call.tool_name}({json.dumps(call.arguments, ensure_ascii=False)})",
                call.kind,
                call.tool_call_id,
            )
    console.print(table)
    first = found[0].run.run_id
    console.print(
        Text(
            f"Answer one: statewise runs approve TARGET {session} {first} --db ... "
            "(or runs reject ... --reason WHY)",
            style="dim",
        ),
        soft_wrap=True,
    )


TargetArg = Annotated[
    str,
    typer.Argument(
        help="The Python file that defines the agent the run belongs to (as for "
        "`statewise run`): its tools run the approved call.",
        show_default=False,
    ),
]
RunArg = Annotated[str, typer.Argument(help="The paused run's id.", show_default=False)]
RunDbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        help="Database URL to use instead of the agent's own db=.",
        show_default=False,
    ),
]


def approve(target: TargetArg, session: SessionArg, run_id: RunArg, db: RunDbOption = None) -> None:
    """Approve every tool call a paused run waits on; the run goes on here."""
    _answer(target, session, run_id, db, approve=True, reason=None)


def reject(
    target: TargetArg,
    session: SessionArg,
    run_id: RunArg,
    reason: Annotated[
        str, typer.Option("--reason", help="Why (the model reads it).", show_default=False)
    ] = "rejected",
    db: RunDbOption = None,
) -> None:
    """Reject every tool call a paused run waits on; the model is told why and goes on."""
    _answer(target, session, run_id, db, approve=False, reason=reason)


def _answer(
    target: str, session: str, run_id: str, db: str | None, *, approve: bool, reason: str | None
) -> None:
    from statewise.cli._run import Decision, run_queries

    with _clear_errors():
        run_queries(
            console=console,
            target=target,
            queries=[],
            session_id=session,
            user_id=None,
            db=db,
            state=None,
            show_state=False,
            traceback=False,
            decision=Decision(approve=approve, reason=reason),
            continue_run=run_id,
        )


def register_runs(runs_app: typer.Typer) -> None:
    runs_app.command("paused")(paused)
    runs_app.command("approve")(approve)
    runs_app.command("reject")(reject)


__all__ = ["register_runs", "register_state", "sessions_app"]
