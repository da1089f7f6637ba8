"""OpenAIResponses against a fake Responses API server, through the real SDK and HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from tests.models.fakes import FakeServer, Reply, SleepRecorder
from tests.models.fakes import openai_chat as errors
from tests.models.fakes import openai_responses as wire

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
from statewise.models.openai_responses import OpenAIResponses

pytestmark = pytest.mark.anyio

KEY = "sk-test-responses-secret"
WEATHER = ToolDefinition(
    name="weather",
    description="Weather for a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)
HISTORY = [
    Message(role="system", content="Be brief."),
    Message(role="user", content="Weather in Oslo?"),
    Message(
        role="assistant",
        content="Checking.",
        tool_calls=[ToolCall("weather", {"city": "Oslo"}, "call_1")],
    ),
    Message(role="tool", content="rain", tool_call_id="call_1"),
]


@pytest.fixture
async def model(fake: FakeServer, retry: RetryPolicy) -> AsyncIterator[OpenAIResponses]:
    async with OpenAIResponses(
        "gpt-test", base_url=f"{fake.url}/v1", api_key=KEY, retry=retry
    ) as m:
        yield m


async def test_text_answer_and_request_body(model: OpenAIResponses, fake: FakeServer) -> None:
    fake.enqueue(wire.response([wire.message_item("Rain.")]))
    response = await model.request(
        HISTORY, RequestInfo(tools=[WEATHER], settings={"max_tokens": 100})
    )
    assert response == ModelResponse(
        content="Rain.",
        usage=Usage(input_tokens=12, output_tokens=4, requests=1),
        model_name="gpt-test",
    )
    sent = fake.last
    assert (sent.method, sent.path) == ("POST", "/v1/responses")
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.json == {
        "model": "gpt-test",
        "max_output_tokens": 100,
        "instructions": "Be brief.",
        "input": [
            {"role": "user", "content": "Weather in Oslo?"},
            {"role": "assistant", "content": "Checking."},
            {
                "type": "function_call",
                "call_id": "call_1",
                "name": "weather",
                "arguments": '{"city": "Oslo"}',
            },
            {"type": "function_call_output", "call_id": "call_1", "output": "rain"},
        ],
        "tools": [
            {
                "type": "function",
                "name": "weather",
                "parameters": WEATHER.parameters,
                "strict": False,
                "description": "Weather for a city.",
            }
        ],
    }


async def test_parallel_function_calls(model: OpenAIResponses, fake: FakeServer) -> None:
    fake.enqueue(
        wire.response(
            [
                wire.call_item("call_a", "weather", '{"city": "Oslo"}'),
                wire.call_item("call_b", "weather", '{"city": '),
            ]
        )
    )
    response = await model.request(HISTORY[:2], RequestInfo(tools=[WEATHER]))
    good, bad = response.tool_calls
    assert good == ToolCall("weather", {"city": "Oslo"}, "call_a")
    assert (bad.id, bad.arguments) == ("call_b", {})
    assert bad.arguments_error is not None and "not valid JSON" in bad.arguments_error


async def test_stream_text_and_call_deltas(model: OpenAIResponses, fake: FakeServer) -> None:
    fake.enqueue(
        wire.stream(
            ["Let me ", "check."],
            [("call_a", "weather", ['{"city"', ': "Oslo"}']), ("call_b", "weather", ["{}"])],
        )
    )
    chunks = [c async for c in model.request_stream(HISTORY[:2], RequestInfo(tools=[WEATHER]))]
    assert chunks[:-1] == [
        TextDelta(content="Let me "),
        TextDelta(content="check."),
        ToolCallDelta(index=0, id="call_a", name="weather"),
        ToolCallDelta(index=0, arguments_delta='{"city"'),
        ToolCallDelta(index=0, arguments_delta=': "Oslo"}'),
        ToolCallDelta(index=1, id="call_b", name="weather"),
        ToolCallDelta(index=1, arguments_delta="{}"),
    ]
    assert chunks[-1] == ModelResponse(
        content="Let me check.",
        tool_calls=[
            ToolCall("weather", {"city": "Oslo"}, "call_a"),
            ToolCall("weather", {}, "call_b"),
        ],
        usage=Usage(input_tokens=8, output_tokens=6, requests=1),
        model_name="gpt-test",
    )
    assert fake.last.json["stream"] is True


async def test_stream_failed_event(model: OpenAIResponses, fake: FakeServer) -> None:
    fake.enqueue(wire.stream(["Hel"], fail="The server had an error"))
    with pytest.raises(
        ModelError, match="error event in the stream: server_error: The server had an error"
    ):
        [c async for c in model.request_stream(HISTORY[:2], RequestInfo())]


async def test_retry_then_success(
    model: OpenAIResponses, fake: FakeServer, sleeps: SleepRecorder
) -> None:
    fake.enqueue(
        errors.error(429, "slow down", headers={"retry-after": "0.25"}),
        errors.error(500, "oops", type="server_error"),
        wire.response([wire.message_item("ok")]),
    )
    assert (await model.request(HISTORY[:2], RequestInfo())).content == "ok"
    assert sleeps.delays == [0.25, 1.0]


async def test_typed_errors(model: OpenAIResponses, fake: FakeServer) -> None:
    fake.enqueue(errors.error(403, "Project does not have access"))
    with pytest.raises(
        ModelAuthenticationError, match="openai-responses model 'gpt-test': HTTP 403"
    ):
        await model.request(HISTORY[:2], RequestInfo())
    fake.enqueue(errors.error(400, "Input too long", code="context_length_exceeded"))
    with pytest.raises(ContextLengthExceededError):
        await model.request(HISTORY[:2], RequestInfo())
    fake.enqueue(*[errors.error(429, "slow down")] * 3)
    with pytest.raises(ModelRateLimitError):
        await model.request(HISTORY[:2], RequestInfo())


@pytest.mark.parametrize(
    "reply",
    [Reply(body=b"{truncated"), Reply(json={"object": "response", "status": "completed"})],
    ids=["not-json", "no-output"],
)
async def test_malformed_body(model: OpenAIResponses, fake: FakeServer, reply: Reply) -> None:
    fake.enqueue(reply)
    with pytest.raises(MalformedResponseError):
        await model.request(HISTORY[:2], RequestInfo())
