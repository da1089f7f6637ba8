"""The Agno side of `bench_peers.py`: the same one-tool agent, on Agno 3.1.10.

Imported only by the process that runs Agno, so the statewise process never loads it.
Agno's telemetry is off (`telemetry=False`): by default each run queues a report to
Agno's servers for a background thread, which here would reach for the network and
spend CPU that statewise, sending nothing, does not.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agno.agent import Agent as AgnoAgent
from agno.db.sqlite import SqliteDb as AgnoSqliteDb
from agno.models.base import Model as AgnoModel
from agno.models.response import ModelResponse as AgnoResponse
from agno.run import RunContext as AgnoRunContext

ITEM = "item-0123456789"


def agno_add(run_context: AgnoRunContext, item: str) -> str:
    """Append one item."""
    assert run_context.session_state is not None
    run_context.session_state["items"].append(item)
    return "ok"


@dataclass
class Scripted(AgnoModel):  # type: ignore[misc]
    """Call the tool, then answer; no I/O."""

    id: str = "scripted"
    name: str = "Scripted"
    provider: str = "scripted"

    def invoke(self, messages: Any = None, **kwargs: Any) -> Any:
        if messages and messages[-1].role == "tool":
            return AgnoResponse(role="assistant", content="ok")
        call = {
            "id": "c",
            "type": "function",
            "function": {"name": "agno_add", "arguments": f'{{"item": "{ITEM}"}}'},
        }
        return AgnoResponse(role="assistant", tool_calls=[call])

    async def ainvoke(self, *args: Any, **kwargs: Any) -> Any:
        return self.invoke(*args, **kwargs)

    def invoke_stream(self, *args: Any, **kwargs: Any) -> Any:
        yield self.invoke(*args, **kwargs)

    async def ainvoke_stream(self, *args: Any, **kwargs: Any) -> Any:
        yield self.invoke(*args, **kwargs)

    def _parse_provider_response(self, response: Any, **kwargs: Any) -> Any:
        return response

    def _parse_provider_response_delta(self, response: Any) -> Any:
        return response


class Agno:
    """Drives Agno the way `bench_peers.Statewise` drives statewise."""

    name = "Agno"

    def __init__(self, work: Path) -> None:
        self.model = Scripted()
        self.db = AgnoSqliteDb(db_file=str(work / "agno.db"))
        self.agent = self.construct()
        self.memory_agent = AgnoAgent(
            model=self.model, tools=[agno_add], session_state={"items": []}, telemetry=False
        )

    def construct(self) -> Any:
        return AgnoAgent(
            model=self.model,
            tools=[agno_add],
            db=self.db,
            session_state={"items": []},
            telemetry=False,
        )

    def run(self, session_id: str) -> None:
        self.agent.run("go", session_id=session_id)

    def run_in_memory(self, session_id: str) -> None:
        self.memory_agent.run("go", session_id=session_id)

    def write_big(self, session_id: str, items: list[Any]) -> None:
        writer = AgnoAgent(
            model=self.model,
            tools=[agno_add],
            db=self.db,
            session_state={"items": items},
            telemetry=False,
        )
        writer.run("go", session_id=session_id)

    def count(self, session_id: str) -> int:
        return len(self.agent.get_session_state(session_id=session_id)["items"])
