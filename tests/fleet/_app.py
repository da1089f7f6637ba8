"""The app the fleet tests' workers serve: a five-step workflow, a one-step workflow that
records when it runs, a one-tool agent, and a three-tool-call agent (`marker`) whose
second tool call waits while a hold file exists. Configured by environment variables:

- STATEWISE_FLEET_TEST_DB: PostgreSQL URL of the test database (sessions in schema
  `sessions`);
- STATEWISE_FLEET_TEST_SIDE: a file every step execution appends a line to (the side
  channel: `pid run_id step start|end time`);
- STATEWISE_FLEET_TEST_SLEEP: seconds each step sleeps (default 0.1).

`marker`'s model and tool write to the side channel too: `pid run_id ask<n> model time`
per model request, `pid run_id mark-<tag> start|end time` per tool call. Its tool call
`mark("b")` waits while the file `<side channel>.hold` exists.
"""

from __future__ import annotations

import os
import time
from typing import Any

from statewise import Agent, Step, Workflow
from statewise.db.postgres import PostgresDb
from statewise.models import FunctionModel, ModelResponse, RequestInfo, ToolCall
from statewise.models.messages import Message
from statewise.models.test import TestModel
from statewise.run.context import RunContext
from statewise.workflow import StepInput

SIDE = os.environ.get("STATEWISE_FLEET_TEST_SIDE", os.devnull)
SLEEP = float(os.environ.get("STATEWISE_FLEET_TEST_SLEEP", "0.1"))


def _side(run_id: str, step: str, what: str) -> None:
    with open(SIDE, "a") as f:
        f.write(f"{os.getpid()} {run_id} {step} {what} {time.time():.6f}\n")
        f.flush()


def _step(index: int) -> Any:
    def run_step(step_input: StepInput, run_context: RunContext) -> str:
        _side(run_context.run_id, str(index), "start")
        time.sleep(SLEEP)
        if step_input.input == "boom" and index == 2:
            raise RuntimeError("step 2 exploded")
        state = run_context.session_state
        state.setdefault("log", []).append(f"{step_input.input}:{index}")
        state["count"] = state.get("count", 0) + 1
        _side(run_context.run_id, str(index), "end")
        return f"{step_input.input} after step {index}"

    run_step.__name__ = f"step{index}"
    return run_step


def _timed(step_input: StepInput, run_context: RunContext) -> str:
    _side(run_context.run_id, "only", "start")
    time.sleep(SLEEP)
    _side(run_context.run_id, "only", "end")
    return "done"


def add_item(item: str, run_context: RunContext) -> str:
    """Add an item to the list."""
    run_context.session_state.setdefault("items", []).append(item)
    return f"added {item}"


MARKS = ("a", "b", "c")
HOLD = SIDE + ".hold"


def mark_model(messages: list[Message], info: RequestInfo) -> ModelResponse:
    """Asks for mark("a"), then mark("b"), then mark("c"), one per model request, then
    answers; each request is logged on the side channel."""
    done = sum(1 for m in messages if m.role == "tool")
    _side(info.run_id or "-", f"ask{done}", "model")
    if done < len(MARKS):
        tag = MARKS[done]
        return ModelResponse(tool_calls=[ToolCall("mark", {"tag": tag}, f"call-{tag}")])
    return ModelResponse(content="marked " + " ".join(MARKS))


def mark(tag: str, run_context: RunContext) -> str:
    """Mark a tag in state.

    Args:
        tag: The tag.
    """
    _side(run_context.run_id, f"mark-{tag}", "start")
    if tag == "b":
        while os.path.exists(HOLD):
            time.sleep(0.05)
    state = run_context.session_state
    state.setdefault("marks", []).append(tag)
    state["mark_count"] = state.get("mark_count", 0) + 1
    _side(run_context.run_id, f"mark-{tag}", "end")
    return f"marked {tag}"


def build(url: str) -> tuple[Workflow, Workflow, Agent, Agent]:
    """The app's objects on the PostgreSQL database at `url` (sessions in `sessions`)."""
    db = PostgresDb(url, schema="sessions", pool_size=4)
    five = Workflow(
        name="five", steps=[Step(name=f"s{i}", executor=_step(i)) for i in range(5)], db=db
    )
    timed = Workflow(name="timed", steps=[Step(name="only", executor=_timed)], db=db)
    helper = Agent(
        name="helper",
        model=TestModel(),
        tools=[add_item],
        db=db,
        instructions="Keep a list: {items?}",
    )
    marker = Agent(
        name="marker",
        model=FunctionModel(mark_model, id="marker"),
        tools=[mark],
        db=db,
        instructions="Marks so far: {marks?}",
    )
    return five, timed, helper, marker


if "STATEWISE_FLEET_TEST_DB" in os.environ:  # in a worker process
    five, timed, helper, marker = build(os.environ["STATEWISE_FLEET_TEST_DB"])
