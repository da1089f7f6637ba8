"""The app the fleet tests' workers serve: a five-step workflow, a one-step workflow that
records when it runs, and a one-tool agent. Configured by environment variables:

- STATEWISE_FLEET_TEST_DB: PostgreSQL URL of the test database (sessions in schema
  `sessions`);
- STATEWISE_FLEET_TEST_SIDE: a file every step execution appends a line to (the side
  channel: `pid run_id step start|end time`);
- STATEWISE_FLEET_TEST_SLEEP: seconds each step sleeps (default 0.1).
"""

from __future__ import annotations

import os
import time
from typing import Any

from statewise import Agent, Step, Workflow
from statewise.db.postgres import PostgresDb
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


def build(url: str) -> tuple[Workflow, Workflow, Agent]:
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
    return five, timed, helper


if "STATEWISE_FLEET_TEST_DB" in os.environ:  # in a worker process
    five, timed, helper = build(os.environ["STATEWISE_FLEET_TEST_DB"])
