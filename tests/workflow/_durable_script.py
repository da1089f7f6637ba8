"""A five-step workflow run as a real process by test_durable.py.

Usage: python _durable_script.py DB_FILE SIDE_FILE SESSION_ID run|resume

Every step appends "start N" / "done N" to SIDE_FILE (the side channel that counts
executions). Step 3 is an agent: its tool writes state, then, with CRASH_IN_STEP_3=1, its
second model call announces "crash-point" and hangs until the test SIGKILLs the process.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from statewise import Agent, Step, StepInput, Workflow
from statewise.db import SqliteDb
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo, ToolCall
from statewise.state.tracked import TrackedDict

DB_FILE, SIDE_FILE, SESSION_ID, MODE = sys.argv[1:5]


def log(line: str) -> None:
    with open(SIDE_FILE, "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def function_step(n: int) -> Any:
    def fn(step_input: StepInput, session_state: dict[str, Any]) -> str:
        log(f"start {n}")
        session_state["trail"].append(n)
        session_state.increment("total", n)  # type: ignore[attr-defined]
        session_state["last"] = f"{step_input.previous_step_content}->{n}"
        log(f"done {n}")
        return f"s{n}"

    fn.__name__ = f"step_{n}"
    return fn


def record(session_state: TrackedDict, note: str) -> str:
    """Write a note into state.

    Args:
        note: what to write
    """
    session_state["trail"].append(note)
    session_state.increment("total", 3)
    return "noted"


def model(messages: list[Message], info: RequestInfo) -> ModelResponse:
    if messages[-1].role != "tool":
        log("start 3")
        return ModelResponse(tool_calls=[ToolCall("record", {"note": "agent-3"}, "c1")])
    if os.environ.get("CRASH_IN_STEP_3"):
        log("crash-point")
        time.sleep(120)
    log("done 3")
    return ModelResponse(content="s3")


workflow = Workflow(
    name="durable",
    db=SqliteDb(db_file=DB_FILE),
    steps=[
        function_step(1),
        function_step(2),
        Step(name="step_3", agent=Agent(name="third", model=FunctionModel(model), tools=[record])),
        function_step(4),
        function_step(5),
    ],
    session_state={"trail": [], "total": 0},
    # The killed run's lease expires a second after its last renewal; the resuming
    # process starts later than that.
    run_lease_seconds=1.0,
)

if MODE == "run":
    output = workflow.run("go", session_id=SESSION_ID)
else:
    time.sleep(1.2)  # the killed process's run lease (1 s after its last renewal) expires
    output = workflow.run(session_id=SESSION_ID, resume=True)
print(
    json.dumps({"run_id": output.run_id, "content": output.content, "state": output.session_state})
)
