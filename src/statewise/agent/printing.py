"""`print_response`: the exchange rendered with rich."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator

from rich.console import Console
from rich.markdown import Markdown
from rich.panel import Panel
from rich.text import Text

from statewise.run.events import (
    ContentDelta,
    RunCompleted,
    RunEvent,
    ToolCallCompleted,
    ToolCallStarted,
)
from statewise.run.output import RunOutput


class _Printer:
    def __init__(self, *, input: str, markdown: bool, stream: bool, show_tool_calls: bool) -> None:
        self.console = Console()
        self.markdown = markdown
        self.stream = stream
        self.show_tool_calls = show_tool_calls
        self.output: RunOutput | None = None
        self.streamed = False
        self.console.print(Panel(Text(input), title="Message", border_style="cyan"))

    def handle(self, event: RunEvent) -> None:
        if isinstance(event, ContentDelta) and event.member_of:
            return  # a team member's answer reaches the leader, which answers the user
        if isinstance(event, ContentDelta) and self.stream:
            self.console.print(event.content, end="", markup=False, highlight=False)
            self.streamed = True
        elif isinstance(event, ToolCallStarted) and self.show_tool_calls:
            args = json.dumps(event.arguments, ensure_ascii=False)
            who = f"{event.agent_name}: " if event.member_of and event.agent_name else ""
            self.console.print(Text(f"• {who}{event.tool_name}({args})", style="dim"))
        elif isinstance(event, ToolCallCompleted) and self.show_tool_calls and event.is_error:
            self.console.print(Text(f"  ✗ {event.result}", style="red"))
        elif isinstance(event, RunCompleted):
            self.output = event.output

    def finish(self) -> RunOutput:
        assert self.output is not None
        if self.streamed:
            self.console.print()
            return self.output
        content = self.output.content or ""
        body = Markdown(content) if self.markdown else Text(content)
        self.console.print(Panel(body, title="Response", border_style="green"))
        return self.output


def print_run(
    events: Iterator[RunEvent], *, input: str, markdown: bool, stream: bool, show_tool_calls: bool
) -> RunOutput:
    printer = _Printer(
        input=input, markdown=markdown, stream=stream, show_tool_calls=show_tool_calls
    )
    for event in events:
        printer.handle(event)
    return printer.finish()


async def aprint_run(
    events: AsyncIterator[RunEvent],
    *,
    input: str,
    markdown: bool,
    stream: bool,
    show_tool_calls: bool,
) -> RunOutput:
    printer = _Printer(
        input=input, markdown=markdown, stream=stream, show_tool_calls=show_tool_calls
    )
    async for event in events:
        printer.handle(event)
    return printer.finish()
