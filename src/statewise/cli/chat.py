"""`statewise chat TARGET [--session ID]`: an interactive session with an agent, team or
workflow. The conversation so far is shown first; then each turn streams the answer, the
tool calls with their results and the state changes as they happen, and a run that pauses
for approval is asked about inline."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.text import Text

from statewise import Sessions
from statewise.cli._errors import CliError, fail
from statewise.cli._load import load_target
from statewise.cli._run import use_db
from statewise.cli._state import describe_op
from statewise.exceptions import StatewiseError

console = Console(highlight=False)

HELP = "/state shows the session state, /exit (or Ctrl-D) leaves."


def chat(
    target: Annotated[
        str,
        typer.Argument(
            help="The Python file that defines your agent (as for `statewise run`).",
            show_default=False,
        ),
    ],
    session: Annotated[
        str | None,
        typer.Option(
            "--session", help="Session id to continue (default: a new session).", show_default=False
        ),
    ] = None,
    user: Annotated[
        str | None,
        typer.Option("--user", help="User id that owns the session.", show_default=False),
    ] = None,
    db: Annotated[
        str | None,
        typer.Option(
            "--db", help="Database URL to use instead of the agent's own db=.", show_default=False
        ),
    ] = None,
    history: Annotated[
        int, typer.Option("--history", help="Show this many earlier turns of the session.")
    ] = 10,
) -> None:
    """Talk with an agent turn by turn; tool calls, state changes and approvals show as they
    happen."""
    try:
        agent, display = load_target(target)
        if db is not None:
            use_db(agent, db)
    except CliError as exc:
        fail(str(exc), hint=exc.hint)
    except Exception as exc:
        fail(f"importing {target} failed: {type(exc).__name__}: {exc}")
    session_id = session or str(uuid.uuid4())
    _show_history(agent, session_id, history)
    console.print(Text(f"session {session_id} with {display}. {HELP}", style="dim"), soft_wrap=True)
    while True:
        try:
            line = console.input("[bold]you>[/] ")
        except (EOFError, KeyboardInterrupt):
            console.print()
            break
        text = line.strip()
        if not text:
            continue
        if text in ("/exit", "/quit"):
            break
        if text == "/state":
            console.print_json(data=agent.get_session_state(session_id))
            continue
        if text.startswith("/"):
            console.print(Text(f"unknown command {text.split()[0]}. {HELP}", style="yellow"))
            continue
        try:
            asyncio.run(_turn(agent, display, session_id, user, text))
        except KeyboardInterrupt:
            console.print(Text("\n(interrupted)", style="yellow"))
        except StatewiseError as exc:
            console.print(Text(f"error: {exc}", style="bold red"))
    console.print(
        Text(f"continue later with: statewise chat {target} --session {session_id}", style="dim")
    )


def _show_history(agent: Any, session_id: str, turns: int) -> None:
    if turns <= 0:
        return
    sessions = Sessions(agent.db)
    if sessions.get(session_id) is None:
        return
    for run in sessions.runs(session_id, limit=turns):
        console.print(Text(f"you> {run.input or ''}", style="dim"))
        answer = run.content if run.status == "completed" else f"({run.status})"
        console.print(Text(f"{run.agent_name or 'agent'}> {answer or ''}", style="dim"))


async def _turn(agent: Any, display: str, session_id: str, user: str | None, text: str) -> None:
    events = await agent.arun(text, session_id=session_id, user_id=user, stream=True)
    output = await _render(events, display)
    while output is not None and output.status == "paused":
        approvals = _ask(output)
        events = await agent.acontinue_run(
            output.run_id, session_id=session_id, approvals=approvals, stream=True
        )
        output = await _render(events, display)


async def _render(events: Any, display: str) -> Any:
    """Print a run's events as they come; the run's output."""
    streamed = False
    output = None
    async for event in events:
        kind = getattr(event, "event", "")
        if kind == "content_delta":
            if not streamed:
                console.print(Text(f"{display}> ", style="bold"), end="")
                streamed = True
            console.print(Text(event.content), end="")
        elif kind == "tool_call_started":
            args = json.dumps(event.arguments, ensure_ascii=False)
            console.print(Text(f"  -> {event.tool_name}({args})", style="cyan"), soft_wrap=True)
        elif kind == "tool_call_completed":
            style = "red" if event.is_error else "cyan"
            result = event.result if len(event.result) <= 200 else event.result[:199] + "…"
            console.print(Text(f"  <- {result}", style=style), soft_wrap=True)
        elif kind == "state_changed":
            for op in event.ops:
                console.print(Text(f"  state: {describe_op(op)}", style="green"), soft_wrap=True)
        elif kind == "run_completed":
            output = event.output
    if streamed:
        console.print()
    elif output is not None and output.status != "paused":
        console.print(Text(f"{display}> ", style="bold") + Text(str(output.content or "")))
    return output


def _ask(output: Any) -> dict[str, Any]:
    from statewise import Approval

    approvals: dict[str, Any] = {}
    for call in output.pending_tool_calls:
        args = json.dumps(call.arguments, ensure_ascii=False)
        console.print(
            Text(f"[paused] {call.tool_name}({args}) needs approval", style="bold yellow"),
            soft_wrap=True,
        )
        if call.kind == "client":
            result = typer.prompt(f"Result of the client-side tool {call.tool_name}")
            approvals[call.tool_call_id] = Approval(result=result)
        elif typer.confirm(f"Approve {call.tool_name}?", default=False):
            approvals[call.tool_call_id] = True
        else:
            reason = typer.prompt("Why not? (sent to the model)", default="rejected")
            approvals[call.tool_call_id] = Approval.reject(reason)
    return approvals


__all__ = ["chat"]
