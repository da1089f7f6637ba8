"""A team's members' events (content, tool calls, state changes) reach the stream and
the server's SSE, marked with the team they worked for, live and in order."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statewise import Agent, ContentDelta, StateChanged, Team, ToolCallStarted
from statewise.db import SqliteDb
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo, ToolCall
from tests.server.conftest import LiveServer, start_server, stop_server


def add_item(session_state: dict[str, Any], item: str) -> str:
    """Add an item.

    Args:
        item: the item
    """
    session_state.setdefault("items", []).append(item)
    return f"added {item}"


def member_model(messages: list[Message], info: RequestInfo) -> ModelResponse:
    if messages[-1].role == "tool":
        return ModelResponse(content=f"member says {messages[-1].content}")
    return ModelResponse(tool_calls=[ToolCall("add_item", {"item": messages[-1].content}, "m1")])


def leader_model(messages: list[Message], info: RequestInfo) -> ModelResponse:
    if messages[-1].role == "tool":
        return ModelResponse(content="leader done")
    call = ToolCall("delegate_task_to_member", {"member_name": "adder", "task": "tea"}, "d1")
    return ModelResponse(tool_calls=[call])


def make_team(db: Any = None) -> Team:
    adder = Agent(name="adder", model=FunctionModel(member_model), tools=[add_item])
    return Team(name="house", members=[adder], model=FunctionModel(leader_model), db=db)


def test_member_events_reach_the_stream_marked_with_the_team() -> None:
    events = list(make_team().run("go", session_id="s", stream=True))
    kinds = [(e.event, getattr(e, "agent_name", None)) for e in events]
    delegate = kinds.index(("tool_call_started", "house"))
    member_call = kinds.index(("tool_call_started", "adder"))
    delegate_done = kinds.index(("tool_call_completed", "house"))
    assert delegate < member_call < delegate_done  # live, while the delegation runs
    started = events[member_call]
    assert isinstance(started, ToolCallStarted) and started.member_of == "house"
    assert started.arguments == {"item": "tea"}
    member_text = "".join(
        e.content for e in events if isinstance(e, ContentDelta) and e.agent_name == "adder"
    )
    assert member_text == "member says added tea"
    assert all(
        e.member_of == "house"
        for e in events
        if isinstance(e, ContentDelta) and e.agent_name == "adder"
    )
    changes = [e for e in events[member_call:delegate_done] if isinstance(e, StateChanged)]
    assert changes and changes[0].member_of == "house"
    assert any(op["path"] == ["items"] for op in changes[0].ops)
    leader_text = "".join(
        e.content for e in events if isinstance(e, ContentDelta) and e.member_of is None
    )
    assert leader_text == "leader done"


@pytest.fixture()
def team_server(tmp_path: Path) -> Iterator[LiveServer]:
    from statewise.server import create_app

    live = start_server(create_app([make_team(SqliteDb(db_file=tmp_path / "t.db"))]))
    yield live
    stop_server(live)


def test_member_events_reach_sse(team_server: LiveServer) -> None:
    with team_server.client() as client:
        r = client.post(
            "/v1/teams/house/runs",
            json={"input": "go"},
            headers={"Accept": "text/event-stream"},
        )
    assert r.status_code == 200, r.text
    events = []
    for block in r.text.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines())
        events.append(json.loads(fields["data"]))
    member = [e for e in events if e.get("member_of") == "house"]
    assert {e["event"] for e in member} >= {
        "tool_call_started",
        "tool_call_completed",
        "content_delta",
        "state_changed",
    }
    assert all(e["agent_name"] == "adder" for e in member if "agent_name" in e)
