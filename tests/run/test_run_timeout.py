"""Deadlines (`run_timeout=`): a run whose model never finishes stops at its deadline and
ends `failed` with a clear reason, on `run()`, `arun()`, streamed runs, teams, workflows
and continuations; nothing is left `running`."""

from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path
from typing import Any

import pytest

from statewise import Agent, Approval, StepInput, Team, Workflow, tool
from statewise.db import SqliteDb
from statewise.exceptions import ConfigurationError, RunTimeoutError
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo, ToolCall

REASON = "run exceeded its run_timeout of 0.4 s"


def looping_model(calls: list[int]) -> FunctionModel:
    """Asks for the `tick` tool forever (each answer takes a moment)."""

    def fn(messages: list[Message], info: RequestInfo) -> ModelResponse:
        calls.append(1)
        time.sleep(0.01)
        return ModelResponse(tool_calls=[ToolCall("tick", {}, f"t{len(calls)}")])

    return FunctionModel(fn)


def hanging_model() -> FunctionModel:
    """Never answers (waits on the event loop, as a stalled HTTP request does)."""

    async def fn(messages: list[Message], info: RequestInfo) -> ModelResponse:
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    return FunctionModel(fn)


def tick(session_state: dict[str, Any]) -> str:
    """Count a tick."""
    session_state["ticks"] = session_state.get("ticks", 0) + 1
    return "ticked"


def _agent(db_file: Path, model: FunctionModel, **kwargs: Any) -> Agent:
    return Agent(
        name="slow",
        model=model,
        tools=[tick],
        db=SqliteDb(db_file=str(db_file)),
        max_steps=1_000_000,
        **kwargs,
    )


def _assert_failed_by_deadline(db: Any, sid: str) -> None:
    [record] = db.read_runs(sid)
    assert record.status == "failed"
    assert record.error == f"RunTimeoutError: {REASON}"
    [failed] = db.read_events(sid, types=["run_failed"])
    assert failed.data["error"] == record.error


def test_sync_run_of_a_model_that_loops_forever_stops_at_its_deadline(tmp_path: Path) -> None:
    calls: list[int] = []
    agent = _agent(tmp_path / "a.db", looping_model(calls), run_timeout=0.4)
    started = time.monotonic()
    with pytest.raises(RunTimeoutError, match=REASON):
        agent.run("go", session_id="s")
    assert time.monotonic() - started < 5
    made = len(calls)
    _assert_failed_by_deadline(agent.db, "s")
    # The steps before the deadline were committed; nothing runs after it.
    assert agent.get_session_state("s")["ticks"] >= 1
    time.sleep(0.1)
    assert len(calls) == made
    agent.db.close()


def test_async_run_of_a_model_that_never_answers_stops_at_its_deadline(tmp_path: Path) -> None:
    agent = _agent(tmp_path / "a.db", hanging_model(), run_timeout=0.4)

    async def main() -> None:
        with pytest.raises(RunTimeoutError, match=REASON):
            await agent.arun("go", session_id="s")

    asyncio.run(main())
    _assert_failed_by_deadline(agent.db, "s")
    agent.db.close()


def test_a_run_timeout_given_per_run_overrides_the_agents(tmp_path: Path) -> None:
    agent = _agent(tmp_path / "a.db", hanging_model(), run_timeout=3600)
    with pytest.raises(RunTimeoutError, match=REASON):
        agent.run("go", session_id="s", run_timeout=0.4)
    _assert_failed_by_deadline(agent.db, "s")
    agent.db.close()


def test_a_streamed_run_stops_at_its_deadline(tmp_path: Path) -> None:
    calls: list[int] = []
    agent = _agent(tmp_path / "a.db", looping_model(calls), run_timeout=0.4)
    seen = 0
    with pytest.raises(RunTimeoutError, match=REASON):
        for _event in agent.run("go", session_id="s", stream=True):
            seen += 1
    assert seen > 0
    _assert_failed_by_deadline(agent.db, "s")

    async def main() -> None:
        hanging = _agent(tmp_path / "b.db", hanging_model(), run_timeout=0.4)
        with pytest.raises(RunTimeoutError, match=REASON):
            async for _event in await hanging.arun("go", session_id="s", stream=True):
                pass
        _assert_failed_by_deadline(hanging.db, "s")
        hanging.db.close()

    asyncio.run(main())
    agent.db.close()


def test_a_team_whose_member_never_answers_stops_at_its_deadline(tmp_path: Path) -> None:
    member = Agent(name="member", model=hanging_model())

    def lead(messages: list[Message], info: RequestInfo) -> ModelResponse:
        return ModelResponse(
            tool_calls=[
                ToolCall("delegate_task_to_member", {"member_name": "member", "task": "x"}, "d")
            ]
        )

    team = Team(
        [member],
        name="team",
        model=FunctionModel(lead),
        db=SqliteDb(db_file=str(tmp_path / "t.db")),
        run_timeout=0.4,
    )
    with pytest.raises(RunTimeoutError, match=REASON):
        team.run("go", session_id="s")
    _assert_failed_by_deadline(team.db, "s")
    team.db.close()


def test_a_workflow_stops_at_its_deadline_and_resumes_after_it(tmp_path: Path) -> None:
    hang = [True]

    async def slow(step_input: StepInput) -> str:
        if hang[0]:
            await asyncio.sleep(3600)
        return "slow done"

    def fast(step_input: StepInput, session_state: dict[str, Any]) -> str:
        session_state["fast"] = True
        return "fast done"

    flow = Workflow(
        name="flow",
        steps=[fast, slow],
        db=SqliteDb(db_file=str(tmp_path / "w.db")),
        run_timeout=0.4,
    )
    with pytest.raises(RunTimeoutError, match=REASON):
        flow.run("go", session_id="s")
    _assert_failed_by_deadline(flow.db, "s")
    assert flow.get_session_state("s")["fast"] is True  # the completed step stays committed
    hang[0] = False
    run_id = flow.db.read_runs("s")[-1].run_id
    assert flow.resume(run_id, session_id="s").content == "slow done"
    assert flow.db.read_runs("s")[-1].status == "completed"
    flow.db.close()


def test_a_workflow_of_agent_steps_that_loop_stops_at_its_deadline(tmp_path: Path) -> None:
    calls: list[int] = []
    inner = Agent(name="inner", model=looping_model(calls), tools=[tick], max_steps=1_000_000)
    flow = Workflow(name="flow", steps=[inner], db=SqliteDb(db_file=str(tmp_path / "w.db")))

    async def main() -> None:
        with pytest.raises(RunTimeoutError, match=REASON):
            await flow.arun("go", session_id="s", run_timeout=0.4)

    asyncio.run(main())
    _assert_failed_by_deadline(flow.db, "s")
    flow.db.close()


@tool(requires_confirmation=True)
def approve_me() -> str:
    """Needs approval."""
    return "approved"


def test_a_continuation_stops_at_its_deadline(tmp_path: Path) -> None:
    counter = itertools.count()

    async def fn(messages: list[Message], info: RequestInfo) -> ModelResponse:
        if next(counter) == 0:
            return ModelResponse(tool_calls=[ToolCall("approve_me", {}, "a1")])
        await asyncio.sleep(3600)  # after the approval, the model never answers
        raise AssertionError("unreachable")

    agent = Agent(
        name="bank",
        model=FunctionModel(fn),
        tools=[approve_me],
        db=SqliteDb(db_file=str(tmp_path / "c.db")),
        run_timeout=0.4,
    )
    out = agent.run("go", session_id="s")
    assert out.status == "paused"
    with pytest.raises(RunTimeoutError, match=REASON):
        agent.continue_run(out.run_id, session_id="s", approvals={"a1": Approval()})
    _assert_failed_by_deadline(agent.db, "s")
    agent.db.close()


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), "5", True])
def test_a_run_timeout_that_is_not_a_positive_number_is_refused(bad: Any) -> None:
    with pytest.raises(ConfigurationError, match="run_timeout must be"):
        Agent(name="a", run_timeout=bad)
    with pytest.raises(ConfigurationError, match="run_timeout must be"):
        Workflow(name="w", steps=[lambda step_input: "x"], run_timeout=bad)
