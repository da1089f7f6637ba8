"""The plaintext grep at the newer edges, on every backend: two served objects with
different app names on one database, a `strict` conflict on a secret key, a prompt that
shows secrets to the model (`expose_secrets_to_model=True`) with debug logging on, and a
secret value the model itself passes as a tool argument. Each searches storage, every
route of the OpenAPI schema (AG-UI included), exports, events, run records, the debug log
and OpenTelemetry spans."""

from __future__ import annotations

import json
import logging
import secrets
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from statewise import Agent
from statewise.db.testing import Harness
from statewise.exceptions import StateConflictError
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo, ToolCall
from statewise.server import create_app
from tests.run.test_observe import _EXPORTER as _OBSERVED
from tests.security._walk import Target, walk
from tests.security.test_secret_grep import _raw_storage
from tests.server.conftest import ADMIN, start_server, stop_server

TAG = secrets.token_hex(4)
S = {name: f"PLAINTEXT{name.upper()}{TAG}" for name in ("token", "master", "theirs", "ours")}
# The process has one global tracer provider: share the exporter of the tests that set it
# up (tests/run/test_observe.py), whichever module runs first.
_SPANS: InMemorySpanExporter = _OBSERVED


@pytest.fixture(scope="module", autouse=True)
def _tracer() -> None:
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_SPANS))
        trace.set_tracer_provider(provider)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    _SPANS.clear()
    yield _SPANS
    _SPANS.clear()


def _leaks(blob: bytes | str) -> list[str]:
    data = blob.encode() if isinstance(blob, str) else blob
    return [name for name, value in S.items() if value.encode() in data]


def _span_text(exporter: InMemorySpanExporter) -> str:
    assert exporter.get_finished_spans(), "the search sees real spans"
    parts = []
    for span in exporter.get_finished_spans():
        parts.append(json.dumps(dict(span.attributes or {}), default=str))
        parts.append(str(span.status.description))
        parts.extend(json.dumps(dict(e.attributes or {}), default=str) for e in span.events)
    return "\n".join(parts)


def _everything(
    backend: Harness, agent: Agent, sid: str, tmp_path: Path, extra: list[bytes]
) -> dict[str, list[str]]:
    export = tmp_path / f"{sid}.jsonl"
    agent.export_session(sid, export)
    found = {
        "storage": _leaks(_raw_storage(backend)),
        "http": _leaks(b"\n".join(extra)),
        "export": _leaks(export.read_bytes()),
        "events": _leaks(json.dumps([e.to_dict() for e in backend.db.read_events(sid)])),
        "run records": _leaks(json.dumps([r.to_dict() for r in backend.db.read_runs(sid)])),
    }
    return {k: v for k, v in found.items() if v}


def _serve_and_walk(apps: list[Agent], target: Target, *, admin: bool = False) -> list[bytes]:
    kwargs: dict[str, Any] = {"admin_keys": {ADMIN: "ops"}} if admin else {}
    live = start_server(create_app(apps, **kwargs))
    try:
        with live.client(ADMIN if admin else None) as client:
            return walk(client, target)
    finally:
        stop_server(live)


def test_two_served_objects_with_different_app_names(backend: Harness, tmp_path: Path) -> None:
    def set_token(session_state: dict[str, Any]) -> str:
        """Store the token."""
        session_state["api_token"] = S["token"]
        return "stored"

    def model(messages: list[Message], info: RequestInfo) -> ModelResponse:
        if messages[-1].role == "tool" or "set_token" not in [t.name for t in info.tools]:
            return ModelResponse(content="done")
        return ModelResponse(tool_calls=[ToolCall("set_token", {}, "c1")])

    first = Agent(
        name="vault",
        db=backend.db,
        model=FunctionModel(model),
        tools=[set_token],
        secret_keys=["api_token", "app:master"],
    )
    second = Agent(name="other", db=backend.db, model=FunctionModel(model))  # app "other"
    first.run("store", session_id="two", user_id="ann")
    first.state.for_session("two").set("app:master", S["master"])  # the admin's app secret
    run_id = backend.db.read_runs("two")[-1].run_id
    answers = _serve_and_walk(
        [first, second], Target("two", run_id, "agents", "other", "spare"), admin=True
    )
    assert first.get_session_state("two")["api_token"] == S["token"]
    assert _everything(backend, first, "two", tmp_path, answers) == {}


def test_strict_conflict_on_a_secret_key_keeps_values_out_of_errors(
    backend: Harness, tmp_path: Path, caplog: pytest.LogCaptureFixture, spans: Any
) -> None:
    caplog.set_level(logging.DEBUG, logger="statewise")
    holder: dict[str, Agent] = {}

    def racer(session_state: dict[str, Any]) -> str:
        """Store a token while another writer stores one too."""
        _ = session_state["api_token"]
        writer = threading.Thread(
            target=lambda: holder["b"].state.for_session("strict").set("api_token", S["theirs"])
        )
        writer.start()
        writer.join()
        session_state["api_token"] = S["ours"]
        return "raced"

    def model(messages: list[Message], info: RequestInfo) -> ModelResponse:
        if messages[-1].role == "tool":
            return ModelResponse(content="done")
        return ModelResponse(tool_calls=[ToolCall("racer", {}, "c1")])

    common: dict[str, Any] = dict(
        name="vault",
        db=backend.db,
        model=FunctionModel(model),
        tools=[racer],
        secret_keys=["api_token"],
        state_rules={"api_token": "strict"},
        debug_mode=True,
    )
    a, b = Agent(**common), Agent(**common)
    holder["b"] = b
    a.state.for_session("strict").set("api_token", S["token"])
    with pytest.raises(StateConflictError) as caught:
        a.run("race", session_id="strict")
    assert "api_token" in str(caught.value) and not _leaks(str(caught.value))
    live = start_server(create_app([b]))
    try:
        with live.client() as client:
            r = client.post("/v1/agents/vault/runs", json={"input": "race", "session_id": "strict"})
            assert r.status_code == 409, r.text
            answers = [r.content]
            run_id = backend.db.read_runs("strict")[-1].run_id
            answers += walk(client, Target("strict", run_id, "agents", "vault", "spare"))
    finally:
        stop_server(live)
    errors = [r.error or "" for r in backend.db.read_runs("strict")]
    assert any("api_token" in e for e in errors), errors
    found = _everything(backend, a, "strict", tmp_path, answers)
    found["logs"] = _leaks("\n".join(r.getMessage() for r in caplog.records))
    found["spans"] = _leaks(_span_text(spans))
    # (the racing writer's own value is stored encrypted: it is the only one in state)
    assert {k: v for k, v in found.items() if v} == {}


def test_expose_secrets_to_model_keeps_them_out_of_the_debug_log(
    backend: Harness, tmp_path: Path, caplog: pytest.LogCaptureFixture, spans: Any
) -> None:
    caplog.set_level(logging.DEBUG, logger="statewise")
    seen: list[str] = []

    def model(messages: list[Message], info: RequestInfo) -> ModelResponse:
        seen.extend(m.content or "" for m in messages)
        return ModelResponse(content="ok")

    agent = Agent(
        name="vault",
        db=backend.db,
        model=FunctionModel(model),
        secret_keys=["api_token"],
        expose_secrets_to_model=True,
        instructions="Use the token {api_token}",
        debug_mode=True,
    )
    agent.state.for_session("shown").set("api_token", S["token"])
    caplog.clear()
    agent.run("go", session_id="shown")
    assert any(S["token"] in text for text in seen), "the model was shown the secret"
    assert any("system prompt" in r.getMessage() for r in caplog.records)
    found = _everything(backend, agent, "shown", tmp_path, [])
    found["logs"] = _leaks("\n".join(r.getMessage() for r in caplog.records))
    found["spans"] = _leaks(_span_text(spans))
    assert {k: v for k, v in found.items() if v} == {}


def test_a_secret_the_model_passes_as_a_tool_argument_is_masked_from_its_commit_on(
    backend: Harness, tmp_path: Path, caplog: pytest.LogCaptureFixture, spans: Any
) -> None:
    def save_token(token: str, session_state: dict[str, Any]) -> str:
        """Keep the user's API token.

        Args:
            token: The token.
        """
        session_state["api_token"] = token
        return f"saved {token}"

    def model(messages: list[Message], info: RequestInfo) -> ModelResponse:
        last = messages[-1]
        if last.role == "tool":
            return ModelResponse(content=f"I saved {S['token']} for you")
        if last.content == "echo":
            return ModelResponse(content=f"Your token is {S['token']}")
        return ModelResponse(tool_calls=[ToolCall("save_token", {"token": S["token"]}, "c1")])

    agent = Agent(
        name="vault",
        db=backend.db,
        model=FunctionModel(model),
        tools=[save_token],
        secret_keys=["api_token"],
        debug_mode=True,
    )
    first = agent.run("save my token", session_id="told")
    assert agent.get_session_state("told")["api_token"] == S["token"]  # library: trusted
    caplog.set_level(logging.DEBUG, logger="statewise")
    caplog.clear()
    _SPANS.clear()
    agent.run("echo", session_id="told")  # a later message that echoes it
    later_logs = "\n".join(r.getMessage() for r in caplog.records)
    run_id = first.run_id
    answers = _serve_and_walk([agent], Target("told", run_id, "agents", "vault", "spare"))
    found = _everything(backend, agent, "told", tmp_path, answers)
    found["later logs"] = _leaks(later_logs)
    found["later spans"] = _leaks(_span_text(spans))
    assert {k: v for k, v in found.items() if v} == {}
    stored = backend.db.read_runs("told")
    # The commit that stores the secret masks that step's tool call and result, and the
    # run's record from then on (its messages), and everything after.
    assert "***" in json.dumps(stored[0].messages)
    assert stored[1].content == "Your token is ***"
