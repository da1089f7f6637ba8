"""Answers to a paused run that must not run anything, on every backend.

Edited arguments holding NaN, Infinity or a lone surrogate are not JSON a tool can be
given nor state can hold: the HTTP continue route and the AG-UI `resume` path answer 422
naming the reason, write nothing, and leave the run paused (a valid answer then still
continues it). An AG-UI `role: "tool"` message never answers an approval interrupt, whatever
its text: approvals are answered by `resume` entries only.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import pytest

from statewise.db.testing import Harness
from statewise.server import create_app
from tests.run.test_pause import bank
from tests.server.conftest import start_server, stop_server
from tests.server.test_agui import Frontend, agui_events, stored_state

AGUI = "/v1/agents/bank/agui"

# Raw JSON texts: Python's own encoder never writes these, a hostile client does.
HOSTILE = {
    "NaN": '{"amount": NaN, "to": "eve"}',
    "Infinity": '{"amount": Infinity, "to": "eve"}',
    "-Infinity": '{"amount": -Infinity, "to": "eve"}',
    "nested NaN": '{"amount": 1, "to": "eve", "memo": [1, {"x": NaN}]}',
    "lone surrogate": '{"amount": 1, "to": "\\ud800eve"}',
}


def _post_raw(client: httpx.Client, url: str, text: str) -> httpx.Response:
    return client.post(url, content=text.encode(), headers={"Content-Type": "application/json"})


def _session_view(client: httpx.Client, sid: str) -> tuple[Any, ...]:
    """What must not move: state, event count, the run's status, the paused runs."""
    session = client.get(f"/v1/sessions/{sid}").json()
    events = client.get(f"/v1/sessions/{sid}/events").json()
    paused = client.get(f"/v1/sessions/{sid}/paused-runs").json()["runs"]
    return (
        session["state"],
        len(events["events"]),
        [r["status"] for r in session["runs"]],
        [r["run_id"] for r in paused],
    )


@pytest.fixture
def served(backend: Harness) -> Any:
    live = start_server(create_app([bank(backend.db)]))
    try:
        yield live
    finally:
        stop_server(live)


def test_hostile_edited_arguments_on_continue_are_422_and_write_nothing(served: Any) -> None:
    with served.client() as client:
        r = client.post("/v1/agents/bank/runs", json={"input": "pay bob", "session_id": "c1"})
        assert r.status_code == 200 and r.json()["status"] == "paused", r.text
        run_id = r.json()["run_id"]
        url = f"/v1/sessions/c1/runs/{run_id}/continue"
        before = _session_view(client, "c1")
        assert before[2] == ["paused"] and before[3] == [run_id]
        for name, arguments in HOSTILE.items():
            body = '{"approvals": {"t1": {"arguments": ' + arguments + "}}}"
            r = _post_raw(client, url, body)
            assert r.status_code == 422, (name, r.status_code, r.text)
            detail = r.json()["detail"]
            reason = "surrogate" if "surrogate" in name else "not valid JSON"
            assert reason in detail and "t1" in detail, (name, detail)
            assert _session_view(client, "c1") == before, name
        r = client.post(url, json={"approvals": {"t1": {"arguments": {"amount": 2, "to": "al"}}}})
        assert r.status_code == 200, r.text
        assert r.json()["session_state"]["transfers"] == [{"amount": 2, "to": "al"}]


def test_hostile_edited_arguments_on_agui_resume_are_422(served: Any) -> None:
    with served.client() as client:
        ui = Frontend(client, "g1", AGUI)
        ui.run("pay bob")
        before = _session_view(client, "g1")
        for name, arguments in HOSTILE.items():
            body = {
                "threadId": "g1",
                "runId": uuid.uuid4().hex,
                "messages": ui.messages,
                "state": ui.state,
                "resume": [{"interruptId": "t1", "status": "resolved", "payload": "@ARGS@"}],
            }
            text = json.dumps(body).replace('"@ARGS@"', '{"arguments": ' + arguments + "}")
            r = _post_raw(client, AGUI, text)
            assert r.status_code == 422, (name, r.status_code, r.text)
            assert _session_view(client, "g1") == before, name
        body = {
            "threadId": "g1",
            "runId": uuid.uuid4().hex,
            "messages": ui.messages,
            "state": ui.state,
            "resume": [{"interruptId": "t1", "status": "resolved"}],
        }
        events = agui_events(client, body, AGUI)
        assert events[-1]["type"] == "RUN_FINISHED", events[-1]
        assert stored_state(client, "g1")["transfers"] == [{"amount": 5, "to": "bob"}]


def test_an_agui_tool_message_never_answers_an_approval(served: Any) -> None:
    with served.client() as client:
        ui = Frontend(client, "g2", AGUI)
        ui.run("pay bob")
        before = _session_view(client, "g2")
        assert before[3], "the run must be paused"
        messages = [
            *ui.messages,
            {
                "id": "a1",
                "role": "assistant",
                "toolCalls": [
                    {
                        "id": "t1",
                        "type": "function",
                        "function": {"name": "transfer", "arguments": "{}"},
                    }
                ],
            },
            {"id": "r1", "role": "tool", "toolCallId": "t1", "content": "REJECTED"},
        ]
        body = {"threadId": "g2", "runId": uuid.uuid4().hex, "messages": messages}
        r = client.post(AGUI, json=body, headers={"Accept": "text/event-stream"})
        assert r.status_code == 422, r.text
        assert "resume" in r.json()["detail"] and "t1" in r.json()["detail"]
        assert _session_view(client, "g2") == before
        assert "transfers" not in stored_state(client, "g2")
