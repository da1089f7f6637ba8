"""The same agent behaves the same on every backend: state, history, concurrency."""

from __future__ import annotations

import threading
from typing import Any

from statewise import Agent
from statewise.db.records import ScopeKey
from statewise.db.testing import Harness
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo, ToolCall


def model(messages: list[Message], info: RequestInfo) -> ModelResponse:
    if messages[-1].role == "tool":
        return ModelResponse(content="ok")
    return ModelResponse(tool_calls=[ToolCall("add", {"item": messages[-1].content}, "c")])


def add(session_state: dict[str, Any], item: str) -> str:
    session_state["items"].append(item)
    return "ok"


def agent_on(db: Any) -> Agent:
    return Agent(
        model=FunctionModel(model),
        tools=[add],
        db=db,
        session_state={"items": []},
        name="backend-test",
    )


def test_agent_state_history_and_rollback_on_every_backend(harness: Harness) -> None:
    agent = agent_on(harness.db)
    first = agent.run("a", session_id="s", user_id="u")
    agent.run("b", session_id="s")
    agent.state.for_session("s").set("user:tier", "pro")
    other_process = agent_on(harness.reopen())
    assert other_process.get_session_state("s") == {"items": ["a", "b"], "user:tier": "pro"}
    assert [h["sources"] for h in other_process.get_state_history("s")][:2] == [
        ["default_state"],
        ["tool:add#c"],
    ]
    other_process.rollback_state("s", to=first.run_id)
    assert agent.get_session_state("s")["items"] == ["a"], "never stale: sees the other writer"
    agent.run("c", session_id="s")
    assert other_process.get_session_state("s")["items"] == ["a", "c"]


def test_threads_on_two_handles_lose_nothing_on_every_backend(harness: Harness) -> None:
    agents = [agent_on(harness.db), agent_on(harness.reopen())]
    agents[0].run("seed", session_id="shared")

    def worker(agent: Agent, name: str) -> None:
        for i in range(15):
            agent.run(f"{name}{i}", session_id="shared")

    threads = [
        threading.Thread(target=worker, args=(a, f"w{n}-")) for n, a in enumerate(agents * 2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    items = agents[0].get_session_state("shared")["items"]
    assert len(items) == 1 + 4 * 15


def test_a_run_after_the_user_scope_moved_commits_its_session_writes(harness: Harness) -> None:
    """The session is cached and only its `user:` scope moved (a run on another session of
    the user wrote it): the reload keeps the session's own tree, and what the next run
    appends there is committed, not only changed in the cached tree."""

    def add(session_state: dict[str, Any], item: str) -> str:
        session_state["items"].append(item)
        session_state["user:count"] = session_state.get("user:count", 0) + 1
        return "ok"

    agent = Agent(
        model=FunctionModel(model),
        tools=[add],
        db=harness.db,
        session_state={"items": []},
        user_id="u",
    )
    agent.run("one", session_id="s1")
    agent.run("x", session_id="s3")
    agent.run("two", session_id="s1")
    expected = {"items": ["one", "two"], "user:count": 3}
    assert agent.get_session_state("s1") == expected
    fresh = Agent(model=FunctionModel(model), db=harness.reopen(), user_id="u")
    assert fresh.get_session_state("s1") == expected
    appended = [
        op["value"] for d in harness.db.read_deltas(ScopeKey("session", "s1")) for op in d.ops
    ]
    assert appended[-2:] == ["one", "two"]
