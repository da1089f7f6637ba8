"""Agentic session state. `enable_agentic_state=True` gives the model an
`update_session_state` tool; `add_session_state_to_context=True` shows it the state.

Run: python examples/agentic_state.py
"""

from __future__ import annotations

import re
from typing import Any

from statewise import Agent
from statewise.db import SqliteDb
from statewise.demo import parse_items
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo, ToolCall


def agentic_model(messages: list[Message], info: RequestInfo) -> ModelResponse:
    """Uses the update_session_state tool the way a model would, then reads the state back
    from the <session_state> block of the re-rendered system message."""
    if messages[-1].role == "tool":
        system = messages[0].content or ""
        shown = re.search(r"<session_state>\n(.*)\n</session_state>", system, re.S)
        return ModelResponse(
            content=f"Updated. Session state is now {shown.group(1) if shown else '?'}"
        )
    request = messages[-1].content or ""
    match = re.search(r"\badd (.+)", request, re.I)
    items = parse_items(match.group(1)) if match else []
    return ModelResponse(
        tool_calls=[
            ToolCall("update_session_state", {"append": {"shopping_list": items}}, "call_1")
        ]
    )


def build(db_file: str) -> Agent:
    return Agent(
        db=SqliteDb(db_file=db_file),
        model=FunctionModel(agentic_model),
        session_state={"shopping_list": []},
        add_session_state_to_context=True,  # Required so the agent is aware of the session state
        enable_agentic_state=True,  # Adds a tool to manage the session state
    )


# `statewise run examples/agentic_state.py "Add milk and eggs"` runs this agent
# (sessions in tmp/agents.db).
agent = build("tmp/agents.db")


def main(db_file: str = "tmp/agents.db") -> dict[str, Any]:
    agent = build(db_file)
    output = agent.print_response("Add milk, eggs, and bread to the shopping list", stream=True)
    print(f"Session state: {agent.get_session_state()}")
    return {"state": agent.get_session_state(), "output": output}


if __name__ == "__main__":
    main()
