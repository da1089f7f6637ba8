"""Bedrock against an in-repo fake speaking Converse and ConverseStream's binary event
stream: what aimock cannot serve (streamed text, which it opens with a
`contentBlockStart {"start": {}}` boto3 refuses), and what it cannot produce (an error
event inside a stream, reasoning signatures, AWS-shaped error bodies)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from tests.models.fakes import FakeServer, SleepRecorder
from tests.models.fakes import bedrock as wire

from statewise import Agent, RunContext
from statewise.db import SqliteDb
from statewise.exceptions import (
    ConfigurationError,
    ContextLengthExceededError,
    MalformedResponseError,
    ModelConnectionError,
    ModelRateLimitError,
)
from statewise.models import (
    Message,
    ModelResponse,
    Reasoning,
    RequestInfo,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolDefinition,
    infer_model,
)
from statewise.models._guard import allow_model_requests
from statewise.models._retry import RetryPolicy
from statewise.models.bedrock import Bedrock
from statewise.run.events import ToolCallCompleted

pytestmark = pytest.mark.anyio

WEATHER = ToolDefinition(
    name="weather",
    description="Weather for a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)
SECRET = "bedrock-fake-secret"


def model(fake: FakeServer, retry: RetryPolicy, **settings: Any) -> Bedrock:
    return Bedrock(
        "anthropic.claude-3-5-sonnet",
        base_url=fake.url,
        region="us-east-1",
        aws_access_key_id="AKIDFAKE",
        aws_secret_access_key=SECRET,
        retry=retry,
        **settings,
    )


async def stream(
    bedrock: Bedrock, messages: list[Message], info: RequestInfo | None = None
) -> tuple[ModelResponse, list[TextDelta | ToolCallDelta]]:
    deltas: list[TextDelta | ToolCallDelta] = []
    async with bedrock:
        async for chunk in bedrock.request_stream(messages, info or RequestInfo()):
            if isinstance(chunk, ModelResponse):
                return chunk, deltas
            deltas.append(chunk)
    raise AssertionError("no response")


HELLO = [Message(role="system", content="Be brief."), Message(role="user", content="hi")]


async def test_streamed_text_usage_and_request(fake: FakeServer, retry: RetryPolicy) -> None:
    fake.enqueue(wire.stream([("text", ["Hel", "lo ", "there"])]))
    response, deltas = await stream(model(fake, retry, max_tokens=100, temperature=0), HELLO)
    assert [d.content for d in deltas if isinstance(d, TextDelta)] == ["Hel", "lo ", "there"]
    assert response.content == "Hello there"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (21, 8)
    sent = fake.last
    assert sent.path == "/model/anthropic.claude-3-5-sonnet/converse-stream"
    assert sent.headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDFAKE/")
    assert sent.json["system"] == [{"text": "Be brief."}]
    assert sent.json["messages"] == [{"role": "user", "content": [{"text": "hi"}]}]
    assert sent.json["inferenceConfig"] == {"maxTokens": 100, "temperature": 0}


async def test_streamed_parallel_tool_calls_with_text(fake: FakeServer, retry: RetryPolicy) -> None:
    fake.enqueue(
        wire.stream(
            [
                ("text", ["Checking."]),
                ("tool", ("t1", "weather", ['{"city":', '"Oslo"}'])),
                ("tool", ("t2", "weather", ['{"city":"Rome"}'])),
            ]
        )
    )
    response, _ = await stream(model(fake, retry), HELLO, RequestInfo(tools=[WEATHER]))
    assert response.content == "Checking."
    assert response.tool_calls == [
        ToolCall("weather", {"city": "Oslo"}, "t1"),
        ToolCall("weather", {"city": "Rome"}, "t2"),
    ]
    spec = fake.last.json["toolConfig"]["tools"][0]["toolSpec"]
    assert spec == {
        "name": "weather",
        "description": "Weather for a city.",
        "inputSchema": {"json": WEATHER.parameters},
    }


def note(city: str, run_context: RunContext) -> str:
    """Weather for a city (noted in state)."""
    run_context.session_state["cities"].append(city)
    return f"rain in {city}"


async def test_streamed_agent_loop_writes_state(
    fake: FakeServer, retry: RetryPolicy, tmp_path: Path
) -> None:
    fake.enqueue(
        wire.stream(
            [
                ("tool", ("t1", "note", ['{"city":"Oslo"}'])),
                ("tool", ("t2", "note", ['{"city":"Rome"}'])),
            ]
        ),
        wire.stream([("text", ["It rains ", "in both."])]),
    )
    bedrock = model(fake, retry)
    agent = Agent(
        model=bedrock,
        tools=[note],
        db=SqliteDb(db_file=tmp_path / "s.db"),
        session_state={"cities": []},
    )
    events = [e async for e in await agent.arun("weather?", session_id="s", stream=True)]
    await bedrock.aclose()
    assert [e.result for e in events if isinstance(e, ToolCallCompleted)] == [
        "rain in Oslo",
        "rain in Rome",
    ]
    assert agent.get_session_state("s") == {"cities": ["Oslo", "Rome"]}
    second = fake.received[1].json["messages"]
    assert second[1] == {
        "role": "assistant",
        "content": [
            {"toolUse": {"toolUseId": "t1", "name": "note", "input": {"city": "Oslo"}}},
            {"toolUse": {"toolUseId": "t2", "name": "note", "input": {"city": "Rome"}}},
        ],
    }
    assert second[2] == {  # both results in one user turn
        "role": "user",
        "content": [
            {"toolResult": {"toolUseId": "t1", "content": [{"text": "rain in Oslo"}]}},
            {"toolResult": {"toolUseId": "t2", "content": [{"text": "rain in Rome"}]}},
        ],
    }


async def test_reasoning_is_kept_and_sent_back_first(fake: FakeServer, retry: RetryPolicy) -> None:
    fake.enqueue(
        wire.stream(
            [
                ("reasoning", (["The user ", "asks."], "sig-123")),
                ("tool", ("t1", "weather", ['{"city":"Oslo"}'])),
            ]
        ),
        wire.converse([{"text": "Rain."}]),
    )
    bedrock = model(fake, retry)
    response, _ = await stream(bedrock, HELLO, RequestInfo(tools=[WEATHER]))
    assert response.reasoning == [
        Reasoning(
            provider="bedrock",
            data={"reasoningText": {"text": "The user asks.", "signature": "sig-123"}},
            text="The user asks.",
        )
    ]
    history = [
        *HELLO,
        response.to_message(),
        Message(role="tool", content="rain", tool_call_id="t1"),
    ]
    async with bedrock:
        await bedrock.request(history, RequestInfo(tools=[WEATHER]))
    assistant = fake.last.json["messages"][1]["content"]
    assert assistant[0] == {
        "reasoningContent": {"reasoningText": {"text": "The user asks.", "signature": "sig-123"}}
    }
    assert "toolUse" in assistant[1]


async def test_redacted_reasoning_round_trips_as_bytes(
    fake: FakeServer, retry: RetryPolicy
) -> None:
    fake.enqueue(
        wire.converse([{"reasoningContent": {"redactedContent": "AAEC"}}, {"text": "Done."}]),
        wire.converse([{"text": "Again."}]),
    )
    bedrock = model(fake, retry)
    async with bedrock:
        first = await bedrock.request(HELLO, RequestInfo())
        assert first.reasoning[0].data == {"redactedContent": "AAEC"}  # base64 in history
        json.dumps(first.to_message().to_dict())
        await bedrock.request([*HELLO, first.to_message()], RequestInfo())
    sent = fake.last.json["messages"][1]["content"][0]
    assert sent == {"reasoningContent": {"redactedContent": "AAEC"}}


async def test_connection_cut_mid_stream(
    fake: FakeServer, retry: RetryPolicy, sleeps: SleepRecorder
) -> None:
    fake.enqueue(wire.stream([("text", ["one ", "two ", "three"])], end=False, cut=True))
    bedrock = model(fake, retry)
    received: list[Any] = []
    with pytest.raises(ModelConnectionError, match="while the answer streamed in") as caught:
        async with bedrock:
            async for chunk in bedrock.request_stream(HELLO, RequestInfo()):
                received.append(chunk)
    assert len(received) == 3
    assert caught.value.deltas == 3
    assert sleeps.delays == []
    assert len(fake.received) == 1


async def test_stream_without_metadata_is_malformed(fake: FakeServer, retry: RetryPolicy) -> None:
    fake.enqueue(wire.stream([("text", ["partial"])], end=False))
    with pytest.raises(
        MalformedResponseError, match=r"without its terminator \(metadata\), after 1"
    ):
        await stream(model(fake, retry), HELLO)


async def test_throttling_event_before_any_delta_is_retried(
    fake: FakeServer, retry: RetryPolicy, sleeps: SleepRecorder
) -> None:
    throttled = wire.exception("throttlingException", "Too many requests, please wait.")
    fake.enqueue(
        wire.stream([], end=False, after=[throttled]),
        wire.stream([("text", ["fine"])]),
    )
    response, _ = await stream(model(fake, retry), HELLO)
    assert response.content == "fine"
    assert sleeps.delays == [0.5]


async def test_throttling_event_after_deltas_is_raised_with_the_count(
    fake: FakeServer, retry: RetryPolicy, sleeps: SleepRecorder
) -> None:
    throttled = wire.exception("throttlingException", "Too many requests, please wait.")
    fake.enqueue(wire.stream([("text", ["a", "b"])], end=False, after=[throttled]))
    with pytest.raises(
        ModelRateLimitError, match="error event in the stream: Too many requests"
    ) as caught:
        await stream(model(fake, retry), HELLO)
    assert "after 2 deltas" in str(caught.value)
    assert caught.value.status_code == 429
    assert sleeps.delays == []


async def test_429_honours_retry_after(
    fake: FakeServer, retry: RetryPolicy, sleeps: SleepRecorder
) -> None:
    fake.enqueue(
        wire.error(429, "ThrottlingException", "Rate exceeded", headers={"Retry-After": "2"}),
        wire.converse([{"text": "ok"}]),
    )
    bedrock = model(fake, retry)
    async with bedrock:
        assert (await bedrock.request(HELLO, RequestInfo())).content == "ok"
    assert sleeps.delays == [2.0]


async def test_context_length(fake: FakeServer, retry: RetryPolicy, sleeps: SleepRecorder) -> None:
    fake.enqueue(wire.error(400, "ValidationException", "Input is too long for requested model."))
    bedrock = model(fake, retry)
    with pytest.raises(ContextLengthExceededError, match="HTTP 400: Input is too long") as caught:
        async with bedrock:
            await bedrock.request(HELLO, RequestInfo())
    assert "(ValidationException)" in str(caught.value)
    assert SECRET not in str(caught.value)
    assert sleeps.delays == []


def test_unknown_setting_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="unknown settings temprature"):
        Bedrock("m", temprature=0)


async def test_api_key_needs_https(fake: FakeServer) -> None:
    """boto3 sends a Bedrock API key only over HTTPS; pointing one at http:// is a
    configuration error, not a malformed answer."""
    bedrock = Bedrock("m", base_url=fake.url, region="us-east-1", api_key="bedrock-api-key")
    with pytest.raises(ConfigurationError, match="HTTPS"):
        async with bedrock:
            await bedrock.request(HELLO, RequestInfo())
    assert fake.received == []


async def test_no_region_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    bedrock = infer_model("bedrock:amazon.nova-pro-v1:0")
    assert isinstance(bedrock, Bedrock) and bedrock.id == "amazon.nova-pro-v1:0"
    with allow_model_requests(True), pytest.raises(ConfigurationError, match="set AWS_REGION"):
        await bedrock.request(HELLO, RequestInfo())


class Verdict(BaseModel):
    ok: bool


async def test_a_typed_answer_is_the_final_answer_tool_it_must_call(
    fake: FakeServer, retry: RetryPolicy
) -> None:
    fake.replies.append(
        wire.converse(
            [{"toolUse": {"toolUseId": "t1", "name": "final_answer", "input": {"ok": True}}}]
        )
    )
    agent: Agent[Verdict] = Agent(model=model(fake, retry), output_schema=Verdict)
    assert (await agent.arun("is it fine?")).content == Verdict(ok=True)
    config = fake.received[0].json["toolConfig"]
    assert config["toolChoice"] == {"any": {}}
    [tool] = config["tools"]
    spec = tool["toolSpec"]
    assert spec["name"] == "final_answer"
    assert spec["inputSchema"]["json"] == Verdict.model_json_schema()
