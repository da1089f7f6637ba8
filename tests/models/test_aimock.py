"""The three providers against `@copilotkit/aimock`, a mock LLM server we did not write.

Its Chat Completions, Responses and Messages endpoints build their own wire shapes from one
fixture pool, so these tests check our providers against someone else's reading of each
API: answers whole and streamed, tool calls (one, parallel, with text), usage, its
extended-thinking check, and its fault injection (a refused key, 429 with Retry-After,
500, malformed JSON, connections dropped before and during a stream).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from tests.models.aimock import API_KEY, AimockServer, missing_reason
from tests.models.fakes import SleepRecorder

from statewise import Agent
from statewise.exceptions import (
    MalformedResponseError,
    ModelAuthenticationError,
    ModelConnectionError,
    ModelHTTPError,
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
)
from statewise.models._guard import allow_model_requests
from statewise.models._retry import RetryPolicy
from statewise.models._sdk import SdkModel
from statewise.models.anthropic import Claude
from statewise.models.openai_chat import OpenAIChat
from statewise.models.openai_responses import OpenAIResponses
from statewise.run.events import ToolCallCompleted

pytestmark = pytest.mark.anyio

WEATHER = ToolDefinition(
    name="weather",
    description="Weather for a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)
USAGE = {"prompt_tokens": 21, "completion_tokens": 8, "total_tokens": 29}
LONG = " ".join(f"word{n}" for n in range(60))  # about 20 stream chunks


@pytest.fixture(scope="module")
def aimock_server() -> Iterator[AimockServer]:
    reason = missing_reason()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"aimock must run in CI: {reason}")
        pytest.skip(reason)
    server = AimockServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def aimock(aimock_server: AimockServer) -> Iterator[AimockServer]:
    aimock_server.reset()
    with allow_model_requests(True):
        yield aimock_server


@dataclass(frozen=True)
class Provider:
    name: str
    make: Callable[..., SdkModel[Any]]


PROVIDERS = [
    Provider("openai-chat", lambda url, **kw: OpenAIChat("gpt-4o", base_url=f"{url}/v1", **kw)),
    Provider(
        "openai-responses",
        lambda url, **kw: OpenAIResponses("gpt-4o", base_url=f"{url}/v1", **kw),
    ),
    Provider("anthropic", lambda url, **kw: Claude("claude-mock", base_url=url, **kw)),
]


@pytest.fixture(params=PROVIDERS, ids=[p.name for p in PROVIDERS])
def provider(request: pytest.FixtureRequest) -> Provider:
    value: Provider = request.param
    return value


@pytest.fixture(params=[False, True], ids=["whole", "streamed"])
def stream(request: pytest.FixtureRequest) -> bool:
    value: bool = request.param
    return value


def model_for(
    provider: Provider,
    aimock: AimockServer,
    sleeps: SleepRecorder,
    *,
    api_key: str = API_KEY,
    **settings: Any,
) -> SdkModel[Any]:
    retry = RetryPolicy(max_retries=2, initial_delay=0.5, jitter=0.0, sleep=sleeps)
    return provider.make(aimock.url, api_key=api_key, retry=retry, **settings)


def prompt() -> str:
    """A user message no other test uses, so fixtures match one test only."""
    return f"question {uuid.uuid4().hex}"


async def ask(
    model: SdkModel[Any], text: str, *, stream: bool, tools: bool = True
) -> tuple[ModelResponse, list[TextDelta | ToolCallDelta]]:
    messages = [Message(role="user", content=text)]
    info = RequestInfo(tools=[WEATHER] if tools else [])
    async with model:
        if not stream:
            return await model.request(messages, info), []
        deltas: list[TextDelta | ToolCallDelta] = []
        async for chunk in model.request_stream(messages, info):
            if isinstance(chunk, ModelResponse):
                return chunk, deltas
            deltas.append(chunk)
    raise AssertionError("the stream ended without a response")


def weather(city: str) -> str:
    """Weather for a city."""
    return f"rain in {city}"


# Answers ------------------------------------------------------------------------------


async def test_text_and_usage(
    provider: Provider, aimock: AimockServer, sleeps: SleepRecorder, stream: bool
) -> None:
    text = prompt()
    aimock.add({"match": {"userMessage": text}, "response": {"content": LONG, "usage": USAGE}})
    response, deltas = await ask(model_for(provider, aimock, sleeps), text, stream=stream)
    assert response.content == LONG
    assert response.tool_calls == []
    assert (response.usage.input_tokens, response.usage.output_tokens) == (21, 8)
    if stream:
        assert len(deltas) > 1
        assert "".join(d.content for d in deltas if isinstance(d, TextDelta)) == LONG


async def test_parallel_tool_calls_with_text(
    provider: Provider, aimock: AimockServer, sleeps: SleepRecorder, stream: bool
) -> None:
    text = prompt()
    calls = [
        {"name": "weather", "arguments": {"city": "Oslo"}},
        {"name": "weather", "arguments": {"city": "Rome"}},
    ]
    aimock.add(
        {"match": {"userMessage": text}, "response": {"content": "Checking.", "toolCalls": calls}}
    )
    response, _ = await ask(model_for(provider, aimock, sleeps), text, stream=stream)
    assert response.content == "Checking."
    assert [(c.name, c.arguments) for c in response.tool_calls] == [
        ("weather", {"city": "Oslo"}),
        ("weather", {"city": "Rome"}),
    ]
    assert all(c.id for c in response.tool_calls)
    assert len({c.id for c in response.tool_calls}) == 2


async def test_agent_tool_loop(
    provider: Provider, aimock: AimockServer, sleeps: SleepRecorder, stream: bool
) -> None:
    """A whole run: the tool call, our tool's result sent back in the provider's format
    (which aimock parses to match `hasToolResult`), then the final answer."""
    text = prompt()
    aimock.add(
        {
            "match": {"userMessage": text, "hasToolResult": False},
            "response": {"toolCalls": [{"name": "weather", "arguments": {"city": "Oslo"}}]},
        },
        {
            "match": {"userMessage": text, "hasToolResult": True},
            "response": {"content": "It rains in Oslo.", "usage": USAGE},
        },
    )
    model = model_for(provider, aimock, sleeps)
    agent = Agent(model=model, tools=[weather])
    if stream:
        events = [event async for event in await agent.arun(text, stream=True)]
        results = [e.result for e in events if isinstance(e, ToolCallCompleted)]
        assert results == ["rain in Oslo"]
    else:
        output = await agent.arun(text)
        assert output.content == "It rains in Oslo."
    await model.aclose()
    requests = [e for e in aimock.journal() if e["method"] == "POST"]
    assert len(requests) == 2
    assert "rain in Oslo" in str(requests[1]["body"])


async def test_claude_thinking_passes_aimocks_check(
    aimock: AimockServer, sleeps: SleepRecorder, stream: bool
) -> None:
    """aimock answers 400 when a tool-loop continuation with thinking enabled does not
    begin with the thinking block and its signature, as Anthropic does."""
    text = prompt()
    aimock.add(
        {
            "match": {"userMessage": text, "hasToolResult": False},
            "response": {
                "reasoning": "The user wants the weather in Oslo.",
                "toolCalls": [{"name": "weather", "arguments": {"city": "Oslo"}}],
            },
        },
        {
            "match": {"userMessage": text, "hasToolResult": True},
            "response": {"content": "It rains in Oslo."},
        },
    )
    model = model_for(
        PROVIDERS[2],
        aimock,
        sleeps,
        thinking={"type": "enabled", "budget_tokens": 1024},
        max_retries=0,
    )
    agent = Agent(model=model, tools=[weather])
    if stream:
        [event async for event in await agent.arun(text, stream=True)]
    else:
        assert (await agent.arun(text)).content == "It rains in Oslo."
    await model.aclose()
    second = [e for e in aimock.journal() if e["method"] == "POST"][1]
    assert second["response"]["status"] == 200
    # The check is live: the same continuation without the thinking block is refused.
    history = [
        Message(role="user", content=text),
        Message(role="assistant", tool_calls=[ToolCall("weather", {"city": "Oslo"}, "toolu_1")]),
        Message(role="tool", content="rain in Oslo", tool_call_id="toolu_1"),
    ]
    async with model:
        with pytest.raises(ModelHTTPError, match="must begin with a `thinking` block"):
            await model.request(history, RequestInfo(tools=[WEATHER]))


# Faults -------------------------------------------------------------------------------


async def test_refused_key(
    provider: Provider, aimock: AimockServer, sleeps: SleepRecorder, stream: bool
) -> None:
    model = model_for(provider, aimock, sleeps, api_key="not-the-key")
    with pytest.raises(ModelAuthenticationError, match="HTTP 401") as caught:
        await ask(model, prompt(), stream=stream)
    assert caught.value.status_code == 401
    assert "not-the-key" not in str(caught.value)
    assert sleeps.delays == []


async def test_rate_limit_with_retry_after_is_retried(
    provider: Provider, aimock: AimockServer, sleeps: SleepRecorder, stream: bool
) -> None:
    text = prompt()
    aimock.add({"match": {"userMessage": text}, "response": {"content": "after the wait"}})
    aimock.error_once(429, "Rate limited", "rate_limit_error")
    response, _ = await ask(model_for(provider, aimock, sleeps), text, stream=stream)
    assert response.content == "after the wait"
    assert sleeps.delays == [1.0]  # aimock's Retry-After: 1, not our own backoff


async def test_rate_limit_that_stays(
    provider: Provider, aimock: AimockServer, sleeps: SleepRecorder, stream: bool
) -> None:
    text = prompt()
    aimock.add(
        {
            "match": {"userMessage": text},
            "response": {"content": "never"},
            "chaos": {"rateLimitRate": 1},
        }
    )
    with pytest.raises(ModelRateLimitError, match="HTTP 429") as caught:
        await ask(model_for(provider, aimock, sleeps), text, stream=stream)
    assert caught.value.status_code == 429
    assert sleeps.delays == [1.0, 1.0]


async def test_server_error_is_retried(
    provider: Provider, aimock: AimockServer, sleeps: SleepRecorder, stream: bool
) -> None:
    text = prompt()
    aimock.add({"match": {"userMessage": text}, "response": {"content": "second time lucky"}})
    aimock.error_once(500, "Internal error", "server_error")
    response, _ = await ask(model_for(provider, aimock, sleeps), text, stream=stream)
    assert response.content == "second time lucky"
    assert sleeps.delays == [0.5]


async def test_server_error_that_stays(
    provider: Provider, aimock: AimockServer, sleeps: SleepRecorder, stream: bool
) -> None:
    text = prompt()
    aimock.add(
        {"match": {"userMessage": text}, "response": {"content": "never"}, "chaos": {"dropRate": 1}}
    )
    with pytest.raises(ModelHTTPError, match="HTTP 500: Chaos: request dropped") as caught:
        await ask(model_for(provider, aimock, sleeps), text, stream=stream)
    assert caught.value.status_code == 500
    assert sleeps.delays == [0.5, 1.0]


async def test_malformed_json(
    provider: Provider, aimock: AimockServer, sleeps: SleepRecorder, stream: bool
) -> None:
    text = prompt()
    aimock.add(
        {
            "match": {"userMessage": text},
            "response": {"content": "never"},
            "chaos": {"malformedRate": 1},
        }
    )
    expected = "not server-sent events" if stream else "not JSON"
    with pytest.raises(MalformedResponseError, match=expected):
        await ask(model_for(provider, aimock, sleeps), text, stream=stream)
    assert sleeps.delays == []


async def test_disconnect_before_the_answer(
    provider: Provider, aimock: AimockServer, sleeps: SleepRecorder, stream: bool
) -> None:
    text = prompt()
    aimock.add(
        {
            "match": {"userMessage": text},
            "response": {"content": "never"},
            "chaos": {"disconnectRate": 1},
        }
    )
    with pytest.raises(ModelConnectionError) as caught:
        await ask(model_for(provider, aimock, sleeps), text, stream=stream)
    assert caught.value.deltas == 0
    assert sleeps.delays == [0.5, 1.0]


async def test_disconnect_mid_stream(
    provider: Provider, aimock: AimockServer, sleeps: SleepRecorder
) -> None:
    text = prompt()
    aimock.add(
        {
            "match": {"userMessage": text},
            "response": {"content": LONG},
            "truncateAfterChunks": 10,
            "latency": 10,
        }
    )
    model = model_for(provider, aimock, sleeps)
    received: list[Any] = []
    with pytest.raises(ModelConnectionError, match="while the answer streamed in") as caught:
        async with model:
            messages = [Message(role="user", content=text)]
            async for chunk in model.request_stream(messages, RequestInfo()):
                received.append(chunk)
    assert received and all(isinstance(c, TextDelta) for c in received)
    assert caught.value.deltas == len(received)
    assert f"after {len(received)} delta" in str(caught.value)
    assert sleeps.delays == []  # part of the answer was out: no silent retry
