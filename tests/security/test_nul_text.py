"""U+0000 round-trips on every backend: PostgreSQL's `text` cannot hold it, SQLite, Redis
and JSON can, and text must read back the same wherever it is stored."""

from __future__ import annotations

from typing import Any

from statewise import Agent
from statewise.db.testing import Harness
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo
from statewise.server import create_app
from tests.server.conftest import start_server, stop_server

ANSWER = "before\x00after \x00"
MARKED = '\x01statewise:json:"looks encoded"'  # text that starts like the escape


def _agent(db: Any) -> Agent:
    def model(messages: list[Message], info: RequestInfo) -> ModelResponse:
        text = messages[-1].content or ""
        if text.startswith("\x01"):
            return ModelResponse(content=text)
        return ModelResponse(content=ANSWER + text)

    return Agent(name="nul", db=db, model=FunctionModel(model))


def test_nul_in_answer_and_input_round_trips(backend: Harness) -> None:
    agent = _agent(backend.db)
    out = agent.run("in\x00put", session_id="n1")
    assert out.status == "completed" and out.content == ANSWER + "in\x00put"
    again = agent.run(MARKED, session_id="n1")
    assert again.content == MARKED
    runs = _agent(backend.reopen()).db.read_runs("n1")
    assert [(r.status, r.input, r.content) for r in runs] == [
        ("completed", "in\x00put", ANSWER + "in\x00put"),
        ("completed", MARKED, MARKED),
    ]
    assert runs[0].messages[-1]["content"] == ANSWER + "in\x00put"


def test_nul_over_http_is_stored_not_a_500(backend: Harness) -> None:
    live = start_server(create_app([_agent(backend.db)]))
    try:
        with live.client() as client:
            r = client.post("/v1/agents/nul/runs", json={"input": "x\x00y", "session_id": "n2"})
            assert r.status_code == 200, r.text
            assert r.json()["content"] == ANSWER + "x\x00y"
            r = client.post(
                "/v1/agents/nul/runs",
                json={"input": "z\x00", "session_id": "n2"},
                headers={"Accept": "text/event-stream"},
            )
            assert r.status_code == 200 and "run_completed" in r.text, r.text
            runs = client.get("/v1/sessions/n2").json()["runs"]
            assert [r["status"] for r in runs] == ["completed", "completed"]
            assert [r["input"] for r in runs] == ["x\x00y", "z\x00"]
    finally:
        stop_server(live)
