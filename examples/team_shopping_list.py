"""A team whose two members edit one shopping list.

The leader delegates "add ..." to the Adder and "remove ..." to the Remover; both members'
tools write the team's session state, the Remover sees what the Adder added in the same
run, and the leader's instructions, re-rendered before each of its model calls, show the
list as the members left it. Offline models play the three LLMs.

Run: python examples/team_shopping_list.py
"""

from __future__ import annotations

import re
from typing import Any

from statewise import Agent, Team
from statewise.db import SqliteDb
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo, ToolCall


def add_item(session_state: dict[str, Any], item: str) -> str:
    """Add an item to the shopping list.

    Args:
        item: The item to add.
    """
    if item not in session_state["shopping_list"]:
        session_state["shopping_list"].append(item)
    return f"Added {item}; the list is now {session_state['shopping_list']}"


def remove_item(session_state: dict[str, Any], item: str) -> str:
    """Remove an item from the shopping list.

    Args:
        item: The item to remove.
    """
    if item in session_state["shopping_list"]:
        session_state["shopping_list"].remove(item)
        return f"Removed {item}; the list is now {session_state['shopping_list']}"
    return f"{item} is not on the list {session_state['shopping_list']}"


def _items(text: str) -> list[str]:
    return [p.strip(" .") for p in re.split(r",\s*(?:and\s+)?|\s+and\s+", text) if p.strip(" .")]


def member_model(tool: str) -> FunctionModel:
    """A member calls its tool once per item in its task, then reports the last result."""

    def fn(messages: list[Message], info: RequestInfo) -> ModelResponse:
        if messages[-1].role == "tool":
            return ModelResponse(content=messages[-1].content or "")
        task = re.sub(r"^(add|remove)\s+", "", messages[-1].content or "", flags=re.I)
        calls = [
            ToolCall(tool, {"item": item}, f"{tool}_{n}") for n, item in enumerate(_items(task))
        ]
        return ModelResponse(tool_calls=calls)

    return FunctionModel(fn, id=f"{tool}-player")


def leader_model(messages: list[Message], info: RequestInfo) -> ModelResponse:
    """Splits the request into an add task and a remove task, delegates each, then
    answers with the list as its (re-rendered) instructions show it."""
    request = next(m.content or "" for m in messages if m.role == "user")
    tasks = []
    if match := re.search(r"\badd ([^;.]+?)(?:;|\.|$| then)", request, re.I):
        tasks.append(("Adder", f"add {match.group(1)}"))
    if match := re.search(r"\bremove ([^;.]+?)(?:;|\.|$| then)", request, re.I):
        tasks.append(("Remover", f"remove {match.group(1)}"))
    done = sum(1 for m in messages if m.role == "tool")
    if done < len(tasks):
        member, task = tasks[done]
        return ModelResponse(
            tool_calls=[
                ToolCall(
                    "delegate_task_to_member", {"member_name": member, "task": task}, f"d{done}"
                )
            ]
        )
    shown = re.search(r"Shopping list: (.*)", messages[0].content or "")
    return ModelResponse(content=f"Done. Shopping list: {shown.group(1) if shown else '?'}")


def build(db_file: str) -> Team:
    adder = Agent(
        name="Adder",
        model=member_model("add_item"),
        tools=[add_item],
        description="Adds items to the shopping list.",
    )
    remover = Agent(
        name="Remover",
        model=member_model("remove_item"),
        tools=[remove_item],
        description="Removes items from the shopping list.",
    )
    return Team(
        name="Shopping Team",
        members=[adder, remover],
        model=FunctionModel(leader_model, id="leader-player"),
        instructions="Keep the shopping list tidy.\nShopping list: {shopping_list}",
        session_state={"shopping_list": []},
        db=SqliteDb(db_file=db_file),
        mode="coordinate",
    )


# `statewise run examples/team_shopping_list.py "Add milk and eggs"` runs this team (sessions in tmp/team.db).
team = build("tmp/team.db")


def main(db_dir: str = "tmp") -> dict[str, Any]:
    team = build(f"{db_dir}/team.db")
    answers, states = [], []
    for request in [
        "Add milk, eggs and bread",
        "Add apples; remove eggs",
        "Remove milk and bread; add coffee",
    ]:
        output = team.print_response(request, session_id="household")
        answers.append(output.content)
        states.append(team.get_session_state("household"))
        print("Team session state:", states[-1])
    return {"answers": answers, "states": states}


if __name__ == "__main__":
    main()
