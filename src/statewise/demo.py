"""A shopping-list agent, with an offline model that plays the LLM's part.

`shopping_list_model` reads the user's request and calls the agent's tools the way a real
model would; for its answer it reads the list from the system message, which statewise
re-renders from state before every model call, so the answer always shows the current list.
"""

from __future__ import annotations

import json
import re
from textwrap import dedent
from typing import Any

from statewise.agent.agent import Agent
from statewise.db.sqlite import SqliteDb
from statewise.models.base import Model
from statewise.models.function import FunctionModel
from statewise.models.messages import Message, ModelResponse, RequestInfo, ToolCall


def add_item(session_state: dict[str, Any], item: str) -> str:
    """Add an item to the shopping list and return confirmation.

    Args:
        item: The item to add.
    """
    if item.lower() not in [i.lower() for i in session_state["shopping_list"]]:
        session_state["shopping_list"].append(item)
        return f"Added '{item}' to the shopping list"
    return f"'{item}' is already in the shopping list"


def remove_item(session_state: dict[str, Any], item: str) -> str:
    """Remove an item from the shopping list by name.

    Args:
        item: The item to remove.
    """
    for i, list_item in enumerate(session_state["shopping_list"]):
        if list_item.lower() == item.lower():
            session_state["shopping_list"].pop(i)
            return f"Removed '{list_item}' from the shopping list"
    return f"'{item}' was not found in the shopping list"


def list_items(session_state: dict[str, Any]) -> str:
    """List all items in the shopping list."""
    shopping_list = session_state["shopping_list"]
    if not shopping_list:
        return "The shopping list is empty."
    return "Current shopping list:\n" + "\n".join(f"- {item}" for item in shopping_list)


INSTRUCTIONS = dedent("""\
    Your job is to manage a shopping list.
    The shopping list starts empty. You can add items, remove items by name, and list all items.
    Current shopping list: {shopping_list}
""")

_ITEM_SPLIT = re.compile(r",\s*(?:and\s+)?|\s+and\s+")


def parse_items(text: str) -> list[str]:
    """'milk, eggs, and bread' -> ['milk', 'eggs', 'bread']."""
    text = re.sub(r"\b(to|on|from)\s+(the|my)\s+(shopping\s+)?list\b.*$", "", text, flags=re.I)
    text = re.sub(r"^\s*(just|some|the)\s+", "", text.strip(" .!?"), flags=re.I)
    return [i.strip(" .!?") for i in _ITEM_SPLIT.split(text) if i.strip(" .!?")]


def current_list(messages: list[Message]) -> list[str]:
    """The list as the (re-rendered) system message shows it."""
    system = messages[0].content if messages and messages[0].role == "system" else ""
    match = re.search(r"Current shopping list: (\[.*\])", system or "")
    return list(json.loads(match.group(1))) if match else []


def plan_tool_calls(request: str, items_now: list[str]) -> list[ToolCall]:
    """What a model would call for one of the demo's requests."""
    text = request.strip()
    lowered = text.lower()
    if match := re.search(r"start over with (.+)$", text, flags=re.I):
        calls = [ToolCall("remove_item", {"item": item}) for item in items_now]
        return calls + [ToolCall("add_item", {"item": i}) for i in parse_items(match.group(1))]
    if match := re.match(r"(?:i got|i bought|remove|delete)\s+(.+)$", text, flags=re.I):
        return [ToolCall("remove_item", {"item": i}) for i in parse_items(match.group(1))]
    if match := re.match(r"(?:please\s+)?(?:add|i need|i also need|get)\s+(.+)$", text, flags=re.I):
        return [ToolCall("add_item", {"item": i}) for i in parse_items(match.group(1))]
    if re.search(r"what'?s on my list|list (all|my)|show", lowered):
        return [ToolCall("list_items", {})]
    return []


def shopping_list_model(messages: list[Message], info: RequestInfo) -> ModelResponse:
    last = messages[-1]
    if last.role == "tool":
        items = current_list(messages)
        listing = ", ".join(items) if items else "nothing"
        return ModelResponse(content=f"Done. Your shopping list now has: {listing}.")
    calls = plan_tool_calls(last.content or "", current_list(messages))
    for n, call in enumerate(calls):
        call.id = f"call_{n}"
    if not calls:
        return ModelResponse(content="I can add, remove and list shopping-list items.")
    return ModelResponse(tool_calls=calls)


def shopping_agent(
    db_file: str = "tmp/statewise_demo.db", model: Model | str | None = None, **kwargs: Any
) -> Agent:
    """The demo agent; pass `model="openai:gpt-4o-mini"` (or any model) for a real LLM."""
    return Agent(
        name="shopping-list",
        model=model or FunctionModel(shopping_list_model, id="shopping-list-player"),
        db=SqliteDb(db_file=db_file),
        session_state={"shopping_list": []},
        tools=[add_item, remove_item, list_items],
        instructions=INSTRUCTIONS,
        markdown=True,
        **kwargs,
    )


DEMO_RUNS = [
    ("alice-groceries", "alice", "Add milk, eggs, and bread to the shopping list"),
    ("alice-groceries", "alice", "I got bread"),
    ("alice-groceries", "alice", "I need apples and oranges"),
    ("bob-party", "bob", "Add chips and lemonade"),
    ("alice-groceries", "alice", "whats on my list?"),
    (
        "alice-groceries",
        "alice",
        "Clear everything from my list and start over with just bananas and yogurt",
    ),
    ("bob-party", "bob", "I got chips"),
]
