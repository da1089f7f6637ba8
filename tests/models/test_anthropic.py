"""Claude against a fake Messages API server, through the real SDK and HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from tests.models.fakes import FakeServer, Reply, SleepRecorder
from tests.models.fakes import anthropic as wire

from statewise.exceptions import (
    ContextLengthExceededError,
    MalformedResponseError,
    ModelAuthenticationError,
    ModelError,
    ModelRateLimitError,
)
from statewise.models import (
    Message,
    ModelResponse,
    RequestInfo,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolDefinition,
    Usage,
)
from statewise.models._retry import RetryPolicy
from statewise.models.anthropic import Claude

pytestmark = pytest.mark.anyio

KEY = "sk-ant-test-very-secret"
WEATHER = ToolDefinition(
    name="weather",
    description="Weather for a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
HISTORY = [
    Message(role="system", content="Be brief."),
    Message(role="user", content="Weather in Oslo and Rome?"),
    Message(
        role="assistant",
        content="Checking.",
        tool_calls=[
            ToolCall("weather", {"city": "Oslo"}, "toolu_1"),
            ToolCall("weather", {"city": "Rome"}, "toolu_2"),
        ],
    ),
    Message(role="tool", content="rain", tool_call_id="toolu_1"),
    Message(role="tool", content="sun", tool_call_id="toolu_2"),
    Message(role="user", content="And tomorrow?"),
]


@pytest.fixture
async def model(fake: FakeServer, retry: RetryPolicy) -> AsyncIterator[Claude]:
    async with Claude("claude-test", base_url=fake.url, api_key=KEY, retry=retry) as m:
        yield m


async def test_text_answer_and_request_body(model: Claude, fake: FakeServer) -> None:
    fake.enqueue(wire.message([wire.text("Rain, then sun.")], cache_read=5))
    response = await model.request(HISTORY, RequestInfo(tools=[WEATHER]))
    assert response == ModelResponse(
        content="Rain, then sun.",
        usage=Usage(input_tokens=25, output_tokens=9, requests=1),
        model_name="claude-test",
    )
    sent = fake.last
    assert (sent.method, sent.path) == ("POST", "/v1/messages")
    # the SDK decides the auth header: x-api-key in 0.x, a bearer token in 2.x
    assert KEY in (sent.headers.get("x-api-key"), sent.headers.get("authorization", "")[7:])
    assert "anthropic-version" in sent.headers
    assert sent.json == {
        "model": "claude-test",
        "max_tokens": 4096,
        "system": "Be brief.",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Weather in Oslo and Rome?"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Checking."},
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "weather",
                        "input": {"city": "Oslo"},
                    },
                    {
                        "type": "tool_use",
                        "id": "toolu_2",
                        "name": "weather",
                        "input": {"city": "Rome"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "rain"},
                    {"type": "tool_result", "tool_use_id": "toolu_2", "content": "sun"},
                    {"type": "text", "text": "And tomorrow?"},
                ],
            },
        ],
        "tools": [
            {
                "name": "weather",
                "input_schema": WEATHER.parameters,
                "description": "Weather for a city.",
            }
        ],
    }


async def test_parallel_tool_use(model: Claude, fake: FakeServer) -> None:
    fake.enqueue(
        wire.message(
            [
                wire.text("Let me look."),
                wire.tool_use("toolu_a", "weather", {"city": "Oslo"}),
                wire.tool_use("toolu_b", "weather", {"city": "Rome"}),
            ]
        )
    )
    response = await model.request(
        HISTORY[:2], RequestInfo(tools=[WEATHER], settings={"max_tokens": 50})
    )
    assert response.content == "Let me look."
    assert response.tool_calls == [
        ToolCall("weather", {"city": "Oslo"}, "toolu_a"),
        ToolCall("weather", {"city": "Rome"}, "toolu_b"),
    ]
    assert fake.last.json["max_tokens"] == 50


async def test_stream_text_and_tool_input_deltas(model: Claude, fake: FakeServer) -> None:
    fake.enqueue(
        wire.stream(
            [
                ("text", ["Let me ", "check."]),
                ("tool_use", ("toolu_a", "weather", ['{"city":', ' "Oslo"}'])),
                ("tool_use", ("toolu_b", "now", [])),
            ]
        )
    )
    chunks = [c async for c in model.request_stream(HISTORY[:2], RequestInfo(tools=[WEATHER]))]
    assert chunks[:-1] == [
        TextDelta(content="Let me "),
        TextDelta(content="check."),
        ToolCallDelta(index=0, id="toolu_a", name="weather"),
        ToolCallDelta(index=0, arguments_delta='{"city":'),
        ToolCallDelta(index=0, arguments_delta=' "Oslo"}'),
        ToolCallDelta(index=1, id="toolu_b", name="now"),
    ]
    assert chunks[-1] == ModelResponse(
        content="Let me check.",
        tool_calls=[
            ToolCall("weather", {"city": "Oslo"}, "toolu_a"),
            ToolCall("now", {}, "toolu_b"),
        ],
        usage=Usage(input_tokens=25, output_tokens=15, requests=1),
        model_name="claude-test",
    )
    assert fake.last.json["stream"] is True


async def test_stream_invalid_tool_json(model: Claude, fake: FakeServer) -> None:
    fake.enqueue(wire.stream([("tool_use", ("t", "weather", ['{"city": "Os']))]))
    chunks = [c async for c in model.request_stream(HISTORY[:2], RequestInfo())]
    final = chunks[-1]
    assert isinstance(final, ModelResponse)
    assert final.tool_calls[0].arguments == {}
    assert final.tool_calls[0].arguments_error is not None


async def test_stream_error_event(model: Claude, fake: FakeServer) -> None:
    fake.enqueue(
        wire.stream([("text", ["Hi"])], error={"type": "overloaded_error", "message": "Overloaded"})
    )
    with pytest.raises(ModelError, match="error event in the stream: overloaded_error: Overloaded"):
        [c async for c in model.request_stream(HISTORY[:2], RequestInfo())]


async def test_529_overloaded_retried_with_retry_after(
    model: Claude, fake: FakeServer, sleeps: SleepRecorder
) -> None:
    fake.enqueue(
        wire.error(529, "overloaded_error", "Overloaded", headers={"retry-after": "2"}),
        wire.error(429, "rate_limit_error", "Too many", headers={"retry-after-ms": "1500"}),
        wire.message([wire.text("ok")]),
    )
    assert (await model.request(HISTORY[:2], RequestInfo())).content == "ok"
    assert sleeps.delays == [2.0, 1.5]


async def test_rate_limit_exhausted(model: Claude, fake: FakeServer) -> None:
    fake.enqueue(*[wire.error(429, "rate_limit_error", "Too many requests")] * 3)
    with pytest.raises(ModelRateLimitError, match="anthropic model 'claude-test': HTTP 429"):
        await model.request(HISTORY[:2], RequestInfo())


async def test_auth_error(model: Claude, fake: FakeServer) -> None:
    fake.enqueue(wire.error(401, "authentication_error", "invalid x-api-key"))
    with pytest.raises(ModelAuthenticationError) as info:
        await model.request(HISTORY[:2], RequestInfo())
    assert str(info.value) == "anthropic model 'claude-test': HTTP 401: invalid x-api-key"
    assert len(fake.received) == 1


async def test_prompt_too_long(model: Claude, fake: FakeServer) -> None:
    fake.enqueue(
        wire.error(
            400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum"
        )
    )
    with pytest.raises(ContextLengthExceededError, match="prompt is too long"):
        await model.request(HISTORY[:2], RequestInfo())


@pytest.mark.parametrize(
    "reply",
    [
        Reply(body=b"not json at all"),
        Reply(json={"type": "completion", "completion": "hi"}),
        Reply(json={"type": "message", "content": [{"type": "text"}]}),
    ],
    ids=["not-json", "wrong-type", "text-block-without-text"],
)
async def test_malformed_body(model: Claude, fake: FakeServer, reply: Reply) -> None:
    fake.enqueue(reply)
    with pytest.raises(MalformedResponseError, match="claude-test"):
        await model.request(HISTORY[:2], RequestInfo())


async def test_tool_input_not_object(model: Claude, fake: FakeServer) -> None:
    fake.enqueue(wire.message([wire.tool_use("t", "weather", "Oslo")]))
    (call,) = (await model.request(HISTORY[:2], RequestInfo())).tool_calls
    assert call.arguments == {}
    assert call.arguments_error == 'tool input must be a JSON object, got "Oslo"'
