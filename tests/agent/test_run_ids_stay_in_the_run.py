"""A run's session and user live in the run: the agent holds configuration only, so one
agent serves concurrent runs on different sessions without one seeing another's ids."""

from __future__ import annotations

import asyncio
from typing import Any

from statewise import Agent, RunContext, Team
from statewise.db import InMemoryDb
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo, ToolCall


def call_note_then_answer() -> FunctionModel:
    def fn(messages: list[Message], info: RequestInfo) -> ModelResponse:
        if messages[-1].role == "tool":
            return ModelResponse(content="done")
        return ModelResponse(tool_calls=[ToolCall("note", {}, "id_note")])

    return FunctionModel(fn)


def test_concurrent_runs_on_two_sessions_see_only_their_own_ids() -> None:
    seen: dict[str, tuple[str, str | None, str | None]] = {}

    async def both_inside() -> tuple[Any, Any]:
        inside = asyncio.Barrier(2)

        async def note(run_context: RunContext, agent: Agent) -> str:
            """Note the ids this run sees."""
            await inside.wait()  # both runs are in their tool call at the same moment
            seen[run_context.session_id] = (
                run_context.session_id,
                run_context.user_id,
                agent.session_id,
            )
            return "ok"

        agent = Agent(
            model=call_note_then_answer(), tools=[note], db=InMemoryDb(), session_id="home"
        )
        outputs = await asyncio.gather(
            agent.arun("go", session_id="a", user_id="ua"),
            agent.arun("go", session_id="b", user_id="ub"),
        )
        return agent, outputs

    agent, (a, b) = asyncio.run(both_inside())
    assert (a.session_id, a.user_id, b.session_id, b.user_id) == ("a", "ua", "b", "ub")
    assert seen == {"a": ("a", "ua", "home"), "b": ("b", "ub", "home")}
    assert agent.session_id == "home" and agent.user_id is None
    assert agent.get_session_state() == {}, "the agent's own session was not run"


def test_a_run_on_another_session_leaves_the_agents_own_session() -> None:
    agent = Agent(model=FunctionModel(lambda m, i: "hi"), db=InMemoryDb())
    agent.run("one", session_id="elsewhere")
    assert agent.session_id is None, "a run names its session; it does not become the agent's"
    first = agent.run("two")  # no session named: the agent's own, made now and kept
    assert agent.session_id == first.session_id
    agent.run("three", session_id="elsewhere")
    assert agent.run("four").session_id == first.session_id
    assert agent.get_session_summary() is None  # (reads the agent's own session)


def test_a_team_keeps_its_own_session_too() -> None:
    hi = FunctionModel(lambda m, i: "hi")
    team = Team([Agent(hi, name="m")], model=hi, session_id="t")
    team.run("go", session_id="other")
    assert team.session_id == "t"
