"""Names a user coming from Agno writes: `storage=SqliteStorage(table_name=, db_file=)`,
`Loop(end_condition=fn)` with `fn(outputs)`, and a Team with no members."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from statewise import Agent, Loop, StepInput, StepOutput, Team, Workflow
from statewise.db import SqliteDb, SqliteStorage
from statewise.exceptions import ConfigurationError, StorageError
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo
from statewise.state.tracked import TrackedDict


def add_item(session_state: dict[str, Any], item: str) -> str:
    """Add an item.

    Args:
        item: the item
    """
    session_state.setdefault("items", []).append(item)
    return f"added {item}"


def tables(db_file: Path) -> set[str]:
    with sqlite3.connect(db_file) as conn:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def test_agent_storage_sqlite_storage_persists_like_db(tmp_path: Path) -> None:
    db_file = tmp_path / "data.db"
    agent = Agent(
        model=FunctionModel(lambda messages, info: "ok"),
        storage=SqliteStorage(table_name="agent_sessions", db_file=str(db_file)),
        session_state={"items": ["milk"]},
    )
    agent.run("hi", session_id="s1")
    assert isinstance(agent.db, SqliteDb) and agent.storage is agent.db
    assert "agent_sessions_sessions" in tables(db_file)
    # A fresh object on the same file and table name sees the session.
    again = Agent(storage=SqliteStorage(table_name="agent_sessions", db_file=str(db_file)))
    assert again.get_session_state("s1") == {"items": ["milk"]}
    # Another table name is another set of tables in the same file.
    other = Agent(storage=SqliteStorage(table_name="other", db_url=f"sqlite:///{db_file}"))
    assert other.get_session_state("s1") == {}


def test_storage_and_db_together_or_bad_names_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="db= or storage="):
        Agent(db="memory://", storage=SqliteStorage(db_file=str(tmp_path / "a.db")))
    with pytest.raises(StorageError, match="table_name must be letters"):
        SqliteStorage(table_name="agent-sessions", db_file=str(tmp_path / "a.db"))
    with pytest.raises(StorageError, match="sqlite:///"):
        SqliteStorage(table_name="t", db_url="postgresql://x/y")


def test_workflow_and_team_take_storage(tmp_path: Path) -> None:
    storage = SqliteStorage(table_name="workflow_sessions", db_file=str(tmp_path / "w.db"))
    workflow = Workflow(name="w", steps=[lambda step_input: "done"], storage=storage)
    assert workflow.db is storage
    team = Team(model=FunctionModel(lambda messages, info: "hi"), storage="memory://")
    assert team.run("x").content == "hi"


def test_loop_end_condition_gets_the_iteration_outputs_positionally() -> None:
    seen: list[list[Any]] = []

    def bump(step_input: StepInput, session_state: TrackedDict) -> int:
        session_state.increment("n")
        return int(session_state["n"])

    def twice(step_input: StepInput) -> str:
        return "second step"

    def enough(results: list[StepOutput]) -> bool:  # Agno style: one positional parameter
        seen.append([r.content for r in results])
        return bool(results[0].content >= 3)

    wf = Workflow(
        name="w", steps=[Loop("l", steps=[bump, twice], end_condition=enough, max_iterations=9)]
    )
    assert wf.run("go").session_state == {"n": 3}
    assert seen == [[1, "second step"], [2, "second step"], [3, "second step"]]


def test_team_without_members_is_the_leader_alone() -> None:
    prompts: list[str] = []

    def leader(messages: list[Message], info: RequestInfo) -> ModelResponse:
        prompts.append(messages[0].content or "")
        assert info.tools == [] or all("member" not in t.name for t in info.tools)
        return ModelResponse(content="I handled it myself")

    for team in (
        Team(model=FunctionModel(leader), instructions="Be brief.", name="solo"),
        Team(members=[], model=FunctionModel(leader), mode="route"),
    ):
        out = team.run("help", session_id="s")
        assert out.content == "I handled it myself"
        assert team.members == []
    assert prompts[0] == "Be brief." and "You lead a team" not in prompts[1]
