"""Typed answers in a run: `output_schema` of every kind gives a validated value in
`RunOutput.content`; an answer that does not fit goes back to the model with the reason
(`output_retries`), then the run fails with `OutputValidationError` keeping what earlier
steps committed; `output_key` stores the value as JSON in state, checked by
`state_schema`; a final-answer tool call is the answer; the model sees the schema."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any, Literal, TypedDict

import pytest
from pydantic import BaseModel

from statewise import Agent, RunCompleted
from statewise.db import SqliteDb
from statewise.exceptions import OutputValidationError, StateValidationError
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo, TestModel, ToolCall


class Triage(BaseModel):
    priority: Literal["low", "high"]
    summary: str


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Movie(TypedDict):
    title: str
    year: int


VERDICT = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}},
    "required": ["ok"],
    "additionalProperties": False,
}


def answers(*texts: str) -> tuple[FunctionModel, list[RequestInfo], list[list[Message]]]:
    """A model answering `texts` in turn, recording what it was asked."""
    infos: list[RequestInfo] = []
    seen: list[list[Message]] = []

    def model(messages: list[Message], info: RequestInfo) -> str:
        infos.append(info)
        seen.append(list(messages))
        return texts[len(infos) - 1]

    return FunctionModel(model), infos, seen


@pytest.mark.parametrize(
    ("schema", "text", "expected"),
    [
        (
            Triage,
            '{"priority": "high", "summary": "disk full"}',
            Triage(priority="high", summary="disk full"),
        ),
        (Point, '{"x": 1, "y": 2}', Point(1, 2)),
        (Movie, '{"title": "Heat", "year": 1995}', {"title": "Heat", "year": 1995}),
        (VERDICT, '{"ok": true}', {"ok": True}),
    ],
    ids=["pydantic", "dataclass", "typeddict", "json-schema"],
)
def test_each_schema_kind_gives_a_typed_answer(schema: Any, text: str, expected: Any) -> None:
    model, infos, _ = answers(text)
    out = Agent(model=model, output_schema=schema).run("triage this")
    assert out.content == expected and type(out.content) is type(expected)
    assert infos[0].output is not None  # the model saw the schema
    assert infos[0].output.json_schema["type"] == "object"


def test_an_invalid_answer_is_sent_back_once_then_accepted(tmp_path: Path) -> None:
    model, _, seen = answers(
        '{"priority": "urgent", "summary": "x"}', '{"priority": "high", "summary": "x"}'
    )
    agent = Agent(model=model, output_schema=Triage, db=SqliteDb(db_file=str(tmp_path / "t.db")))
    out = agent.run("triage", session_id="s")
    assert out.content == Triage(priority="high", summary="x")
    retry = seen[1][-1]
    assert retry.role == "user" and "priority" in (retry.content or "")
    assert "'low' or 'high'" in (retry.content or "")
    events = [e.type for e in agent.db.read_events("s")]
    assert "output_invalid" in events
    [run] = agent.db.read_runs("s")
    assert run.status == "completed" and json.loads(run.content or "") == {
        "priority": "high",
        "summary": "x",
    }


def test_invalid_twice_fails_the_run_and_keeps_earlier_tool_writes(tmp_path: Path) -> None:
    def note(session_state: dict[str, Any]) -> str:
        """Note the ticket."""
        session_state["noted"] = True
        return "noted"

    calls: list[int] = []

    def model(messages: list[Message], info: RequestInfo) -> ModelResponse:
        calls.append(1)
        if len(calls) == 1:
            return ModelResponse(tool_calls=[ToolCall("note", {}, "c1")])
        return ModelResponse(content='{"priority": "medium"}')

    db = SqliteDb(db_file=str(tmp_path / "f.db"))
    agent = Agent(model=FunctionModel(model), tools=[note], output_schema=Triage, db=db)
    with pytest.raises(OutputValidationError) as caught:
        agent.run("triage", session_id="s")
    assert "priority" in str(caught.value) and "summary" in str(caught.value)
    assert len(calls) == 3  # the answer, one retry (output_retries=1), then the failure
    assert agent.get_session_state("s") == {"noted": True}  # committed at its step
    [run] = db.read_runs("s")
    assert run.status == "failed" and "OutputValidationError" in (run.error or "")


def test_output_retries_zero_fails_at_once() -> None:
    model, infos, _ = answers("not json")
    with pytest.raises(OutputValidationError, match="not JSON"):
        Agent(model=model, output_schema=Triage, output_retries=0).run("x")
    assert len(infos) == 1


class Desk(BaseModel):
    ticket: Triage | None = None


def test_output_key_stores_the_value_as_json_checked_by_state_schema(tmp_path: Path) -> None:
    model, _, _ = answers('{"priority": "low", "summary": "ok"}')
    db = SqliteDb(db_file=str(tmp_path / "k.db"))
    agent = Agent(model=model, output_schema=Triage, output_key="ticket", state_schema=Desk, db=db)
    out = agent.run("x", session_id="s")
    assert out.session_state["ticket"] == {"priority": "low", "summary": "ok"}
    fresh = Agent(db=SqliteDb(db_file=str(tmp_path / "k.db")), state_schema=Desk)
    assert fresh.get_session_state("s")["ticket"] == {"priority": "low", "summary": "ok"}

    class Strict(BaseModel):
        ticket: int = 0

    model, _, _ = answers('{"priority": "low", "summary": "ok"}')
    clash = Agent(model=model, output_schema=Triage, output_key="ticket", state_schema=Strict)
    with pytest.raises(StateValidationError, match="ticket"):
        clash.run("x")


def test_a_final_answer_tool_call_is_the_answer() -> None:
    def model(messages: list[Message], info: RequestInfo) -> ModelResponse:
        assert info.output is not None
        return ModelResponse(
            tool_calls=[ToolCall("final_answer", {"priority": "low", "summary": "tool"}, "f1")]
        )

    out = Agent(model=FunctionModel(model), output_schema=Triage).run("x")
    assert out.content == Triage(priority="low", summary="tool")
    last = out.messages[-1]
    assert last.role == "assistant" and not last.tool_calls  # no unanswered call is kept


def test_test_model_answers_a_fitting_value() -> None:
    out = Agent(model=TestModel(), output_schema=Triage).run("x")
    assert isinstance(out.content, Triage)


def test_streaming_ends_with_the_typed_answer() -> None:
    model, _, _ = answers('{"x": 3, "y": 4}')
    events = list(Agent(model=model, output_schema=Point).run("x", stream=True))
    done = [e for e in events if isinstance(e, RunCompleted)]
    assert done and done[-1].output.content == Point(3, 4)

    async def collect() -> Any:
        model, _, _ = answers('{"x": 5, "y": 6}')
        out = await Agent(model=model, output_schema=Point).arun("x")
        return out.content

    assert asyncio.run(collect()) == Point(5, 6)


def test_teams_and_workflow_agent_steps_answer_typed() -> None:
    from statewise import Step, Team, Workflow

    model, _, _ = answers('{"priority": "low", "summary": "team"}')
    member = Agent(name="m", model=FunctionModel(lambda m, i: "member says hi"))
    team = Team(name="t", model=model, members=[member], output_schema=Triage)
    assert team.run("x").content == Triage(priority="low", summary="team")

    model, _, _ = answers('{"priority": "high", "summary": "step"}')
    typed = Agent(name="typed", model=model, output_schema=Triage)
    seen: list[Any] = []

    def after(step_input: Any) -> str:
        seen.append(step_input.previous_step_content)
        return "done"

    workflow = Workflow(
        name="w", steps=[Step(name="triage", agent=typed), Step(name="after", executor=after)]
    )
    out = workflow.run("go")
    assert seen == [Triage(priority="high", summary="step")]
    assert out.step_outputs[0].content == Triage(priority="high", summary="step")
