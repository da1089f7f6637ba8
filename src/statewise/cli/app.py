"""`statewise ...`: the demo, running agents, replaying inputs, and inspecting state."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, TypeVar

import typer
from rich.console import Console
from rich.pretty import Pretty

from statewise.cli._errors import CliError, fail
from statewise.cli._options import DbOption, JsonOption
from statewise.cli.chat import chat
from statewise.cli.fleet import enqueue, runs_app, worker
from statewise.cli.serve import serve
from statewise.cli.sessions import register_runs, register_state, sessions_app

HELP_OPTIONS = {"help_option_names": ["-h", "--help"]}

app = typer.Typer(
    name="statewise",
    help="Stateful LLM agents whose session state is never lost. Run `statewise demo` first.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="rich",
    context_settings=HELP_OPTIONS,
)
state_app = typer.Typer(
    name="state",
    help="A session's state: now, its history of changes, what changed between two "
    "versions; roll it back, or fork a new session from it.",
    no_args_is_help=True,
    context_settings=HELP_OPTIONS,
)
app.add_typer(state_app)
console = Console()
T = TypeVar("T")


@contextmanager
def _clear_errors() -> Iterator[None]:
    """A usage mistake is one red line and exit code 2, never a traceback."""
    try:
        yield
    except CliError as exc:
        fail(str(exc), hint=exc.hint)


def _print_version(value: bool) -> None:
    if value:
        from statewise import __version__

        typer.echo(f"statewise {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            "-V",
            callback=_print_version,
            is_eager=True,
            help="Print the version and exit.",
        ),
    ] = False,
) -> None:
    """Stateful LLM agents whose session state is never lost. Run `statewise demo` first."""


@app.command()
def demo(
    db_file: Annotated[
        Path, typer.Option("--db-file", help="SQLite file to keep the sessions in.")
    ] = Path("tmp/statewise_demo.db"),
    stream: Annotated[bool, typer.Option(help="Stream the answers token by token.")] = False,
) -> None:
    """Run a shopping-list agent offline: several runs, two sessions, on SQLite."""
    from statewise.demo import DEMO_RUNS, shopping_agent

    agent = shopping_agent(str(db_file))
    for session_id, user_id, message in DEMO_RUNS:
        console.rule(f"[bold]session {session_id}[/] (user {user_id})")
        agent.print_response(message, session_id=session_id, user_id=user_id, stream=stream)
        console.print("Session state:", Pretty(agent.get_session_state(session_id)))
    console.rule()
    console.print(f"The sessions are stored in [bold]{db_file.resolve()}[/]")
    from statewise.cli._run import hint_url

    console.print(
        "Run it again: the state carries over. Inspect it with "
        f"`statewise state show alice-groceries --db {hint_url(f'sqlite:///{db_file}')}`.",
        soft_wrap=True,
        markup=False,
        highlight=False,
    )


@app.command(
    epilog="Examples:\n\n"
    '  statewise run my_agent.py "Add milk to my list" --session s1 --db sqlite:///agents.db\n\n'
    '  statewise run my_agent.py:helper "hi" --state \'{"user_name": "Ann"}\'\n\n'
    "  statewise run examples/session_state_agent --replay "
    "examples/session_state_agent/input.json --show-state",
)
def run(
    target: Annotated[
        str,
        typer.Argument(
            help="The Python file that defines your agent, or a folder holding agent.py. "
            "Add :name to pick one object (my_agent.py:helper); otherwise the only "
            "Agent/Team/Workflow in the file is used, else `root_agent`, else `agent`.",
            show_default=False,
        ),
    ],
    message: Annotated[
        str | None,
        typer.Argument(
            help="What to say to the agent (leave out with --replay).", show_default=False
        ),
    ] = None,
    session: Annotated[
        str | None,
        typer.Option(
            "--session", help="Session id to continue (default: a new session).", show_default=False
        ),
    ] = None,
    user: Annotated[
        str | None,
        typer.Option(
            "--user",
            help="User id that owns the session (shares `user:` keys).",
            show_default=False,
        ),
    ] = None,
    db: Annotated[
        str | None,
        typer.Option(
            "--db",
            help="Database URL to use instead of the agent's own db= "
            "(sqlite:///file.db, memory://, postgresql://..., redis://...).",
            show_default=False,
        ),
    ] = None,
    state: Annotated[
        str | None,
        typer.Option(
            "--state",
            help="JSON object merged into the session state before the "
            '(first) run, e.g. \'{"user_name": "Ann"}\'.',
            show_default=False,
        ),
    ] = None,
    replay: Annotated[
        Path | None,
        typer.Option(
            "--replay",
            help='JSON file {"state": {...}, "queries": ["...", ...]}: '
            "each query runs in order on one session; the state goes into the first "
            "run.",
            show_default=False,
        ),
    ] = None,
    show_state: Annotated[
        bool, typer.Option("--show-state", help="Print the session state after each run.")
    ] = False,
    traceback: Annotated[
        bool, typer.Option("--traceback", help="Print the full traceback when something fails.")
    ] = False,
    debug: Annotated[
        bool,
        typer.Option(
            "--debug",
            help="Log each model request, tool call, commit and conflict "
            "(the same as STATEWISE_LOG=debug).",
        ),
    ] = False,
    approve: Annotated[
        bool,
        typer.Option(
            "--approve", help="Approve every tool call a run pauses on (needs_approval tools)."
        ),
    ] = False,
    reject: Annotated[
        str | None,
        typer.Option(
            "--reject",
            metavar="REASON",
            help="Reject every tool call a run pauses on; the reason goes to the model.",
            show_default=False,
        ),
    ] = None,
    continue_: Annotated[
        str | None,
        typer.Option(
            "--continue",
            metavar="RUN_ID",
            help="Answer this paused run of --session (with --approve or --reject, or asked "
            "at the terminal) instead of sending a message.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Run an agent defined in a Python file: one message, or a replay file's queries.

    Prints the exchange as \\[user]: ... and \\[agent name]: ... lines. A run that pauses
    for approval shows the call it waits on and is answered by --approve or --reject, or
    asked at the terminal; otherwise the command exits with code 3 and says how to answer.
    """
    from statewise.cli._run import Decision, parse_state, read_replay, run_queries

    if debug:
        import logging
        import os

        os.environ["STATEWISE_LOG"] = "debug"
        logging.getLogger("statewise").setLevel(logging.DEBUG)

    with _clear_errors():
        if approve and reject is not None:
            raise CliError("give --approve or --reject, not both")
        if continue_ is not None and session is None:
            raise CliError("--continue needs the --session the paused run belongs to")
        if (message is None) == (replay is None) and not (
            continue_ is not None and message is None and replay is None
        ):
            raise CliError(
                "give either a message or --replay FILE",
                hint='statewise run my_agent.py "hello"   or   '
                "statewise run my_agent.py --replay input.json",
            )
        initial = parse_state(state) if state is not None else {}
        queries = [message] if message is not None else []
        if replay is not None:
            data = read_replay(replay)
            queries = data.queries
            initial = {**data.state, **initial}
        run_queries(
            console=console,
            target=target,
            queries=queries,
            session_id=session,
            user_id=user,
            db=db,
            state=initial,
            show_state=show_state,
            traceback=traceback,
            decision=Decision(approve=True)
            if approve
            else (Decision(approve=False, reason=reject) if reject is not None else None),
            continue_run=continue_,
        )


@state_app.command("show")
def state_show(
    session: Annotated[str, typer.Argument(help="The session id.", show_default=False)],
    db: DbOption = None,
    at: Annotated[
        str | None,
        typer.Option(
            "--at",
            help="A past version (number) or run id; the session's own keys at that point.",
            show_default=False,
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Show a session's current state (its own keys plus its user's user: and app's app:
    keys)."""
    from statewise.cli import _state

    with _clear_errors(), _state.open_db(db) as sessions:
        _state.show(console, sessions, session, at, as_json)


@state_app.command("history")
def state_history(
    session: Annotated[str, typer.Argument(help="The session id.", show_default=False)],
    db: DbOption = None,
    limit: Annotated[
        int | None,
        typer.Option("--limit", min=1, help="Only the last N versions.", show_default=False),
    ] = None,
    before: Annotated[
        int | None,
        typer.Option(
            "--before",
            min=1,
            help="Only versions before this one (with --limit: the page before it).",
            show_default=False,
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """List every committed change of a session's state: version, run, step, and the
    callback, tool or API call that made it. Printed a page at a time as it is read;
    --json prints one JSON array, one version per line."""
    from statewise.cli import _state

    with _clear_errors(), _state.open_db(db) as sessions:
        _state.history(console, sessions, session, limit, as_json, db or "URL", before)


@state_app.command("diff")
def state_diff(
    session: Annotated[str, typer.Argument(help="The session id.", show_default=False)],
    from_: Annotated[
        str | None,
        typer.Option(
            "--from",
            help="Version number or run id to compare from (default: 0, the empty state).",
            show_default=False,
        ),
    ] = None,
    to: Annotated[
        str | None,
        typer.Option(
            "--to",
            help="Version number or run id to compare to (default: now).",
            show_default=False,
        ),
    ] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """What changed in a session's state between two versions (or runs), path by path."""
    from statewise.cli import _state

    with _clear_errors(), _state.open_db(db) as sessions:
        _state.diff(console, sessions, session, from_, to, as_json)


app.command("chat")(chat)
app.command("serve")(serve)
app.command("enqueue")(enqueue)
app.command("worker")(worker)
app.add_typer(runs_app)
app.add_typer(sessions_app)
register_state(state_app)
register_runs(runs_app)


def _rich_logging() -> None:
    """statewise's log records (debug_mode, STATEWISE_LOG=debug) through a rich handler."""
    import logging
    import os

    from rich.logging import RichHandler

    logger = logging.getLogger("statewise")
    if not logger.handlers:
        handler = RichHandler(console=Console(stderr=True), show_path=False, markup=False)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        logger.propagate = False
    level = os.environ.get("STATEWISE_LOG", "").strip().upper()
    if level in ("DEBUG", "INFO", "WARNING", "ERROR"):
        logger.setLevel(level)


def reflow_help(typer_app: typer.Typer) -> None:
    """Help from docstrings as paragraphs, not as the docstring's line breaks: rich keeps a
    single newline, so a docstring wrapped at 88 columns showed broken lines at any width.
    Blank lines still separate paragraphs."""
    import inspect
    import re

    def reflow(text: str) -> str:
        paragraphs = re.split(r"\n\s*\n", inspect.cleandoc(text))
        return "\n\n".join(" ".join(p.split()) for p in paragraphs)

    for command in typer_app.registered_commands:
        doc = command.help or (command.callback.__doc__ if command.callback else None)
        if doc:
            command.help = reflow(doc)
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            info = group.typer_instance.info
            if isinstance(info.help, str):
                info.help = reflow(info.help)
            reflow_help(group.typer_instance)


reflow_help(app)


def main() -> None:
    _rich_logging()
    app()
