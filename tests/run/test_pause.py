"""Runs that pause for approval and are continued: same process, another process, racing
continues, reject and edit paths, client-side tools, state as it is at continue time."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from statewise import Agent, Approval, RequestApproval, tool
from statewise.db import SqliteDb
from statewise.exceptions import InvalidApprovalError, RunNotFoundError, RunNotPausedError
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo, ToolCall
from statewise.models.messages import ToolDefinition
from tests._env import subprocess_env


@tool(requires_confirmation=True)
def transfer(session_state: dict[str, Any], amount: int, to: str) -> str:
    """Move money.

    Args:
        amount: How much.
        to: Who gets it.
    """
    session_state.setdefault("transfers", []).append({"amount": amount, "to": to})
    return f"sent {amount} to {to}"


def note(session_state: dict[str, Any], text: str) -> str:
    """Write a note.

    Args:
        text: The note.
    """
    session_state.setdefault("notes", []).append(text)
    return "noted"


def bank_model(messages: list[Message], info: RequestInfo) -> ModelResponse:
    last = messages[-1]
    if last.role == "tool":
        results = [m.content for m in messages if m.role == "tool"]
        return ModelResponse(content="Result: " + " | ".join(r or "" for r in results))
    return ModelResponse(
        tool_calls=[
            ToolCall("note", {"text": "asked to pay"}, "n1"),
            ToolCall("transfer", {"amount": 5, "to": "bob"}, "t1"),
        ]
    )


def bank(db: Any, **kwargs: Any) -> Agent:
    return Agent(
        name="bank",
        model=FunctionModel(bank_model),
        db=db,
        tools=[transfer, note],
        session_state={"balance": 10},
        **kwargs,
    )


def test_pause_then_approve_in_the_same_process(tmp_path: Path) -> None:
    db = SqliteDb(db_file=str(tmp_path / "p.db"))
    agent = bank(db)
    out = agent.run("pay bob", session_id="s1")
    assert out.status == "paused"
    assert [p.tool_call_id for p in out.pending_tool_calls] == ["t1"]
    assert out.pending_tool_calls[0].arguments == {"amount": 5, "to": "bob"}
    # Everything before the paused call is committed; the paused tool did not run.
    state = agent.get_session_state("s1")
    assert state["notes"] == ["asked to pay"] and "transfers" not in state
    assert db.get_run("s1", out.run_id).status == "paused"  # type: ignore[union-attr]
    assert [r.run.run_id for r in agent.get_paused_runs("s1")] == [out.run_id]
    done = agent.continue_run(out.run_id, session_id="s1", approvals={"t1": True})
    assert done.status == "completed" and done.run_id == out.run_id
    assert done.content == "Result: noted | sent 5 to bob"
    assert agent.get_session_state("s1")["transfers"] == [{"amount": 5, "to": "bob"}]
    assert db.get_run("s1", out.run_id).status == "completed"  # type: ignore[union-attr]
    assert agent.get_paused_runs("s1") == []
    with pytest.raises(RunNotPausedError):
        agent.continue_run(out.run_id, session_id="s1", approvals={"t1": True})


def test_reject_tells_the_model_why_and_edit_changes_arguments(tmp_path: Path) -> None:
    db = SqliteDb(db_file=str(tmp_path / "p.db"))
    agent = bank(db)
    out = agent.run("pay bob", session_id="s1")
    done = agent.continue_run(
        out.run_id, session_id="s1", approvals={"t1": Approval.reject("too much")}
    )
    assert "rejected" in str(done.content) and "too much" in str(done.content)
    assert "transfers" not in agent.get_session_state("s1")
    out = agent.run("pay bob", session_id="s2")
    done = agent.continue_run(
        out.run_id, session_id="s2", approvals={"t1": {"arguments": {"amount": 2, "to": "eve"}}}
    )
    assert agent.get_session_state("s2")["transfers"] == [{"amount": 2, "to": "eve"}]
    assert "sent 2 to eve" in str(done.content)


def test_continue_sees_the_state_as_it_is_then(tmp_path: Path) -> None:
    db = SqliteDb(db_file=str(tmp_path / "p.db"))
    seen: list[Any] = []

    def model(messages: list[Message], info: RequestInfo) -> ModelResponse:
        seen.append(messages[0].content)
        if messages[-1].role == "tool":
            return ModelResponse(content="ok")
        return ModelResponse(tool_calls=[ToolCall("transfer", {"amount": 1, "to": "x"}, "t1")])

    agent = Agent(
        model=FunctionModel(model),
        db=db,
        tools=[transfer],
        instructions="Balance: {balance}",
        session_state={"balance": 10},
    )
    out = agent.run("go", session_id="s")
    agent.update_session_state({"balance": 99}, session_id="s")  # changed while paused
    agent.continue_run(out.run_id, session_id="s", approvals={"t1": True})
    assert seen[-1] == "Balance: 99"
    assert agent.get_session_state("s")["balance"] == 99


def test_bad_approvals_are_clear_errors_and_claim_nothing(tmp_path: Path) -> None:
    db = SqliteDb(db_file=str(tmp_path / "p.db"))
    agent = bank(db)
    out = agent.run("pay", session_id="s1")
    with pytest.raises(InvalidApprovalError, match="missing 't1'"):
        agent.continue_run(out.run_id, session_id="s1", approvals={})
    with pytest.raises(InvalidApprovalError, match="no pending tool call 'zz'"):
        agent.continue_run(out.run_id, session_id="s1", approvals={"t1": True, "zz": True})
    with pytest.raises(InvalidApprovalError):
        agent.continue_run(out.run_id, session_id="s1", approvals={"t1": 42})
    with pytest.raises(RunNotFoundError):
        agent.continue_run("nope", session_id="s1", approvals={"t1": True})
    assert db.get_run("s1", out.run_id).status == "paused"  # type: ignore[union-attr]
    agent.continue_run(out.run_id, session_id="s1", approvals={"t1": True})


def test_before_tool_callback_can_ask_for_approval(tmp_path: Path) -> None:
    db = SqliteDb(db_file=str(tmp_path / "p.db"))
    asked: list[Any] = []

    def gate(tool_name: str, args: dict[str, Any], approval: Any) -> Any:
        asked.append(approval)
        if tool_name == "note" and args["text"] == "asked to pay":
            return RequestApproval(reason="notes need a second pair of eyes")
        return None

    agent = Agent(
        model=FunctionModel(bank_model),
        db=db,
        tools=[note, transfer],
        before_tool_callback=gate,
    )
    out = agent.run("pay", session_id="s")
    pending = {p.tool_call_id: p for p in out.pending_tool_calls}
    assert set(pending) == {"n1", "t1"}
    assert pending["n1"].reason == "notes need a second pair of eyes"
    assert "notes" not in agent.get_session_state("s")
    agent.continue_run(out.run_id, session_id="s", approvals={"n1": True, "t1": False})
    state = agent.get_session_state("s")
    assert state["notes"] == ["asked to pay"] and "transfers" not in state
    assert isinstance(asked[-1], Approval)


def test_client_side_tool_pauses_until_its_result(tmp_path: Path) -> None:
    db = SqliteDb(db_file=str(tmp_path / "p.db"))

    def model(messages: list[Message], info: RequestInfo) -> ModelResponse:
        assert "pick_color" in [t.name for t in info.tools]
        if messages[-1].role == "tool":
            return ModelResponse(content=f"You picked {messages[-1].content}")
        return ModelResponse(tool_calls=[ToolCall("pick_color", {}, "c1")])

    agent = Agent(model=FunctionModel(model), db=db)
    client = [ToolDefinition(name="pick_color", description="Ask the user for a color")]
    import asyncio

    out = asyncio.run(agent.arun("color?", session_id="s", client_tools=client))
    assert out.status == "paused" and out.pending_tool_calls[0].kind == "client"
    with pytest.raises(InvalidApprovalError, match="result"):
        agent.continue_run(out.run_id, session_id="s", approvals={"c1": True}, client_tools=client)
    done = agent.continue_run(
        out.run_id, session_id="s", approvals={"c1": Approval(result="teal")}, client_tools=client
    )
    assert done.content == "You picked teal"


def test_racing_continues_one_wins(tmp_path: Path) -> None:
    db_file = str(tmp_path / "race.db")
    for round_ in range(8):
        sid = f"s{round_}"
        out = bank(SqliteDb(db_file=db_file)).run("pay", session_id=sid)
        results: list[str] = []
        barrier = threading.Barrier(2)
        args = (db_file, out.run_id, sid, barrier, results)
        threads = [threading.Thread(target=_continue_racer, args=args) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert sorted(results) == ["409", "won"], results
        state = bank(SqliteDb(db_file=db_file)).get_session_state(sid)
        assert state["transfers"] == [{"amount": 5, "to": "bob"}]  # the tool ran once


def _continue_racer(
    db_file: str, run_id: str, sid: str, barrier: threading.Barrier, results: list[str]
) -> None:
    agent = bank(SqliteDb(db_file=db_file))
    barrier.wait()
    try:
        agent.continue_run(run_id, session_id=sid, approvals={"t1": True})
        results.append("won")
    except RunNotPausedError:
        results.append("409")


CONTINUE_SCRIPT = """
import sys
from statewise.db import SqliteDb
from tests.run.test_pause import bank
agent = bank(SqliteDb(db_file=sys.argv[1]))
out = agent.continue_run(sys.argv[2], session_id="s1", approvals={"t1": True})
print(out.status, out.content)
"""


def test_continue_in_another_process(tmp_path: Path) -> None:
    db_file = str(tmp_path / "x.db")
    out = bank(SqliteDb(db_file=db_file)).run("pay", session_id="s1")
    proc = subprocess.run(
        [sys.executable, "-c", CONTINUE_SCRIPT, db_file, out.run_id],
        capture_output=True,
        text=True,
        timeout=120,
        env=subprocess_env(),
        cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("completed Result: noted | sent 5 to bob")
    state = bank(SqliteDb(db_file=db_file)).get_session_state("s1")
    assert state["transfers"] == [{"amount": 5, "to": "bob"}]
