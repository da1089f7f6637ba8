"""A shopping-list workflow whose two agent steps share one session state,
persisted in SQLite.

Both agents receive the workflow's input as their message and work on the workflow's
state through `run_context.session_state`. Offline models play the two LLMs: they read
the request and call the tools a real model would call. Each completed step is committed
with its output, so `workflow.get_state_history()` shows which step changed what.

Run: python examples/workflow_shopping_list.py
"""

from __future__ import annotations

import re
from typing import Any

from statewise import Agent, RunContext, Step, Workflow
from statewise.db import SqliteDb
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo, ToolCall


# Define tools to manage a shopping list in workflow session state
def add_item(run_context: RunContext, item: str) -> str:
    """Add an item to the shopping list in workflow session state.

    Args:
        item (str): The item to add to the shopping list
    """
    if not run_context.session_state:
        run_context.session_state = {}

    # Check if item already exists (case-insensitive)
    existing_items = [
        existing_item.lower() for existing_item in run_context.session_state["shopping_list"]
    ]
    if item.lower() not in existing_items:
        run_context.session_state["shopping_list"].append(item)
        return f"Added '{item}' to the shopping list."
    else:
        return f"'{item}' is already in the shopping list."


def remove_item(run_context: RunContext, item: str) -> str:
    """Remove an item from the shopping list in workflow session state.

    Args:
        item (str): The item to remove from the shopping list
    """
    if not run_context.session_state:
        run_context.session_state = {}

    if len(run_context.session_state["shopping_list"]) == 0:
        return f"Shopping list is empty. Cannot remove '{item}'."

    # Find and remove item (case-insensitive)
    shopping_list = run_context.session_state["shopping_list"]
    for i, existing_item in enumerate(shopping_list):
        if existing_item.lower() == item.lower():
            removed_item = shopping_list.pop(i)
            return f"Removed '{removed_item}' from the shopping list."

    return f"'{item}' not found in the shopping list."


def remove_all_items(run_context: RunContext) -> str:
    """Remove all items from the shopping list in workflow session state."""
    if not run_context.session_state:
        run_context.session_state = {}

    run_context.session_state["shopping_list"] = []
    return "Removed all items from the shopping list."


def list_items(run_context: RunContext) -> str:
    """List all items in the shopping list from workflow session state."""
    if not run_context.session_state:
        run_context.session_state = {}

    if len(run_context.session_state["shopping_list"]) == 0:
        return "Shopping list is empty."

    items = run_context.session_state["shopping_list"]
    items_str = "\n".join([f"- {item}" for item in items])
    return f"Shopping list:\n{items_str}"


# ---- offline players for the two LLMs ---------------------------------------------------


def _items(text: str) -> list[str]:
    """'milk, bread, and eggs' -> ['milk', 'bread', 'eggs']."""
    parts = re.split(r",\s*(?:and\s+)?|\s+and\s+", text)
    return [p.strip(" .") for p in parts if p.strip(" .")]


def _answer_from_tools(messages: list[Message]) -> ModelResponse:
    results = []
    for message in reversed(messages):
        if message.role != "tool":
            break
        results.insert(0, message.content or "")
    return ModelResponse(content="\n".join(results))


def assistant_model(messages: list[Message], info: RequestInfo) -> ModelResponse:
    """Adds and removes the items the user names."""
    if messages[-1].role == "tool":
        return _answer_from_tools(messages)
    request = messages[-1].content or ""
    calls = []
    if match := re.search(
        r"\badd (.+?)(?: to (?:my|the) (?:shopping )?list|[.!]?$)", request, re.I
    ):
        calls = [ToolCall("add_item", {"item": item}) for item in _items(match.group(1))]
    elif match := re.search(r"\bremove (.+?)(?: from (?:my|the) list|[.!]?$)", request, re.I):
        calls = [ToolCall("remove_item", {"item": item}) for item in _items(match.group(1))]
    if not calls:
        return ModelResponse(content="Nothing for me to add or remove; the list manager takes it.")
    for n, call in enumerate(calls):
        call.id = f"call_{n}"
    return ModelResponse(tool_calls=calls)


def list_manager_model(messages: list[Message], info: RequestInfo) -> ModelResponse:
    """Shows the list; clears it first when asked to."""
    if messages[-1].role == "tool":
        return _answer_from_tools(messages)
    request = (messages[-1].content or "").lower()
    calls = [ToolCall("list_items", {}, "call_list")]
    if "clear" in request:
        calls.insert(0, ToolCall("remove_all_items", {}, "call_clear"))
    return ModelResponse(tool_calls=calls)


# ---- the workflow --------------------------------------------------------------------------


def build(db_file: str) -> Workflow:
    db = SqliteDb(db_file=db_file)

    shopping_assistant = Agent(
        name="Shopping Assistant",
        model=FunctionModel(assistant_model, id="shopping-assistant-player"),
        tools=[add_item, remove_item, list_items],
        instructions=[
            "You are a helpful shopping assistant.",
            "You can help users manage their shopping list by adding, removing, and listing items.",
            "Always use the provided tools to interact with the shopping list.",
            "Be friendly and helpful in your responses.",
        ],
    )

    list_manager = Agent(
        name="List Manager",
        model=FunctionModel(list_manager_model, id="list-manager-player"),
        tools=[list_items, remove_all_items],
        instructions=[
            "You are a list management specialist.",
            "You can view the current shopping list and clear it when needed.",
            "Always show the current list when asked.",
            "Confirm actions clearly to the user.",
        ],
    )

    manage_items_step = Step(
        name="manage_items",
        description="Help manage shopping list items (add/remove)",
        agent=shopping_assistant,
    )

    view_list_step = Step(
        name="view_list",
        description="View and manage the complete shopping list",
        agent=list_manager,
    )

    return Workflow(
        name="Shopping List Workflow",
        db=db,
        steps=[manage_items_step, view_list_step],
        session_state={"shopping_list": []},
    )


# `statewise run examples/workflow_shopping_list.py "Add milk and eggs"` runs this workflow (sessions in tmp/workflow.db).
workflow = build("tmp/workflow.db")


def main(db_dir: str = "tmp") -> dict[str, Any]:
    shopping_workflow = build(f"{db_dir}/workflow.db")
    states: list[dict[str, Any]] = []
    answers: list[str] = []

    print("=== Example 1: Adding Items ===")
    out = shopping_workflow.print_response(
        input="Please add milk, bread, and eggs to my shopping list."
    )
    print("Workflow session state:", shopping_workflow.get_session_state())
    states.append(shopping_workflow.get_session_state())
    answers.append(out.content)

    print("\n=== Example 2: Adding More Items ===")
    out = shopping_workflow.print_response(
        input="Add apples and bananas to the list, then show me the complete list."
    )
    print("Workflow session state:", shopping_workflow.get_session_state())
    states.append(shopping_workflow.get_session_state())
    answers.append(out.content)

    print("\n=== Example 3: Removing Items ===")
    out = shopping_workflow.print_response(
        input="Remove bread from the list and show me what's left."
    )
    print("Workflow session state:", shopping_workflow.get_session_state())
    states.append(shopping_workflow.get_session_state())
    answers.append(out.content)

    print("\n=== Example 4: Clearing List ===")
    out = shopping_workflow.print_response(
        input="Clear the entire shopping list and confirm it's empty."
    )
    print("Final workflow session state:", shopping_workflow.get_session_state())
    states.append(shopping_workflow.get_session_state())
    answers.append(out.content)
    return {"states": states, "answers": answers, "session_id": shopping_workflow.session_id}


if __name__ == "__main__":
    main()
