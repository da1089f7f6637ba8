"""Teams: a leader delegating to members who share the team's session state."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from statewise import Agent, Team, Workflow
from statewise.db import InMemoryDb, SqliteDb
from statewise.exceptions import ConfigurationError
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo, ToolCall


def add_item(session_state: dict[str, Any], item: str) -> str:
    """Add an item.

    Args:
        item: the item
    """
    session_state["items"].append(item)
    return f"added {item}"


def remove_item(session_state: dict[str, Any], item: str) -> str:
    """Remove an item.

    Args:
        item: the item
    """
    session_state["items"].remove(item)
    return f"removed {item}"


def member(name: str, tool: Any) -> Agent:
    """Calls its tool with the task as the item, then answers with the state it sees."""

    def fn(messages: list[Message], info: RequestInfo) -> ModelResponse:
        if messages[-1].role == "tool":
            return ModelResponse(content=f"{name}: {messages[0].content}")
        return ModelResponse(tool_calls=[ToolCall(tool.__name__, {"item": messages[-1].content})])

    return Agent(name=name, model=FunctionModel(fn), tools=[tool], instructions="items={items}")


def leader(plan: list[tuple[str, str]], calls: list[list[Message]] | None = None) -> FunctionModel:
    """Delegates each (member, task) in turn, then answers with its rendered prompt's
    first line (the team state as the leader sees it now)."""

    def fn(messages: list[Message], info: RequestInfo) -> ModelResponse:
        if calls is not None:
            calls.append(messages)
        done = sum(1 for m in messages if m.role == "tool")
        if done < len(plan):
            name, task = plan[done]
            tool = next(t.name for t in info.tools if "member" in t.name)
            return ModelResponse(
                tool_calls=[ToolCall(tool, {"member_name": name, "task": task}, f"d{done}")]
            )
        system = messages[0].content or ""
        return ModelResponse(content="leader sees " + system.splitlines()[0])

    return FunctionModel(fn)


def test_coordinate_members_share_state_visible_to_leader_and_later_members(
    tmp_path: Path,
) -> None:
    adder, remover = member("adder", add_item), member("remover", remove_item)
    team = Team(
        name="shop",
        members=[adder, remover],
        model=leader([("adder", "milk"), ("adder", "bread"), ("remover", "milk")]),
        instructions="list={items}",
        session_state={"items": []},
        db=SqliteDb(db_file=str(tmp_path / "t.db")),
    )
    out = team.run("do it", session_id="s")
    assert out.session_state == {"items": ["bread"]}
    assert out.content == 'leader sees list=["bread"]'
    tool_results = [m.content for m in out.messages if m.role == "tool"]
    # The remover saw the adder's writes within the same run.
    assert tool_results[2] == 'remover: items=["bread"]'
    assert team.get_session_state("s") == {"items": ["bread"]}
    fresh = SqliteDb(db_file=str(tmp_path / "t.db"))
    assert Agent(db=fresh).get_session_state("s") == {"items": ["bread"]}
    assert fresh.get_session("s").kind == "team"  # type: ignore[union-attr]
    tool_events = [e.data for e in fresh.read_events("s", types=["tool_call"])]
    assert [(e["agent"], e["name"]) for e in tool_events] == [
        ("adder", "add_item"),
        ("shop", "delegate_task_to_member"),
        ("adder", "add_item"),
        ("shop", "delegate_task_to_member"),
        ("remover", "remove_item"),
        ("shop", "delegate_task_to_member"),
    ]
    fresh.close()


def test_route_mode_member_answer_is_the_team_answer() -> None:
    calls: list[list[Message]] = []
    team = Team(
        name="router",
        members=[member("adder", add_item), member("remover", remove_item)],
        model=leader([("adder", "eggs")], calls),
        mode="route",
        session_state={"items": []},
    )
    out = team.run("eggs please")
    assert out.content == 'adder: items=["eggs"]'
    assert len(calls) == 1, "no second leader model call after the transfer"
    assert [t.name for t in calls_tools(team)] == ["transfer_to_member"]
    assert out.session_state == {"items": ["eggs"]}


def calls_tools(team: Team) -> list[Any]:
    return [f.definition() for f in team._runtime().functions.values()]


def test_unknown_member_goes_back_to_the_leader_as_an_error() -> None:
    team = Team(
        name="t",
        members=[member("adder", add_item)],
        model=leader([("nobody", "x")]),
        session_state={"items": []},
    )
    out = team.run("go")
    [result] = [m.content for m in out.messages if m.role == "tool"]
    assert "no team member named 'nobody'" in (result or "") and "adder" in (result or "")


def test_member_failure_is_reported_and_its_uncommitted_writes_undone() -> None:
    def explode(messages: list[Message], info: RequestInfo) -> ModelResponse:
        raise RuntimeError("member model down")

    broken = Agent(name="broken", model=FunctionModel(explode))
    team = Team(
        name="t",
        members=[broken, member("adder", add_item)],
        model=leader([("broken", "x"), ("adder", "y")]),
        session_state={"items": []},
    )
    out = team.run("go")
    results = [m.content for m in out.messages if m.role == "tool"]
    assert results[0] == "Error: member 'broken' failed: RuntimeError: member model down"
    assert out.session_state == {"items": ["y"]}


def test_nested_teams_share_one_state() -> None:
    inner = Team(
        name="inner",
        members=[member("adder", add_item)],
        model=leader([("adder", "inner-item")]),
    )
    outer = Team(
        name="outer",
        members=[inner, member("remover", remove_item)],
        model=leader([("inner", "add something"), ("remover", "seed")]),
        session_state={"items": ["seed"]},
        instructions="{items}",
    )
    out = outer.run("go")
    assert out.session_state == {"items": ["inner-item"]}
    assert out.content == 'leader sees ["inner-item"]'


def test_team_as_a_workflow_step_commits_with_the_step() -> None:
    db = InMemoryDb()
    team = Team(
        name="shop",
        members=[member("adder", add_item)],
        model=leader([("adder", "tea")]),
        instructions="{items}",
    )
    wf = Workflow(name="w", db=db, steps=[team], session_state={"items": []})
    out = wf.run("go", session_id="s")
    assert out.session_state == {"items": ["tea"]}
    assert out.content == 'leader sees ["tea"]'
    # One commit for the whole team step (members included), with the step's event.
    history = [h for h in wf.get_state_history("s") if h["step"] == 1]
    assert len(history) == 1
    assert any(s.startswith("tool:add_item") for s in history[0]["sources"])
    completed = [e.data for e in db.read_events("s", types=["step_completed"])]
    assert completed[0]["name"] == "shop"


def test_bad_members_are_refused() -> None:
    with pytest.raises(ConfigurationError, match=r"members\[1\] is not an Agent or Team"):
        Team(members=[member("a", add_item), "b"])  # type: ignore[list-item]
    with pytest.raises(ConfigurationError, match="named 'a'"):
        Team(members=[member("a", add_item), member("a", add_item)])
    with pytest.raises(ConfigurationError, match="mode"):
        Team(members=[member("a", add_item)], mode="vote")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"members=\[...\]"):
        Team(members=member("a", add_item))  # type: ignore[arg-type]


def test_team_state_api_and_streaming() -> None:
    team = Team(
        name="t",
        members=[member("adder", add_item)],
        model=leader([("adder", "x")]),
        session_state={"items": []},
    )
    events = list(team.run("go", session_id="s", stream=True))
    assert events[-1].event == "run_completed"
    team.state.for_session("s").set("note", "hi")  # (a run leaves the team's own session)
    assert team.get_session_state("s") == {"items": ["x"], "note": "hi"}
    assert json.dumps(team.get_session_state("s"))
