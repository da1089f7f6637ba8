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
from pathlib import Path
from typing import Any

import google.oauth2.credentials
import pytest
from tests.models.aimock import API_KEY, AimockServer, missing_reason
from tests.models.fakes import SleepRecorder

from statewise import Agent, RunContext
from statewise.db import SqliteDb
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
from statewise.models.azure import AzureOpenAIChat
from statewise.models.bedrock import Bedrock
from statewise.models.google import Gemini
from statewise.models.openai_chat import OpenAIChat
from statewise.models.openai_responses import OpenAIResponses
from statewise.run.events import ToolCallCompleted

pytestmark = [
    pytest.mark.anyio,
    # aimock ends Gemini tool-call answers with finishReason FUNCTION_CALL, which the
    # Gemini API does not have (it says STOP); google-genai warns and keeps the value.
    pytest.mark.filterwarnings("ignore:FUNCTION_CALL is not a valid FinishReason:UserWarning"),
]

WEATHER = ToolDefinition(
    name="weather",
    description="Weather for a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)
USAGE = {"prompt_tokens": 21, "completion_tokens": 8, "total_tokens": 29}
LONG = " ".join(f"word{n}" for n in range(60))  # about 20 stream chunks


def _start(check_keys: bool) -> Iterator[AimockServer]:
    reason = missing_reason()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"aimock must run in CI: {reason}")
        pytest.skip(reason)
    server = AimockServer(check_keys=check_keys)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def aimock_server() -> Iterator[AimockServer]:
    yield from _start(check_keys=True)


@pytest.fixture(scope="module")
def aimock_unkeyed_server() -> Iterator[AimockServer]:
    """For Bedrock: aimock's key check refuses the AWS SigV4 `Authorization` header."""
    yield from _start(check_keys=False)


@pytest.fixture
def aimock(request: pytest.FixtureRequest) -> Iterator[AimockServer]:
    """The keyed server, or the unkeyed one for a provider that signs with SigV4."""
    provider = request.getfixturevalue("provider") if "provider" in request.fixturenames else None
    name = "aimock_server" if provider is None or provider.keyed else "aimock_unkeyed_server"
    server: AimockServer = request.getfixturevalue(name)
    server.reset()
    with allow_model_requests(True):
        yield server


@dataclass(frozen=True)
class Provider:
    name: str
    make: Callable[..., SdkModel[Any]]
    keyed: bool = True
    """Whether aimock checks its key (not for SigV4-signed Bedrock)."""
    streams_text: bool = True
    """False for Bedrock: aimock 1.43 opens streamed text blocks with
    `contentBlockStart {"start": {}}`, which boto3 refuses; test_bedrock.py streams text
    from an in-repo fake instead."""
    malformed: tuple[str, str] = ("not JSON", "not server-sent events")
    """What a 200 with a broken body says: whole, streamed."""
    chaos_500: str = "HTTP 500: Chaos: request dropped"
    """What aimock's dropped request says (boto3 finds no message in aimock's body)."""


def _vertex(url: str, *, api_key: str, **kw: Any) -> SdkModel[Any]:
    """Vertex AI with a fixed OAuth token as its credentials, which aimock checks like a key."""
    return Gemini(
        "gemini-2.0-flash",
        vertexai=True,
        project="statewise-test",
        location="us-central1",
        credentials=google.oauth2.credentials.Credentials(token=api_key),  # type: ignore[no-untyped-call]
        base_url=url,
        api_version="v1",
        **kw,
    )


def _bedrock(url: str, *, api_key: str, **kw: Any) -> SdkModel[Any]:
    """SigV4 with made-up credentials against the unkeyed server; with a key other than
    the right one, against the keyed server, which refuses the signature with a 401."""
    return Bedrock(
        "us.anthropic.claude-sonnet-4-20250514-v1:0",  # reasoning-capable, as aimock checks
        base_url=url,
        region="us-east-1",
        aws_access_key_id="AKIDSTATEWISETEST",
        aws_secret_access_key=api_key,
        **kw,
    )


PROVIDERS = [
    Provider("openai-chat", lambda url, **kw: OpenAIChat("gpt-4o", base_url=f"{url}/v1", **kw)),
    Provider(
        "openai-responses",
        lambda url, **kw: OpenAIResponses("gpt-4o", base_url=f"{url}/v1", **kw),
    ),
    Provider("anthropic", lambda url, **kw: Claude("claude-mock", base_url=url, **kw)),
    Provider("azure", lambda url, **kw: AzureOpenAIChat("gpt-4o", base_url=url, **kw)),
    Provider(
        "gemini",
        lambda url, **kw: Gemini("gemini-2.0-flash", base_url=url, api_version="v1beta", **kw),
        malformed=("not JSON", "not JSON"),
    ),
    Provider("vertex", _vertex, malformed=("not JSON", "not JSON")),
    Provider(
        "bedrock",
        _bedrock,
        keyed=False,
        streams_text=False,
        malformed=("unexpected Converse response", "does not parse"),
        chaos_500="HTTP 500: \\(no message\\)",
    ),
]


@pytest.fixture(params=PROVIDERS, ids=[p.name for p in PROVIDERS])
def provider(request: pytest.FixtureRequest) -> Provider:
    value: Provider = request.param
    return value


NO_TEXT_STREAM = (
    "aimock 1.43 opens streamed Bedrock text blocks with contentBlockStart {'start': {}}, "
    "which boto3 refuses; test_bedrock.py streams this case from an in-repo fake"
)


def needs_streamed_text(provider: Provider, stream: bool) -> None:
    if stream and not provider.streams_text:
        pytest.skip(NO_TEXT_STREAM)


def answer(provider: Provider, stream: bool, text: str) -> dict[str, Any]:
    """A fixture response saying `text`: as text, or, where aimock cannot stream text to
    the provider, as the argument of a tool call (`said` reads either)."""
    if stream and not provider.streams_text:
        return {"toolCalls": [{"name": "weather", "arguments": {"city": text}}]}
    return {"content": text}


def said(response: ModelResponse) -> str | None:
    if response.tool_calls:
        return str(response.tool_calls[0].arguments["city"])
    return response.content


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


def noted_weather(city: str, run_context: RunContext) -> str:
    """Weather for a city (noted in the session's state)."""
    run_context.session_state["cities"].append(city)
    return f"rain in {city}"


# Answers ------------------------------------------------------------------------------


async def test_text_and_usage(
    provider: Provider, aimock: AimockServer, sleeps: SleepRecorder, stream: bool
) -> None:
    needs_streamed_text(provider, stream)
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
    needs_streamed_text(provider, stream)
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
    provider: Provider, aimock: AimockServer, sleeps: SleepRecorder, stream: bool, tmp_path: Path
) -> None:
    """A whole run: the tool call, the tool writing session state, its result sent back in
    the provider's format (which aimock parses to match `hasToolResult`), then the final
    answer; the state is in the database afterwards."""
    needs_streamed_text(provider, stream)
    text = prompt()
    aimock.add(
        {
            "match": {"userMessage": text, "hasToolResult": False},
            "response": {"toolCalls": [{"name": "noted_weather", "arguments": {"city": "Oslo"}}]},
        },
        {
            "match": {"userMessage": text, "hasToolResult": True},
            "response": {"content": "It rains in Oslo.", "usage": USAGE},
        },
    )
    model = model_for(provider, aimock, sleeps)
    db = SqliteDb(db_file=tmp_path / "runs.db")
    agent = Agent(model=model, tools=[noted_weather], db=db, session_state={"cities": []})
    if stream:
        events = [event async for event in await agent.arun(text, session_id="s", stream=True)]
        results = [e.result for e in events if isinstance(e, ToolCallCompleted)]
        assert results == ["rain in Oslo"]
    else:
        output = await agent.arun(text, session_id="s")
        assert output.content == "It rains in Oslo."
    await model.aclose()
    requests = [e for e in aimock.journal() if e["method"] == "POST"]
    assert len(requests) == 2
    assert "rain in Oslo" in str(requests[1]["body"])
    reopened = Agent(model="test", db=SqliteDb(db_file=tmp_path / "runs.db"))
    assert reopened.get_session_state("s") == {"cities": ["Oslo"]}


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


THINKING = [p for p in PROVIDERS if p.name in ("gemini", "vertex", "bedrock")]


@pytest.mark.parametrize("provider", THINKING, ids=[p.name for p in THINKING])
async def test_reasoning_is_read_and_the_loop_goes_on(
    provider: Provider, aimock: AimockServer, sleeps: SleepRecorder, stream: bool
) -> None:
    """aimock's reasoning as Gemini `thought` parts and Bedrock `reasoningContent` blocks:
    read into `Reasoning`, and the continuation that carries it back is accepted. (aimock
    1.43 streams Bedrock reasoning with a `contentBlockStart` boto3 refuses, and its
    journal drops thought parts: test_bedrock.py and test_google.py check what goes back.)"""
    if stream and provider.name == "bedrock":
        pytest.skip(NO_TEXT_STREAM)
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
    model = model_for(provider, aimock, sleeps)
    first, _ = await ask(model, text, stream=stream)
    assert [r.text for r in first.reasoning] == ["The user wants the weather in Oslo."]
    history = [
        Message(role="user", content=text),
        first.to_message(),
        Message(role="tool", content="rain in Oslo", tool_call_id=first.tool_calls[0].id),
    ]
    async with model:
        second = await model.request(history, RequestInfo(tools=[WEATHER]))
    assert second.content == "It rains in Oslo."


async def test_aimocks_streamed_bedrock_text_is_refused_clearly(
    aimock_unkeyed_server: AimockServer, sleeps: SleepRecorder
) -> None:
    """Why the Bedrock text-stream cases above skip: aimock 1.43 opens a text block with
    `contentBlockStart {"start": {}}` (Bedrock sends no start for text), which boto3
    refuses. We report that as a malformed answer; when aimock fixes it, this fails and
    the skips can go."""
    provider = next(p for p in PROVIDERS if p.name == "bedrock")
    text = prompt()
    aimock_unkeyed_server.reset()
    aimock_unkeyed_server.add({"match": {"userMessage": text}, "response": {"content": "hi"}})
    with (
        allow_model_requests(True),
        pytest.raises(MalformedResponseError, match="one and only one member set"),
    ):
        await ask(model_for(provider, aimock_unkeyed_server, sleeps), text, stream=True)
    assert sleeps.delays == []


# Faults -------------------------------------------------------------------------------


async def test_refused_key(
    provider: Provider, aimock_server: AimockServer, sleeps: SleepRecorder, stream: bool
) -> None:
    """Against the server that checks keys (which refuses Bedrock's SigV4 signature)."""
    model = model_for(provider, aimock_server, sleeps, api_key="not-the-key")
    with (
        allow_model_requests(True),
        pytest.raises(ModelAuthenticationError, match="HTTP 401") as caught,
    ):
        await ask(model, prompt(), stream=stream)
    assert caught.value.status_code == 401
    assert "not-the-key" not in str(caught.value)
    assert sleeps.delays == []


async def test_rate_limit_with_retry_after_is_retried(
    provider: Provider, aimock: AimockServer, sleeps: SleepRecorder, stream: bool
) -> None:
    text = prompt()
    aimock.add({"match": {"userMessage": text}, "response": answer(provider, stream, "waited")})
    aimock.error_once(429, "Rate limited", "rate_limit_error")
    response, _ = await ask(model_for(provider, aimock, sleeps), text, stream=stream)
    assert said(response) == "waited"
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
    aimock.add({"match": {"userMessage": text}, "response": answer(provider, stream, "lucky")})
    aimock.error_once(500, "Internal error", "server_error")
    response, _ = await ask(model_for(provider, aimock, sleeps), text, stream=stream)
    assert said(response) == "lucky"
    assert sleeps.delays == [0.5]


async def test_server_error_that_stays(
    provider: Provider, aimock: AimockServer, sleeps: SleepRecorder, stream: bool
) -> None:
    text = prompt()
    aimock.add(
        {"match": {"userMessage": text}, "response": {"content": "never"}, "chaos": {"dropRate": 1}}
    )
    with pytest.raises(ModelHTTPError, match=provider.chaos_500) as caught:
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
    expected = provider.malformed[1] if stream else provider.malformed[0]
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
    needs_streamed_text(provider, True)
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
