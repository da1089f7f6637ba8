"""Paused runs over HTTP and AG-UI: list, continue (approve / reject / edit), exactly
once (409 for the loser of a race), another user's run is 404, a server restart between
pause and continue, and the AG-UI interrupt answered by `resume` entries."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from statewise import Agent
from statewise.db import SqliteDb
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo, ToolCall
from statewise.server import create_app
from tests.run.test_pause import bank
from tests.server.conftest import ALICE, BOB, LiveServer, start_server, stop_server
from tests.server.test_agui import Frontend, agui_events, run_input, stored_state, types
from tests.server.test_api import assert_problem


def pause(client: httpx.Client, sid: str) -> dict[str, Any]:
    r = client.post("/v1/agents/bank/runs", json={"input": "pay bob", "session_id": sid})
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    assert out["status"] == "paused", out
    assert [p["tool_call_id"] for p in out["pending_tool_calls"]] == ["t1"]
    return out


@pytest.fixture
def bank_live(make_live: Callable[..., LiveServer], tmp_path: Path) -> LiveServer:
    return make_live(
        apps=[bank(SqliteDb(db_file=str(tmp_path / "bank.db")))],
        api_keys={ALICE: "alice", BOB: "bob"},
    )


def test_list_and_continue_over_http(bank_live: LiveServer) -> None:
    with bank_live.client(ALICE) as alice:
        out = pause(alice, "h1")
        listed = alice.get("/v1/sessions/h1/paused-runs").json()["runs"]
        assert [r["run_id"] for r in listed] == [out["run_id"]]
        assert listed[0]["pending_tool_calls"][0]["tool_name"] == "transfer"
        assert alice.get("/v1/sessions/h1").json()["runs"][-1]["status"] == "paused"
        url = f"/v1/sessions/h1/runs/{out['run_id']}/continue"
        assert_problem(alice.post(url, json={"approvals": {}}), 422, "t1")
        assert_problem(alice.post(url, json={"approvals": {"t1": {"nope": 1}}}), 422)
        r = alice.post(url, json={"approvals": {"t1": {"arguments": {"amount": 3, "to": "eve"}}}})
        assert r.status_code == 200, r.text
        assert r.json()["status"] == "completed"
        assert r.json()["session_state"]["transfers"] == [{"amount": 3, "to": "eve"}]
        assert_problem(alice.post(url, json={"approvals": {"t1": {}}}), 409, "continued once")
        assert alice.get("/v1/sessions/h1/paused-runs").json()["runs"] == []
        assert_problem(
            alice.post("/v1/sessions/h1/runs/nope/continue", json={"approvals": {}}), 404
        )


def test_reject_over_http_tells_the_model(bank_live: LiveServer) -> None:
    with bank_live.client(ALICE) as alice:
        out = pause(alice, "h2")
        r = alice.post(
            f"/v1/sessions/h2/runs/{out['run_id']}/continue",
            json={"approvals": {"t1": {"approved": False, "reason": "not today"}}},
        )
        assert r.status_code == 200, r.text
        assert "not today" in r.json()["content"]
        assert "transfers" not in r.json()["session_state"]


def test_another_users_run_is_404(bank_live: LiveServer) -> None:
    with bank_live.client(ALICE) as alice, bank_live.client(BOB) as bob:
        out = pause(alice, "h3")
        url = f"/v1/sessions/h3/runs/{out['run_id']}/continue"
        assert_problem(bob.post(url, json={"approvals": {"t1": {}}}), 404)
        assert_problem(bob.get("/v1/sessions/h3/paused-runs"), 404)
        assert alice.post(url, json={"approvals": {"t1": {}}}).status_code == 200


def test_racing_continues_over_http_one_wins(bank_live: LiveServer) -> None:
    with bank_live.client(ALICE) as alice:
        for round_ in range(5):
            sid = f"race{round_}"
            out = pause(alice, sid)
            url = f"/v1/sessions/{sid}/runs/{out['run_id']}/continue"
            codes: list[int] = []
            barrier = threading.Barrier(2)
            args = (bank_live, url, barrier, codes)
            threads = [threading.Thread(target=_post_continue, args=args) for _ in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=60)
            assert sorted(codes) == [200, 409], codes
            state = alice.get(f"/v1/sessions/{sid}/state").json()["state"]
            assert state["transfers"] == [{"amount": 5, "to": "bob"}]


def _post_continue(
    live: LiveServer, url: str, barrier: threading.Barrier, codes: list[int]
) -> None:
    with live.client(ALICE) as client:
        barrier.wait()
        codes.append(client.post(url, json={"approvals": {"t1": {}}}).status_code)


def test_continue_after_a_server_restart(tmp_path: Path) -> None:
    db_file = str(tmp_path / "restart.db")
    first = start_server(create_app([bank(SqliteDb(db_file=db_file))]))
    try:
        with httpx.Client(base_url=first.url, timeout=30) as client:
            out = pause(client, "r1")
    finally:
        stop_server(first)
    second = start_server(create_app([bank(SqliteDb(db_file=db_file))]))
    try:
        with httpx.Client(base_url=second.url, timeout=30) as client:
            r = client.post(
                f"/v1/sessions/r1/runs/{out['run_id']}/continue",
                json={"approvals": {"t1": {"approved": True}}},
            )
            assert r.status_code == 200, r.text
            assert r.json()["session_state"]["transfers"] == [{"amount": 5, "to": "bob"}]
    finally:
        stop_server(second)


# ---- AG-UI: the pause is an interrupt; resume entries answer it ---------------------------

AGUI = "/v1/agents/bank/agui"


def test_agui_interrupt_then_resume(bank_live: LiveServer) -> None:
    with bank_live.client(ALICE) as alice:
        ui = Frontend(alice, "g1", AGUI)
        events = ui.run("pay bob")
        finished = events[-1]
        assert finished["type"] == "RUN_FINISHED"
        outcome = finished["outcome"]
        assert outcome["type"] == "interrupt"
        interrupt = outcome["interrupts"][0]
        assert interrupt["id"] == interrupt["toolCallId"] == "t1"
        assert interrupt["reason"] == "tool_approval" and interrupt["responseSchema"]
        assert "TOOL_CALL_START" in types(events)
        assert ui.state == stored_state(alice, "g1") and "transfers" not in ui.state
        # The next run answers the interrupt (here: edit the arguments).
        body = run_input("g1", "", messages=ui.messages, state=ui.state)
        body["messages"] = ui.messages  # no new user message: a resume
        body["resume"] = [
            {
                "interruptId": "t1",
                "status": "resolved",
                "payload": {"arguments": {"amount": 1, "to": "al"}},
            }
        ]
        events = agui_events(alice, body, AGUI)
        assert types(events)[0] == "RUN_STARTED" and events[-1]["type"] == "RUN_FINISHED"
        assert "outcome" not in events[-1] or events[-1]["outcome"]["type"] == "success"
        result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
        assert result["toolCallId"] == "t1" and "sent 1 to al" in result["content"]
        assert stored_state(alice, "g1")["transfers"] == [{"amount": 1, "to": "al"}]
        # The same resume again: the run was continued already.
        body["runId"] = uuid.uuid4().hex
        assert_problem(alice.post(AGUI, json=body), 409, "continued")


def test_agui_cancelled_interrupt_rejects(bank_live: LiveServer) -> None:
    with bank_live.client(ALICE) as alice:
        ui = Frontend(alice, "g2", AGUI)
        ui.run("pay bob")
        body = {
            "threadId": "g2",
            "runId": uuid.uuid4().hex,
            "messages": ui.messages,
            "state": ui.state,
            "resume": [{"interruptId": "t1", "status": "cancelled"}],
        }
        events = agui_events(alice, body, AGUI)
        text = "".join(e.get("delta", "") for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
        assert "rejected" in text
        assert "transfers" not in stored_state(alice, "g2")


def test_agui_client_side_tool_round_trip(
    make_live: Callable[..., LiveServer], tmp_path: Path
) -> None:
    def model(messages: list[Message], info: RequestInfo) -> ModelResponse:
        if messages[-1].role == "tool":
            return ModelResponse(content=f"Color is {messages[-1].content}")
        assert "pick_color" in [t.name for t in info.tools]
        return ModelResponse(tool_calls=[ToolCall("pick_color", {"hint": "warm"}, "c1")])

    agent = Agent(
        name="lister", model=FunctionModel(model), db=SqliteDb(db_file=str(tmp_path / "c.db"))
    )
    live = make_live(apps=[agent])
    tools = [
        {"name": "pick_color", "description": "Ask the user", "parameters": {"type": "object"}}
    ]
    with live.client() as client:
        events = agui_events(client, run_input("ct", "color?", tools=tools))
        kinds = types(events)
        assert "TOOL_CALL_START" in kinds and "TOOL_CALL_RESULT" not in kinds
        assert events[-1]["outcome"] == {"type": "success", "pendingToolCallIds": ["c1"]}
        messages = [
            {"id": "u1", "role": "user", "content": "color?"},
            {
                "id": "a1",
                "role": "assistant",
                "toolCalls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "pick_color", "arguments": "{}"},
                    }
                ],
            },
            {"id": "r1", "role": "tool", "toolCallId": "c1", "content": "teal"},
        ]
        body = {"threadId": "ct", "runId": "x", "messages": messages, "tools": tools}
        events = agui_events(client, body)
        assert "TOOL_CALL_RESULT" not in types(events)  # the client already has it
        text = "".join(e.get("delta", "") for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
        assert text == "Color is teal"
