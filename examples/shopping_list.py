"""An agent managing a shopping list in session state, persisted in SQLite.

The first example adds items with one tool; the second keeps the list across five runs of
one session (add, remove, add, list, clear and start over). An offline model
(`statewise.demo.shopping_list_model`) plays the LLM's part.

Run: python examples/shopping_list.py
"""

from __future__ import annotations

from typing import Any

from statewise import Agent
from statewise.db import SqliteDb
from statewise.demo import INSTRUCTIONS, list_items, remove_item, shopping_list_model
from statewise.models import FunctionModel


# Define a tool that adds an item to the shopping list
def add_item(session_state: dict[str, Any], item: str) -> str:
    """Add an item to the shopping list."""
    session_state["shopping_list"].append(item)
    return f"The shopping list is now {session_state['shopping_list']}"


def first_example(db_file: str) -> dict[str, Any]:
    agent = Agent(
        model=FunctionModel(shopping_list_model),
        db=SqliteDb(db_file=db_file),
        session_state={"shopping_list": []},
        tools=[add_item],
        instructions="Current state (shopping list) is: {shopping_list}",
        markdown=True,
    )
    agent.print_response("Add milk, eggs, and bread to the shopping list", stream=True)
    print(f"Final session state: {agent.get_session_state()}")
    return agent.get_session_state()


def shopping_agent(db_file: str) -> Agent:
    from statewise.demo import add_item as add_item_once

    return Agent(
        model=FunctionModel(shopping_list_model),
        session_state={"shopping_list": []},
        db=SqliteDb(db_file=db_file),
        tools=[add_item_once, remove_item, list_items],
        instructions=INSTRUCTIONS,
        markdown=True,
    )


# `statewise run examples/shopping_list.py "Add milk and eggs"` runs this agent
# (sessions in tmp/example.db).
agent = shopping_agent("tmp/example.db")


def multi_run_example(db_file: str) -> list[dict[str, Any]]:
    agent = shopping_agent(db_file)
    states = []
    for message in [
        "Add milk, eggs, and bread to the shopping list",
        "I got bread",
        "I need apples and oranges",
        "whats on my list?",
        "Clear everything from my list and start over with just bananas and yogurt",
    ]:
        agent.print_response(message, stream=True)
        print(f"Session state: {agent.get_session_state()}")
        states.append(agent.get_session_state())
    return states


def main(db_dir: str = "tmp") -> dict[str, Any]:
    return {
        "first": first_example(f"{db_dir}/agents.db"),
        "runs": multi_run_example(f"{db_dir}/example.db"),
    }


if __name__ == "__main__":
    main()
