"""A process killed (SIGKILL) while continuing a paused run: the run is leased to it, so
nobody else continues it meanwhile, and once the lease expires it can be continued again
from its pause. An approved tool whose result was committed is not run twice; a
continuation that got further marks the run failed with the reason."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from statewise import Agent, tool
from statewise.db import SqliteDb
from statewise.exceptions import RunNotPausedError
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo, ToolCall
from tests._env import subprocess_env
from tests.run.test_pause import note

DIE_AT = "STATEWISE_TEST_DIE_AT"
LEASE_SECONDS = 2.0


def _die_at(stage: str) -> None:
    if os.environ.get(DIE_AT) == stage:
        os.kill(os.getpid(), signal.SIGKILL)


@tool(requires_confirmation=True)
def transfer(session_state: dict[str, Any], amount: int, to: str) -> str:
    """Move money.

    Args:
        amount: How much.
        to: Who gets it.
    """
    _die_at("tool")
    session_state.setdefault("transfers", []).append({"amount": amount, "to": to})
    return f"sent {amount} to {to}"


def model(messages: list[Message], info: RequestInfo) -> ModelResponse:
    results = [m.content or "" for m in messages if m.role == "tool"]
    if not results:
        return ModelResponse(tool_calls=[ToolCall("transfer", {"amount": 5, "to": "bob"}, "t1")])
    _die_at("model")  # the approved call's result is committed, the model call in flight
    if len(results) == 1 and os.environ.get(DIE_AT) == "step":
        return ModelResponse(tool_calls=[ToolCall("note", {"text": "paid"}, "n1")])
    _die_at("step")  # one more step committed after the answers
    return ModelResponse(content="done: " + " | ".join(results))


def bank(db_file: str) -> Agent:
    return Agent(
        name="bank",
        model=FunctionModel(model),
        db=SqliteDb(db_file=db_file),
        tools=[transfer, note],
    )


CONTINUE_AND_DIE = f"""
import sys
import statewise.run.resume as resume
resume.CONTINUE_LEASE_SECONDS = {LEASE_SECONDS}
from tests.run.test_continue_lease import bank
bank(sys.argv[1]).continue_run(sys.argv[2], session_id="s", approvals={{"t1": True}})
"""


def _continue_in_a_process_that_dies(db_file: str, run_id: str, stage: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", CONTINUE_AND_DIE, db_file, run_id],
        capture_output=True,
        text=True,
        timeout=120,
        env=subprocess_env(**{DIE_AT: stage}),
        cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr


def _continue_once_the_lease_expires(agent: Agent, run_id: str) -> Any:
    deadline = time.monotonic() + LEASE_SECONDS + 15
    while True:
        try:
            return agent.continue_run(run_id, session_id="s", approvals={"t1": True})
        except RunNotPausedError as exc:
            if "being continued by another process" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.mark.parametrize("stage", ["tool", "model"])
def test_a_dead_continuers_run_is_continued_again_after_its_lease(
    tmp_path: Path, stage: str
) -> None:
    db_file = str(tmp_path / "lease.db")
    agent = bank(db_file)
    paused = agent.run("pay bob", session_id="s")
    assert paused.status == "paused"
    _continue_in_a_process_that_dies(db_file, paused.run_id, stage)
    run = agent.db.get_run("s", paused.run_id)
    assert run is not None and run.status == "running"
    if stage == "model":
        # The dead process's lease is still live (renewed every LEASE_SECONDS / 3).
        with pytest.raises(RunNotPausedError, match="being continued by another process"):
            agent.continue_run(paused.run_id, session_id="s", approvals={"t1": True})
    out = _continue_once_the_lease_expires(agent, paused.run_id)
    assert out.status == "completed" and out.content == "done: sent 5 to bob"
    assert agent.get_session_state("s")["transfers"] == [{"amount": 5, "to": "bob"}]
    calls = [
        e for e in agent.db.read_events("s", types=["tool_call"]) if e.data["name"] == "transfer"
    ]
    assert len(calls) == 1, "the approved call ran and was recorded once"
    with pytest.raises(RunNotPausedError):
        agent.continue_run(paused.run_id, session_id="s", approvals={"t1": True})


def test_a_dead_continuation_that_committed_a_step_fails_the_run(tmp_path: Path) -> None:
    db_file = str(tmp_path / "lease.db")
    agent = bank(db_file)
    paused = agent.run("pay bob", session_id="s")
    _continue_in_a_process_that_dies(db_file, paused.run_id, "step")
    with pytest.raises(RunNotPausedError, match="stopped after committing more of it"):
        _continue_once_the_lease_expires(agent, paused.run_id)
    run = agent.db.get_run("s", paused.run_id)
    assert run is not None and run.status == "failed" and "stopped after" in (run.error or "")
    state = agent.get_session_state("s")
    assert state["transfers"] == [{"amount": 5, "to": "bob"}] and state["notes"] == ["paid"]
