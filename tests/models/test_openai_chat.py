"""OpenAIChat against a fake Chat Completions server, through the real SDK and HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from tests.models.fakes import FakeServer, Reply, SleepRecorder
from tests.models.fakes import openai_chat as wire

from statewise.exceptions import (
    ContextLengthExceededError,
    MalformedResponseError,
    ModelAuthenticationError,
    ModelHTTPError,
    ModelRateLimitError,
    ModelRequestsDisabledError,
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
from statewise.models.openai_chat import OpenAIChat

pytestmark = pytest.mark.anyio

KEY = "sk-test-very-secret-key"
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
        content=None,
        tool_calls=[
            ToolCall("weather", {"city": "Oslo"}, "call_1"),
            ToolCall("weather", {"city": "Rome"}, "call_2"),
        ],
    ),
    Message(role="tool", content="rain", tool_call_id="call_1", name="weather"),
    Message(role="tool", content="sun", tool_call_id="call_2", name="weather"),
]


@pytest.fixture
async def model(fake: FakeServer, retry: RetryPolicy) -> AsyncIterator[OpenAIChat]:
    async with OpenAIChat(
        "gpt-test", base_url=f"{fake.url}/v1", api_key=KEY, retry=retry, temperature=0
    ) as m:
        yield m


async def test_text_answer_and_request_body(model: OpenAIChat, fake: FakeServer) -> None:
    fake.enqueue(wire.completion("It rains in Oslo, sun in Rome."))
    response = await model.request(HISTORY, RequestInfo(tools=[WEATHER]))
    assert response == ModelResponse(
        content="It rains in Oslo, sun in Rome.",
        usage=Usage(input_tokens=11, output_tokens=7, requests=1),
        model_name="gpt-test",
    )
    sent = fake.last
    assert (sent.method, sent.path) == ("POST", "/v1/chat/completions")
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.json == {
        "model": "gpt-test",
        "temperature": 0,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather in Oslo and Rome?"},
            {
                "role": "assistant",
                "content": "",  # never null: llama.cpp answers 500
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "weather", "arguments": '{"city": "Oslo"}'},
                    },
                    {
                        "id": "call_2",
                        "type": "function",
                        "function": {"name": "weather", "arguments": '{"city": "Rome"}'},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "rain"},
            {"role": "tool", "tool_call_id": "call_2", "content": "sun"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "weather",
                    "parameters": WEATHER.parameters,
                    "description": "Weather for a city.",
                },
            }
        ],
    }


async def test_parallel_tool_calls(model: OpenAIChat, fake: FakeServer) -> None:
    fake.enqueue(
        wire.completion(
            None,
            [
                ("call_a", "weather", '{"city": "Oslo"}'),
                ("call_b", "weather", '{"city": "Rome"}'),
            ],
        )
    )
    response = await model.request(HISTORY[:2], RequestInfo(tools=[WEATHER]))
    assert response.content is None
    assert response.tool_calls == [
        ToolCall("weather", {"city": "Oslo"}, "call_a"),
        ToolCall("weather", {"city": "Rome"}, "call_b"),
    ]


async def test_invalid_tool_json_is_reported_not_raised(
    model: OpenAIChat, fake: FakeServer
) -> None:
    fake.enqueue(wire.completion(None, [("c", "weather", '{"city": "Os'), ("d", "weather", "[1]")]))
    response = await model.request(HISTORY[:2], RequestInfo(tools=[WEATHER]))
    bad, not_object = response.tool_calls
    assert (bad.name, bad.id, bad.arguments) == ("weather", "c", {})
    assert bad.arguments_error is not None and "not valid JSON" in bad.arguments_error
    assert not_object.arguments_error is not None and "JSON object" in not_object.arguments_error


async def test_settings_per_request_and_unknown_ones_in_body(
    model: OpenAIChat, fake: FakeServer
) -> None:
    fake.enqueue(wire.completion("ok"))
    await model.request(
        HISTORY[:2], RequestInfo(settings={"temperature": 0.5, "max_tokens": 9, "top_k": 3})
    )
    body = fake.last.json
    assert (body["temperature"], body["max_tokens"], body["top_k"]) == (0.5, 9, 3)


async def test_stream_text_and_usage(model: OpenAIChat, fake: FakeServer) -> None:
    fake.enqueue(wire.stream(["Hel", "lo"], usage=(5, 3)))
    chunks = [c async for c in model.request_stream(HISTORY[:2], RequestInfo())]
    assert chunks == [
        TextDelta(content="Hel"),
        TextDelta(content="lo"),
        ModelResponse(
            content="Hello",
            usage=Usage(input_tokens=5, output_tokens=3, requests=1),
            model_name="gpt-test",
        ),
    ]
    assert fake.last.json["stream"] is True
    assert fake.last.json["stream_options"] == {"include_usage": True}


async def test_stream_parallel_tool_call_argument_deltas(
    model: OpenAIChat, fake: FakeServer
) -> None:
    fake.enqueue(
        wire.stream(
            ["Checking."],
            [("call_a", "weather", ['{"ci', 'ty": "Oslo"}']), ("call_b", "weather", ["{}"])],
        )
    )
    chunks = [c async for c in model.request_stream(HISTORY[:2], RequestInfo(tools=[WEATHER]))]
    assert chunks[:-1] == [
        TextDelta(content="Checking."),
        ToolCallDelta(index=0, id="call_a", name="weather", arguments_delta=""),
        ToolCallDelta(index=0, arguments_delta='{"ci'),
        ToolCallDelta(index=0, arguments_delta='ty": "Oslo"}'),
        ToolCallDelta(index=1, id="call_b", name="weather", arguments_delta=""),
        ToolCallDelta(index=1, arguments_delta="{}"),
    ]
    final = chunks[-1]
    assert isinstance(final, ModelResponse)
    assert final.content == "Checking."
    assert final.tool_calls == [
        ToolCall("weather", {"city": "Oslo"}, "call_a"),
        ToolCall("weather", {}, "call_b"),
    ]


async def test_stream_invalid_tool_json(model: OpenAIChat, fake: FakeServer) -> None:
    fake.enqueue(wire.stream([], [("c", "weather", ['{"city": '])]))
    chunks = [c async for c in model.request_stream(HISTORY[:2], RequestInfo())]
    final = chunks[-1]
    assert isinstance(final, ModelResponse)
    assert final.tool_calls[0].arguments == {}
    assert final.tool_calls[0].arguments_error is not None


async def test_retry_after_429_then_success(
    model: OpenAIChat, fake: FakeServer, sleeps: SleepRecorder
) -> None:
    fake.enqueue(
        wire.error(
            429, "Rate limit reached", type="rate_limit_exceeded", headers={"Retry-After": "3"}
        ),
        wire.completion("finally"),
    )
    response = await model.request(HISTORY[:2], RequestInfo())
    assert response.content == "finally"
    assert sleeps.delays == [3.0]
    assert len(fake.received) == 2


async def test_500s_retry_with_backoff_then_success(
    model: OpenAIChat, fake: FakeServer, sleeps: SleepRecorder
) -> None:
    fake.enqueue(
        wire.error(500, "boom", type="server_error"),
        wire.error(503, "busy", type="server_error"),
        wire.completion("ok"),
    )
    assert (await model.request(HISTORY[:2], RequestInfo())).content == "ok"
    assert sleeps.delays == [0.5, 1.0]


async def test_stream_retries_before_first_chunk(
    model: OpenAIChat, fake: FakeServer, sleeps: SleepRecorder
) -> None:
    fake.enqueue(wire.error(502, "bad gateway", type="server_error"), wire.stream(["ok"]))
    chunks = [c async for c in model.request_stream(HISTORY[:2], RequestInfo())]
    assert chunks[0] == TextDelta(content="ok")
    assert sleeps.delays == [0.5]


async def test_rate_limit_exhausted(model: OpenAIChat, fake: FakeServer) -> None:
    fake.enqueue(*[wire.error(429, "Slow down", type="rate_limit_exceeded")] * 3)
    with pytest.raises(ModelRateLimitError) as info:
        await model.request(HISTORY[:2], RequestInfo())
    assert info.value.status_code == 429
    assert str(info.value) == (
        "openai model 'gpt-test': HTTP 429: Slow down (still rate limited after retries)"
    )
    assert len(fake.received) == 3


async def test_auth_error_is_not_retried_and_hides_key(model: OpenAIChat, fake: FakeServer) -> None:
    fake.enqueue(wire.error(401, f"Incorrect API key provided: {KEY}", code="invalid_api_key"))
    with pytest.raises(ModelAuthenticationError) as info:
        await model.request(HISTORY[:2], RequestInfo())
    assert str(info.value) == "openai model 'gpt-test': HTTP 401: Incorrect API key provided: ***"
    assert KEY not in str(info.value)
    assert len(fake.received) == 1


async def test_context_length(model: OpenAIChat, fake: FakeServer) -> None:
    fake.enqueue(
        wire.error(
            400,
            "This model's maximum context length is 128000 tokens.",
            code="context_length_exceeded",
        )
    )
    with pytest.raises(ContextLengthExceededError, match="maximum context length"):
        await model.request(HISTORY[:2], RequestInfo())


async def test_other_client_error(model: OpenAIChat, fake: FakeServer) -> None:
    fake.enqueue(wire.error(404, "The model `nope` does not exist", code="model_not_found"))
    with pytest.raises(ModelHTTPError) as info:
        await model.request(HISTORY[:2], RequestInfo())
    assert type(info.value) is ModelHTTPError
    assert info.value.status_code == 404


@pytest.mark.parametrize(
    "reply",
    [
        Reply(body=b"<html>gateway</html>"),
        Reply(json={"object": "chat.completion", "choices": []}),
        Reply(json={"choices": [{"message": {"content": 42}}]}),
    ],
    ids=["not-json", "no-choices", "content-not-string"],
)
async def test_malformed_body(model: OpenAIChat, fake: FakeServer, reply: Reply) -> None:
    fake.enqueue(reply)
    with pytest.raises(MalformedResponseError, match="gpt-test"):
        await model.request(HISTORY[:2], RequestInfo())


async def test_requests_disabled_before_any_io(fake: FakeServer) -> None:
    import statewise.models

    statewise.models.ALLOW_MODEL_REQUESTS = False
    model = OpenAIChat("gpt-test", base_url=fake.url, api_key=KEY)
    with pytest.raises(ModelRequestsDisabledError, match="openai:gpt-test"):
        await model.request(HISTORY[:2], RequestInfo())
    with pytest.raises(ModelRequestsDisabledError):
        [c async for c in model.request_stream(HISTORY[:2], RequestInfo())]
    assert fake.received == []


async def test_refusal_becomes_content(model: OpenAIChat, fake: FakeServer) -> None:
    reply = wire.completion(None)
    reply.json["choices"][0]["message"]["refusal"] = "I can't help with that."
    fake.enqueue(reply)
    response = await model.request(HISTORY[:2], RequestInfo())
    assert response.content == "I can't help with that."
