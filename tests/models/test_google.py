"""Gemini against an in-repo fake of the Gemini API: what aimock cannot show. aimock
serves Gemini under `/v1beta` only, while google-genai calls `/v1` by default, so the
default path is checked here; and thought signatures, Google's error details (RetryInfo,
API_KEY_INVALID), context overflow, blocked prompts and unfinished streams."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from tests.models.fakes import FakeServer, Reply, SleepRecorder
from tests.models.fakes import gemini as wire

from statewise import Agent, RunContext
from statewise.db import SqliteDb
from statewise.exceptions import (
    ConfigurationError,
    ContextLengthExceededError,
    MalformedResponseError,
    ModelAuthenticationError,
    ModelConnectionError,
    ModelError,
)
from statewise.models import (
    Message,
    ModelResponse,
    RequestInfo,
    TextDelta,
    ToolDefinition,
    infer_model,
)
from statewise.models._guard import allow_model_requests
from statewise.models._retry import RetryPolicy
from statewise.models.google import GENERATED_ID, Gemini

pytestmark = pytest.mark.anyio

KEY = "gemini-fake-key"
WEATHER = ToolDefinition(
    name="weather",
    description="Weather for a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)
HELLO = [Message(role="system", content="Be brief."), Message(role="user", content="hi")]


def model(fake: FakeServer, retry: RetryPolicy, **settings: Any) -> Gemini:
    return Gemini("gemini-x", base_url=fake.url, api_key=KEY, retry=retry, **settings)


async def stream(
    gemini: Gemini, messages: list[Message], info: RequestInfo | None = None
) -> tuple[ModelResponse, list[Any]]:
    deltas: list[Any] = []
    async with gemini:
        async for chunk in gemini.request_stream(messages, info or RequestInfo()):
            if isinstance(chunk, ModelResponse):
                return chunk, deltas
            deltas.append(chunk)
    raise AssertionError("no response")


async def test_default_api_version_path_and_request(fake: FakeServer, retry: RetryPolicy) -> None:
    fake.enqueue(wire.response([{"text": "Hello"}]))
    gemini = model(fake, retry, temperature=0, max_tokens=50, tool_choice="required")
    async with gemini:
        response = await gemini.request(HELLO, RequestInfo(tools=[WEATHER]))
    assert response.content == "Hello"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (21, 8)
    assert response.model_name == "gemini-fake-001"
    sent = fake.last
    assert sent.path == "/v1/models/gemini-x:generateContent"  # not aimock's /v1beta
    assert sent.headers["x-goog-api-key"] == KEY
    assert sent.json["systemInstruction"]["parts"] == [{"text": "Be brief."}]
    assert sent.json["contents"] == [{"role": "user", "parts": [{"text": "hi"}]}]
    assert sent.json["generationConfig"] == {"temperature": 0.0, "maxOutputTokens": 50}
    assert sent.json["toolConfig"] == {"functionCallingConfig": {"mode": "ANY"}}
    declaration = sent.json["tools"][0]["functionDeclarations"][0]
    # google-genai sends the proto field name; proto3 JSON accepts either spelling.
    schema = declaration.get("parametersJsonSchema") or declaration["parameters_json_schema"]
    assert schema == WEATHER.parameters


async def test_streamed_text(fake: FakeServer, retry: RetryPolicy) -> None:
    fake.enqueue(wire.text_stream(["Hel", "lo ", "there"]))
    response, deltas = await stream(model(fake, retry), HELLO)
    assert [d.content for d in deltas if isinstance(d, TextDelta)] == ["Hel", "lo ", "there"]
    assert response.content == "Hello there"
    assert response.usage.total_tokens == 29
    assert fake.last.path == "/v1/models/gemini-x:streamGenerateContent?alt=sse"


def note(city: str, run_context: RunContext) -> str:
    """Weather for a city (noted in state)."""
    run_context.session_state["cities"].append(city)
    return f"rain in {city}"


async def test_thought_signatures_go_back_verbatim(
    fake: FakeServer, retry: RetryPolicy, tmp_path: Path
) -> None:
    """Gemini 3 refuses a tool-loop continuation whose function call lost its signature;
    the thought summary and the signatures go back as received, calls without ids."""
    thinking: list[dict[str, Any]] = [
        {"text": "The user wants ", "thought": True},
        {"text": "two cities.", "thought": True},
        {
            "functionCall": {"name": "note", "args": {"city": "Oslo"}},
            "thoughtSignature": "c2lnLTE=",
        },
        {"functionCall": {"name": "note", "args": {"city": "Rome"}}},
    ]
    fake.enqueue(
        wire.stream(
            [wire.chunk(thinking[:2]), wire.chunk(thinking[2:], finish="STOP", usage=wire.USAGE)]
        ),
        wire.text_stream(["Rain in both."]),
    )
    gemini = model(fake, retry)
    agent = Agent(
        model=gemini,
        tools=[note],
        db=SqliteDb(db_file=tmp_path / "s.db"),
        session_state={"cities": []},
    )
    [e async for e in await agent.arun("weather?", session_id="s", stream=True)]
    await gemini.aclose()
    assert agent.get_session_state("s") == {"cities": ["Oslo", "Rome"]}
    contents = fake.received[1].json["contents"]
    assert contents[1] == {
        "role": "model",
        "parts": [{"text": "The user wants two cities.", "thought": True}, *thinking[2:]],
    }
    assert contents[2] == {
        "role": "user",
        "parts": [
            {"functionResponse": {"name": "note", "response": {"result": "rain in Oslo"}}},
            {"functionResponse": {"name": "note", "response": {"result": "rain in Rome"}}},
        ],
    }


async def test_calls_without_ids_get_distinct_ones(fake: FakeServer, retry: RetryPolicy) -> None:
    call = {"functionCall": {"name": "weather", "args": {"city": "Oslo"}}}
    fake.enqueue(wire.response([call, call]))
    gemini = model(fake, retry)
    async with gemini:
        response = await gemini.request(HELLO, RequestInfo(tools=[WEATHER]))
    ids = [c.id or "" for c in response.tool_calls]
    assert len(set(ids)) == 2 and all(i.startswith(GENERATED_ID) for i in ids)
    assert response.reasoning == []  # no thoughts, no signatures: nothing to keep


async def test_usage_counts_thinking_as_output(fake: FakeServer, retry: RetryPolicy) -> None:
    usage = {"promptTokenCount": 10, "candidatesTokenCount": 5, "thoughtsTokenCount": 7}
    fake.enqueue(wire.response([{"text": "ok"}], usage=usage))
    gemini = model(fake, retry)
    async with gemini:
        response = await gemini.request(HELLO, RequestInfo())
    assert (response.usage.input_tokens, response.usage.output_tokens) == (10, 12)


async def test_rate_limit_waits_for_retry_info(
    fake: FakeServer, retry: RetryPolicy, sleeps: SleepRecorder
) -> None:
    """Google sends no Retry-After header; the wait is in the error's RetryInfo."""
    retry_info = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "7s"}
    fake.enqueue(
        wire.error(429, "RESOURCE_EXHAUSTED", "Quota exceeded.", details=[retry_info]),
        wire.response([{"text": "ok"}]),
    )
    gemini = model(fake, retry)
    async with gemini:
        assert (await gemini.request(HELLO, RequestInfo())).content == "ok"
    assert sleeps.delays == [7.0]


async def test_invalid_key_is_an_authentication_error(
    fake: FakeServer, retry: RetryPolicy, sleeps: SleepRecorder
) -> None:
    """The Gemini API refuses a bad key with 400 INVALID_ARGUMENT, not 401."""
    fake.enqueue(
        wire.error(400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.")
    )
    gemini = model(fake, retry)
    with pytest.raises(ModelAuthenticationError, match="HTTP 400: API key not valid") as caught:
        async with gemini:
            await gemini.request(HELLO, RequestInfo())
    assert KEY not in str(caught.value)
    assert sleeps.delays == []


async def test_context_length(fake: FakeServer, retry: RetryPolicy) -> None:
    message = (
        "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576)."
    )
    fake.enqueue(wire.error(400, "INVALID_ARGUMENT", message))
    gemini = model(fake, retry)
    with pytest.raises(ContextLengthExceededError, match="exceeds the maximum number of tokens"):
        async with gemini:
            await gemini.request(HELLO, RequestInfo())


async def test_blocked_prompt(fake: FakeServer, retry: RetryPolicy) -> None:
    fake.enqueue(Reply(json={"promptFeedback": {"blockReason": "SAFETY"}}))
    gemini = model(fake, retry)
    with pytest.raises(ModelError, match=r"the prompt was blocked \(SAFETY\)"):
        async with gemini:
            await gemini.request(HELLO, RequestInfo())


async def test_stream_without_finish_reason_is_malformed(
    fake: FakeServer, retry: RetryPolicy
) -> None:
    fake.enqueue(wire.text_stream(["partial"], end=False))
    with pytest.raises(MalformedResponseError, match=r"without its terminator .* after 1 delta"):
        await stream(model(fake, retry), HELLO)


async def test_connection_cut_mid_stream(
    fake: FakeServer, retry: RetryPolicy, sleeps: SleepRecorder
) -> None:
    fake.enqueue(
        wire.stream([wire.chunk([{"text": "one "}]), wire.chunk([{"text": "two"}])], cut=True)
    )
    gemini = model(fake, retry)
    received: list[Any] = []
    with pytest.raises(ModelConnectionError, match="while the answer streamed in") as caught:
        async with gemini:
            async for chunk in gemini.request_stream(HELLO, RequestInfo()):
                received.append(chunk)
    assert caught.value.deltas == len(received) == 2
    assert sleeps.delays == []


def test_settings_and_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigurationError, match="unknown settings temprature"):
        Gemini("gemini-x", temprature=0)
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.setenv("GOOGLE_API_KEY", "from-google-api-key")
    model = infer_model("gemini:gemini-2.0-flash")
    assert isinstance(model, Gemini)
    assert (model.name, model.api_key) == ("google:gemini-2.0-flash", "from-google-api-key")
    monkeypatch.setenv("GEMINI_API_KEY", "from-gemini-api-key")
    assert infer_model("google:gemini-2.0-flash").api_key == "from-gemini-api-key"  # type: ignore[attr-defined]
    vertex = infer_model("vertex:gemini-2.0-flash")
    assert isinstance(vertex, Gemini)
    assert (vertex.name, vertex.vertexai, vertex.api_key) == ("vertex:gemini-2.0-flash", True, None)


async def test_no_key_is_refused_before_any_request(
    fake: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    gemini = Gemini("gemini-x", base_url=fake.url)
    with pytest.raises(ModelAuthenticationError, match="set GEMINI_API_KEY"):
        await gemini.request(HELLO, RequestInfo())
    assert fake.received == []


async def test_vertex_without_usable_credentials(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "p")
    monkeypatch.setenv("GOOGLE_CLOUD_LOCATION", "us-central1")
    vertex = infer_model("vertex:gemini-2.5-flash")
    with allow_model_requests(True), pytest.raises(ModelAuthenticationError, match="vertex model"):
        await vertex.request(HELLO, RequestInfo())


class Verdict(BaseModel):
    ok: bool


async def test_a_typed_answer_is_asked_for_with_a_response_schema(
    fake: FakeServer, retry: RetryPolicy
) -> None:
    """No tools: Gemini's native JSON mode with the schema; the answer comes back typed."""
    fake.replies.append(wire.response([{"text": '{"ok": true}'}]))
    agent: Agent[Verdict] = Agent(model=model(fake, retry), output_schema=Verdict)
    assert (await agent.arun("is it fine?")).content == Verdict(ok=True)
    config = fake.received[0].json["generationConfig"]
    assert config["responseMimeType"] == "application/json"
    assert config["responseJsonSchema"] == Verdict.model_json_schema()


async def test_with_tools_a_typed_answer_is_the_final_answer_tool(
    fake: FakeServer, retry: RetryPolicy
) -> None:
    call = {"functionCall": {"name": "final_answer", "args": {"ok": False}}}
    fake.replies.append(wire.response([call]))
    agent: Agent[Verdict] = Agent(model=model(fake, retry), tools=[note], output_schema=Verdict)
    assert (await agent.arun("check")).content == Verdict(ok=False)
    body = fake.received[0].json
    names = [d["name"] for t in body["tools"] for d in t["functionDeclarations"]]
    assert names == ["note", "final_answer"]
    assert body["toolConfig"]["functionCallingConfig"]["mode"] == "ANY"
    assert "responseJsonSchema" not in body.get("generationConfig", {})
