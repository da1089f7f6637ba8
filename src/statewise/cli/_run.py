"""`statewise run`: one message, or a replay file's queries, on one session."""

from __future__ import annotations

import json
import sys
import traceback as tb
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from statewise.agent.service import resolve_db
from statewise.cli._errors import RUN_FAILED, RUN_PAUSED, CliError, err_console, fail
from statewise.cli._load import load_target
from statewise.exceptions import StatewiseError


@dataclass(frozen=True, kw_only=True)
class Decision:
    """How `statewise run` answers a run that pauses for approval: approve every pending
    call, or reject them with a reason."""

    approve: bool
    reason: str | None = None


@dataclass(kw_only=True)
class _Paused:
    """A paused run found in the session, shaped like the `RunOutput` of one."""

    run_id: str
    pending_tool_calls: list[Any]
    status: str = "paused"


def show_pause(output: Any, display: str) -> None:
    for call in output.pending_tool_calls:
        args = ", ".join(
            f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in call.arguments.items()
        )
        why = f" ({call.reason})" if getattr(call, "reason", None) else ""
        err_console.print(
            Text.assemble(
                ("[paused] ", "bold yellow"),
                f"{display} wants to call {call.tool_name}({args}){why}; run {output.run_id}, "
                f"tool call {call.tool_call_id}",
            ),
            soft_wrap=True,
        )


def answer_pause(output: Any, decision: Decision | None, rerun: str) -> dict[str, Any]:
    """The approvals for every call the paused run waits on: from --approve/--reject, or
    asked one by one when a person is at the terminal; otherwise the run stays paused and
    the command says how to answer it."""
    from statewise import Approval

    calls = output.pending_tool_calls
    client = [c.tool_name for c in calls if getattr(c, "kind", "approval") == "client"]
    if client:
        fail(
            f"run {output.run_id} waits for client-side tools ({', '.join(client)}), which "
            "only a frontend can answer",
            code=RUN_PAUSED,
        )
    if decision is not None:
        return {
            c.tool_call_id: True if decision.approve else Approval.reject(decision.reason or "")
            for c in calls
        }
    if not sys.stdin.isatty():
        fail(
            f"run {output.run_id} is paused, waiting for approval",
            hint=f"Answer it with: {rerun} --continue {output.run_id} --approve "
            "(or --reject REASON)",
            code=RUN_PAUSED,
        )
    import typer

    approvals: dict[str, Any] = {}
    for call in calls:
        if typer.confirm(f"Approve {call.tool_name}?", default=False, err=True):
            approvals[call.tool_call_id] = True
        else:
            reason = typer.prompt("Why not? (sent to the model)", default="rejected", err=True)
            approvals[call.tool_call_id] = Approval.reject(reason)
    return approvals


@dataclass(kw_only=True)
class Replay:
    state: dict[str, Any]
    queries: list[str]


def parse_state(text: str, where: str = "--state") -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError(
            f"{where} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})",
            hint='Example: --state \'{"user_name": "Ann", "items": []}\'',
        ) from None
    if not isinstance(value, dict):
        raise CliError(f"{where} must be a JSON object, got {type(value).__name__}")
    return value


def read_replay(path: Path) -> Replay:
    if not path.is_file():
        raise CliError(f"no such replay file: {path}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise CliError(
            f"{path} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"cannot read {path}: {exc}") from None
    shape = 'a replay file holds {"state": {...}, "queries": ["first message", ...]}'
    if not isinstance(data, dict):
        raise CliError(f"{path}: {shape}")
    queries = data.get("queries")
    if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
        raise CliError(f'{path}: "queries" must be a list of strings; {shape}')
    state = data.get("state") or {}
    if not isinstance(state, dict):
        raise CliError(f'{path}: "state" must be a JSON object; {shape}')
    return Replay(state=state, queries=queries)


def use_db(target: Any, url: str) -> None:
    """Point `target` (and its state engine) at the database `url` names."""
    try:
        db = resolve_db(url)
    except StatewiseError as exc:
        raise CliError(f"--db {url}: {exc}") from None
    if not callable(getattr(target, "use_db", None)):
        raise CliError(f"--db: {type(target).__name__} cannot change its database")
    target.use_db(db)


def run_queries(
    *,
    console: Console,
    target: str,
    queries: list[str],
    session_id: str | None,
    user_id: str | None,
    db: str | None,
    state: Mapping[str, Any] | None,
    show_state: bool,
    traceback: bool,
    decision: Decision | None = None,
    continue_run: str | None = None,
) -> None:
    try:
        agent, display = load_target(target)
    except CliError:
        raise
    except Exception as exc:
        if traceback:
            err_console.print(Text(tb.format_exc()))
        raise CliError(
            f"importing {target} failed: {type(exc).__name__}: {exc}",
            hint=None if traceback else "Add --traceback to see where.",
        ) from None
    if db is not None:
        use_db(agent, db)
    session_id = session_id or str(uuid.uuid4())
    url = db or db_url_of(getattr(agent, "db", None))
    where = f" --db {hint_url(url)}" if url else ""
    rerun = f"statewise run {target} --session {session_id}{where}"

    def attempt(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return call(*args, **kwargs)
        except KeyboardInterrupt:
            fail("interrupted", code=130)
        except Exception as exc:
            if traceback:
                err_console.print(Text(tb.format_exc()))
            fail(
                f"the run failed: {type(exc).__name__}: {exc}",
                hint=None if traceback else "Add --traceback to see where.",
                code=RUN_FAILED,
            )

    def settle(output: Any) -> None:
        """Print a run's answer; a paused run is shown with what it waits on and answered
        (--approve, --reject, or asked at a terminal) until it ends."""
        while output.status == "paused":
            show_pause(output, display)
            approvals = answer_pause(output, decision, rerun)
            output = attempt(
                agent.continue_run, output.run_id, session_id=session_id, approvals=approvals
            )
        console.print(Text(f"[{display}]: {output.content or ''}"), soft_wrap=True)
        if show_state:
            console.print(Text("[state]:", style="dim"))
            console.print_json(data=output.session_state)

    if continue_run is not None:
        paused = [r for r in agent.get_paused_runs(session_id) if r.run.run_id == continue_run]
        if not paused:
            raise CliError(
                f"session {session_id} has no paused run {continue_run}",
                hint=f"Its paused runs: statewise runs paused {session_id}{where or ' --db URL'}",
            )
        settle(_Paused(run_id=continue_run, pending_tool_calls=paused[0].pending))
    for i, query in enumerate(queries):
        console.print(Text(f"[user]: {query}"), soft_wrap=True)
        settle(
            attempt(
                agent.run,
                query,
                session_id=session_id,
                user_id=user_id,
                session_state=dict(state) if state and i == 0 else None,
            )
        )
    err_console.print(
        Text(
            f"session {session_id}: continue it with --session {session_id}; inspect it with "
            f"`statewise state show {session_id}{where or ' --db URL'}`",
            style="dim",
        ),
        soft_wrap=True,
    )


def hint_url(url: str) -> str:
    """A database URL to paste into any shell from any directory: a relative SQLite path
    made absolute, in double quotes (which bash, zsh, fish, PowerShell and cmd all take)."""
    prefix = "sqlite:///"
    if url.startswith(prefix) and not url.startswith(prefix + "/"):
        path = url[len(prefix) :]
        if path and path != ":memory:":
            url = prefix + str(Path(path).resolve())
    return f'"{url}"'


def db_url_of(db: Any) -> str | None:
    """A URL for a database object, when it has one (SQLite files do)."""
    from statewise.agent.service import BaseDb, database_url

    return database_url(db) if isinstance(db, BaseDb) else None
