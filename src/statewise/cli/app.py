"""`statewise ...`: the demo, running agents, replaying inputs, and inspecting state."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.pretty import Pretty

app = typer.Typer(
    name="statewise",
    help="Stateful LLM agents whose session state is never lost. Run `statewise demo` first.",
    no_args_is_help=True,
    add_completion=False,
)
console = Console()


@app.command()
def demo(
    db_file: Annotated[
        Path, typer.Option("--db-file", help="SQLite file to keep the sessions in.")
    ] = Path("tmp/statewise_demo.db"),
    stream: Annotated[bool, typer.Option(help="Stream the answers token by token.")] = False,
) -> None:
    """Run seed 001's shopping-list agent offline: several runs, two sessions, on SQLite."""
    from statewise.demo import DEMO_RUNS, shopping_agent

    agent = shopping_agent(str(db_file))
    for session_id, user_id, message in DEMO_RUNS:
        console.rule(f"[bold]session {session_id}[/] (user {user_id})")
        agent.print_response(message, session_id=session_id, user_id=user_id, stream=stream)
        console.print("Session state:", Pretty(agent.get_session_state(session_id)))
    console.rule()
    console.print(f"The sessions are stored in [bold]{db_file.resolve()}[/]")
    console.print(
        "Run it again: the state carries over. Inspect it with "
        f"`statewise state show alice-groceries --db sqlite:///{db_file}`."
    )


def main() -> None:
    app()
