"""The demo app that `statewise serve` serves when given no target: a
shopping-list agent and a two-step shopping-list workflow, both offline, on one SQLite
file (or on `--db` / STATEWISE_DB_URL).
"""

from __future__ import annotations

import os
from typing import Any

from statewise import Agent, Step, Workflow
from statewise.agent.service import BaseDb, resolve_db
from statewise.demo import INSTRUCTIONS, add_item, list_items, remove_item, shopping_list_model
from statewise.models import FunctionModel

DEFAULT_DB = "sqlite:///tmp/statewise_demo.db"


def demo_db() -> BaseDb:
    url = os.environ.get("STATEWISE_DB_URL") or DEFAULT_DB
    if url.startswith("sqlite:///") and not url.startswith("sqlite:////"):
        os.makedirs(os.path.dirname(url[len("sqlite:///") :]) or ".", exist_ok=True)
    return resolve_db(url)


def remove_all_items(session_state: dict[str, Any]) -> str:
    """Remove all items from the shopping list."""
    session_state["shopping_list"] = []
    return "Removed all items from the shopping list."


def shopping_agent(db: BaseDb) -> Agent:
    return Agent(
        name="shopping-list",
        description="Manages a shopping list in session state (offline model)",
        model=FunctionModel(shopping_list_model, id="shopping-list-player"),
        db=db,
        session_state={"shopping_list": []},
        tools=[add_item, remove_item, list_items],
        instructions=INSTRUCTIONS,
        markdown=True,
    )


def shopping_workflow(db: BaseDb) -> Workflow:
    """A two-step workflow: a shopping assistant step, then a list manager step."""
    assistant = Agent(
        name="Shopping Assistant",
        model=FunctionModel(shopping_list_model, id="shopping-assistant-player"),
        tools=[add_item, remove_item, list_items],
        instructions=INSTRUCTIONS,
    )
    manager = Agent(
        name="List Manager",
        model=FunctionModel(shopping_list_model, id="list-manager-player"),
        tools=[list_items, remove_all_items],
        instructions=INSTRUCTIONS,
    )
    return Workflow(
        name="shopping-workflow",
        db=db,
        steps=[
            Step(name="manage_items", description="Add/remove items", agent=assistant),
            Step(name="view_list", description="View the list", agent=manager),
        ],
        session_state={"shopping_list": []},
    )


def build_apps() -> list[Any]:
    db = demo_db()
    return [shopping_agent(db), shopping_workflow(db)]
