"""What independent servers showed the providers getting wrong, pinned on the fake servers.

1. A stream answered with 200 and a body that is not SSE, or one that ends without its
   terminator, is a `MalformedResponseError` (it used to finish with no content).
2. Error events inside a stream map to the typed errors of HTTP errors, and are retried
   while nothing has reached the caller.
3. A connection cut mid-stream is a `ModelConnectionError` saying whether deltas arrived.
4. Assistant turns with tool calls never go out with `"content": null`.
5. Thinking blocks and reasoning items are kept in the history and sent back.
6. A model's `tool_choice` applies to the first step only; per step, set it explicitly.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from tests.models.fakes import FakeServer, Reply, SleepRecorder
from tests.models.fakes import anthropic as claude_wire
from tests.models.fakes import openai_chat as chat_wire
from tests.models.fakes import openai_responses as responses_wire
from tests.models.fakes.server import sse_event

from statewise import Agent
from statewise.exceptions import (
    MalformedResponseError,
    ModelConnectionError,
    ModelRateLimitError,
)
from statewise.models import (
    Message,
    ModelResponse,
    Reasoning,
    RequestInfo,
    StreamChunk,
    ToolCall,
    ToolDefinition,
)
from statewise.models._errors import SdkErrors, classify, translate
from statewise.models._retry import RetryPolicy
from statewise.models._sdk import SdkModel
from statewise.models.anthropic import ANTHROPIC_ERRORS, Claude
from statewise.models.openai_chat import OPENAI_ERRORS, OpenAIChat
from statewise.models.openai_responses import OpenAIResponses

pytestmark = pytest.mark.anyio

USER = [Message(role="user", content="hi")]
WEATHER = ToolDefinition(
    name="weather",
    description="Weather for a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)


@dataclass(frozen=True)
class Provider:
    """One provider and the fake replies of its wire format."""

    name: str
    make: Callable[[str, RetryPolicy], SdkModel[Any]]
    text_stream: Callable[[list[str]], Reply]
    tool_stream: Callable[[], Reply]
    complete: Callable[[str], Reply]


PROVIDERS = [
    Provider(
        "openai-chat",
        lambda url, retry: OpenAIChat("m", base_url=url, api_key="k", retry=retry),
        lambda pieces: chat_wire.stream(pieces),
        lambda: chat_wire.stream([], [("call_1", "weather", ['{"city": "Oslo"}'])]),
        lambda text: chat_wire.completion(text),
    ),
    Provider(
        "openai-responses",
        lambda url, retry: OpenAIResponses("m", base_url=url, api_key="k", retry=retry),
        lambda pieces: responses_wire.stream(pieces),
        lambda: responses_wire.stream([], [("call_1", "weather", ['{"city": "Oslo"}'])]),
        lambda text: responses_wire.response([responses_wire.message_item(text)]),
    ),
    Provider(
        "anthropic",
        lambda url, retry: Claude("m", base_url=url, api_key="k", retry=retry),
        lambda pieces: claude_wire.stream([("text", pieces)]),
        lambda: claude_wire.stream([("tool_use", ("toolu_1", "weather", ['{"city": "Oslo"}']))]),
        lambda text: claude_wire.message([claude_wire.text(text)]),
    ),
]


@pytest.fixture(params=PROVIDERS, ids=[p.name for p in PROVIDERS])
def provider(request: pytest.FixtureRequest) -> Provider:
    value: Provider = request.param
    return value


async def collect(model: SdkModel[Any], info: RequestInfo | None = None) -> list[StreamChunk]:
    async with model:
        return [c async for c in model.request_stream(USER, info or RequestInfo())]


def final(chunks: list[StreamChunk]) -> ModelResponse:
    last = chunks[-1]
    assert isinstance(last, ModelResponse)
    return last


def body(reply: Reply) -> list[str]:
    assert reply.sse is not None
    return [e for e in reply.sse if isinstance(e, str)]


# 1. A stream must be SSE and must end with its terminator --------------------------------


async def test_stream_answered_with_a_json_body_is_malformed(
    provider: Provider, fake: FakeServer, retry: RetryPolicy
) -> None:
    fake.enqueue(provider.complete("a whole answer, not a stream"))
    with pytest.raises(MalformedResponseError, match="not server-sent events") as caught:
        await collect(provider.make(fake.url, retry))
    assert "application/json" in str(caught.value)
    assert len(fake.received) == 1


@pytest.mark.parametrize("tools", [False, True], ids=["text", "tool-call"])
async def test_stream_without_its_terminator_is_malformed(
    provider: Provider, fake: FakeServer, retry: RetryPolicy, tools: bool
) -> None:
    reply = provider.tool_stream() if tools else provider.text_stream(["Hel", "lo"])
    terminator = body(reply)[-1]
    assert any(word in terminator for word in ("[DONE]", "message_stop", "response.completed"))
    fake.enqueue(Reply(sse=body(reply)[:-1]))
    with pytest.raises(MalformedResponseError, match="ended without its terminator"):
        await collect(provider.make(fake.url, retry))


async def test_terminated_stream_still_completes(
    provider: Provider, fake: FakeServer, retry: RetryPolicy
) -> None:
    fake.enqueue(provider.text_stream(["Hel", "lo"]))
    assert final(await collect(provider.make(fake.url, retry))).content == "Hello"


# 2. Error events inside a stream -------------------------------------------------------


def claude_rate_limited() -> Reply:
    error = {"type": "rate_limit_error", "message": "Number of requests exceeded"}
    return Reply(sse=[sse_event({"type": "error", "error": error}, "error")])


def responses_rate_limited(pieces: list[str]) -> Reply:
    return responses_wire.stream(pieces, fail="Rate limit reached", fail_code="rate_limit_exceeded")


async def test_messages_rate_limit_event_is_retried_before_any_delta(
    fake: FakeServer, retry: RetryPolicy, sleeps: SleepRecorder
) -> None:
    fake.enqueue(claude_rate_limited(), claude_wire.stream([("text", ["ok"])]))
    chunks = await collect(Claude("m", base_url=fake.url, api_key="k", retry=retry))
    assert final(chunks).content == "ok"
    assert (len(fake.received), sleeps.delays) == (2, [0.5])


async def test_messages_rate_limit_event_is_a_rate_limit_error(
    fake: FakeServer, retry: RetryPolicy, sleeps: SleepRecorder
) -> None:
    fake.enqueue(*[claude_rate_limited() for _ in range(3)])
    with pytest.raises(ModelRateLimitError, match="rate_limit_error") as caught:
        await collect(Claude("m", base_url=fake.url, api_key="k", retry=retry))
    assert caught.value.status_code == 429
    assert "before any delta" in str(caught.value)
    assert sleeps.delays == [0.5, 1.0]


async def test_error_event_after_deltas_is_not_retried(
    fake: FakeServer, retry: RetryPolicy
) -> None:
    error = {"type": "rate_limit_error", "message": "slow down"}
    fake.enqueue(claude_wire.stream([("text", ["Hel", "lo"])], error=error))
    with pytest.raises(ModelRateLimitError, match="after 2 deltas had reached the caller"):
        await collect(Claude("m", base_url=fake.url, api_key="k", retry=retry))
    assert len(fake.received) == 1


async def test_responses_failed_rate_limit_is_retried_then_typed(
    fake: FakeServer, retry: RetryPolicy, sleeps: SleepRecorder
) -> None:
    fake.enqueue(responses_rate_limited([]), responses_wire.stream(["ok"]))
    chunks = await collect(OpenAIResponses("m", base_url=fake.url, api_key="k", retry=retry))
    assert final(chunks).content == "ok"
    assert sleeps.delays == [0.5]
    fake.enqueue(*[responses_rate_limited([]) for _ in range(3)])
    with pytest.raises(ModelRateLimitError, match="rate_limit_exceeded: Rate limit reached"):
        await collect(OpenAIResponses("m", base_url=fake.url, api_key="k", retry=retry))
    assert len(fake.received) == 5


async def test_responses_error_event_is_typed(fake: FakeServer, retry: RetryPolicy) -> None:
    event = {"type": "error", "code": "insufficient_quota", "message": "You exceeded your quota"}
    fake.enqueue(Reply(sse=[sse_event(event, "error")]))
    with pytest.raises(ModelRateLimitError, match="insufficient_quota"):
        await collect(OpenAIResponses("m", base_url=fake.url, api_key="k", retry=retry))
    assert len(fake.received) == 1  # a spent quota does not come back on a retry


# 3. A connection cut mid-stream ---------------------------------------------------------


async def test_cut_after_deltas_is_a_connection_error_saying_so(
    provider: Provider, fake: FakeServer, retry: RetryPolicy
) -> None:
    events = body(provider.text_stream(["one ", "two ", "three"]))
    second = next(i for i, event in enumerate(events) if "two " in event)
    fake.enqueue(Reply(sse=events[: second + 1], cut=True))
    chunks: list[StreamChunk] = []
    model = provider.make(fake.url, retry)
    with pytest.raises(ModelConnectionError, match="after 2 deltas had reached") as caught:
        async with model:
            async for chunk in model.request_stream(USER, RequestInfo()):
                chunks.append(chunk)
    assert caught.value.deltas == len(chunks) == 2
    assert "while the answer streamed in" in str(caught.value)
    assert len(fake.received) == 1


async def test_cut_before_any_delta_is_retried(
    provider: Provider, fake: FakeServer, retry: RetryPolicy, sleeps: SleepRecorder
) -> None:
    events = body(provider.text_stream(["whole"]))
    fake.enqueue(Reply(sse=events[:1], cut=True), provider.text_stream(["whole"]))
    assert final(await collect(provider.make(fake.url, retry))).content == "whole"
    assert sleeps.delays == [0.5]


async def test_cut_before_any_delta_every_time_says_none_arrived(
    provider: Provider, fake: FakeServer, retry: RetryPolicy
) -> None:
    events = body(provider.text_stream(["whole"]))
    fake.enqueue(*[Reply(sse=events[:1], cut=True) for _ in range(3)])
    with pytest.raises(ModelConnectionError, match="before any delta had arrived") as caught:
        await collect(provider.make(fake.url, retry))
    assert caught.value.deltas == 0
    assert len(fake.received) == 3


# 4. No "content": null -----------------------------------------------------------------


async def test_tool_call_turn_is_sent_with_empty_content(
    fake: FakeServer, retry: RetryPolicy
) -> None:
    history = [
        *USER,
        Message(role="assistant", tool_calls=[ToolCall("weather", {"city": "Oslo"}, "call_1")]),
        Message(role="tool", content="rain", tool_call_id="call_1"),
    ]
    fake.enqueue(chat_wire.completion("Rain."), chat_wire.stream(["Rain."]))
    async with OpenAIChat("m", base_url=fake.url, api_key="k", retry=retry) as model:
        await model.request(history, RequestInfo(tools=[WEATHER]))
        [c async for c in model.request_stream(history, RequestInfo(tools=[WEATHER]))]
    for received in fake.received:
        assistant = received.json["messages"][1]
        assert assistant["role"] == "assistant" and assistant["tool_calls"]
        assert assistant["content"] == ""


# 5. Thinking blocks and reasoning items go back ----------------------------------------


def weather(city: str) -> str:
    """Weather for a city."""
    return f"rain in {city}"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_claude_thinking_blocks_are_sent_back(
    fake: FakeServer, retry: RetryPolicy, stream: bool
) -> None:
    if stream:
        fake.enqueue(
            claude_wire.stream(
                [
                    ("thinking", (["The user wants ", "weather."], "sig-abc")),
                    ("tool_use", ("toolu_1", "weather", ['{"city": "Oslo"}'])),
                ]
            )
        )
        fake.enqueue(claude_wire.stream([("text", ["Rain."])]))
    else:
        thought = claude_wire.thinking("The user wants weather.", "sig-abc")
        redacted = {"type": "redacted_thinking", "data": "opaque"}
        call = claude_wire.tool_use("toolu_1", "weather", {"city": "Oslo"})
        fake.enqueue(claude_wire.message([thought, redacted, call]))
        fake.enqueue(claude_wire.message([claude_wire.text("Rain.")]))
    model = Claude("m", base_url=fake.url, api_key="k", retry=retry, thinking={"type": "enabled"})
    agent = Agent(model=model, tools=[weather])
    if stream:
        [event async for event in await agent.arun("Weather in Oslo?", stream=True)]
    else:
        assert (await agent.arun("Weather in Oslo?")).content == "Rain."
    await model.aclose()
    assistant = fake.received[1].json["messages"][1]
    assert assistant["role"] == "assistant"
    first = assistant["content"][0]
    assert first == {
        "type": "thinking",
        "thinking": "The user wants weather.",
        "signature": "sig-abc",
    }
    if not stream:
        assert assistant["content"][1] == {"type": "redacted_thinking", "data": "opaque"}
    assert assistant["content"][-1]["type"] == "tool_use"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_responses_reasoning_items_are_sent_back(
    fake: FakeServer, retry: RetryPolicy, stream: bool
) -> None:
    item = responses_wire.reasoning_item("Looking up the weather.")
    if stream:
        fake.enqueue(
            responses_wire.stream([], [("call_1", "weather", ['{"city": "Oslo"}'])], reasoning=item)
        )
        fake.enqueue(responses_wire.stream(["Rain."]))
    else:
        call = responses_wire.call_item("call_1", "weather", '{"city": "Oslo"}')
        fake.enqueue(responses_wire.response([item, call]))
        fake.enqueue(responses_wire.response([responses_wire.message_item("Rain.")]))
    model = OpenAIResponses("m", base_url=fake.url, api_key="k", retry=retry)
    agent = Agent(model=model, tools=[weather])
    if stream:
        [event async for event in await agent.arun("Weather in Oslo?", stream=True)]
    else:
        await agent.arun("Weather in Oslo?")
    await model.aclose()
    items = fake.received[1].json["input"]
    kinds = [i.get("type", i.get("role")) for i in items]
    assert kinds == ["user", "reasoning", "function_call", "function_call_output"]
    assert items[1] == item


def test_reasoning_survives_the_history_round_trip() -> None:
    thought = Reasoning(provider="anthropic", data={"type": "thinking", "signature": "s"})
    message = Message(role="assistant", content=None, reasoning=[thought])
    again = Message.from_dict(json.loads(json.dumps(message.to_dict())))
    assert again.reasoning == [thought]
    assert "reasoning" not in Message(role="assistant", content="x").to_dict()


async def test_reasoning_is_only_sent_to_the_api_that_made_it(
    fake: FakeServer, retry: RetryPolicy
) -> None:
    foreign = Reasoning(provider="openai-responses", data={"type": "reasoning", "id": "rs_1"})
    history = [*USER, Message(role="assistant", content="Hi.", reasoning=[foreign])]
    fake.enqueue(claude_wire.message([claude_wire.text("ok")]))
    async with Claude("m", base_url=fake.url, api_key="k", retry=retry) as model:
        await model.request([*history, *USER], RequestInfo())
    assert fake.last.json["messages"][1]["content"] == [{"type": "text", "text": "Hi."}]


# 6. tool_choice on the first step only -------------------------------------------------


async def test_tool_choice_applies_to_the_first_step_only(
    fake: FakeServer, retry: RetryPolicy
) -> None:
    fake.enqueue(
        chat_wire.completion(None, [("call_1", "weather", '{"city": "Oslo"}')]),
        chat_wire.completion("Rain."),
    )
    model = OpenAIChat("m", base_url=fake.url, api_key="k", retry=retry, tool_choice="required")
    agent = Agent(model=model, tools=[weather])
    assert (await agent.arun("Weather?")).content == "Rain."
    await model.aclose()
    assert fake.received[0].json["tool_choice"] == "required"
    assert "tool_choice" not in fake.received[1].json


async def test_tool_choice_can_be_set_per_step(fake: FakeServer, retry: RetryPolicy) -> None:
    fake.enqueue(
        chat_wire.completion(None, [("call_1", "weather", '{"city": "Oslo"}')]),
        chat_wire.completion("Rain."),
    )

    def choose(llm_request: Any) -> None:
        llm_request.info.settings["tool_choice"] = "none" if llm_request.info.step > 1 else "auto"

    model = OpenAIChat("m", base_url=fake.url, api_key="k", retry=retry, tool_choice="required")
    agent = Agent(model=model, tools=[weather], before_model_callback=choose)
    await agent.arun("Weather?")
    await model.aclose()
    assert [r.json["tool_choice"] for r in fake.received] == ["auto", "none"]


async def test_tool_choice_is_not_sent_without_tools(fake: FakeServer, retry: RetryPolicy) -> None:
    fake.enqueue(claude_wire.message([claude_wire.text("ok")]))
    async with Claude(
        "m", base_url=fake.url, api_key="k", retry=retry, tool_choice={"type": "any"}
    ) as model:
        await model.request(USER, RequestInfo())
    assert "tool_choice" not in fake.last.json


@pytest.mark.parametrize("library", ["httpx", "httpx2"])
@pytest.mark.parametrize("sdk", [OPENAI_ERRORS, ANTHROPIC_ERRORS], ids=["openai", "anthropic"])
def test_either_http_librarys_transport_errors_are_connection_errors(
    library: str, sdk: SdkErrors
) -> None:
    """Older SDKs read streams with httpx, newer ones with httpx2: both are covered."""
    module = importlib.import_module(library)
    cut = module.RemoteProtocolError("peer closed connection without sending complete body")
    assert classify(sdk)(cut) is not None  # retried while nothing reached the caller
    mapped = translate(cut, sdk, provider="p", model="m", api_key=None, deltas=3)
    assert isinstance(mapped, ModelConnectionError) and mapped.deltas == 3
    assert "after 3 deltas had reached the caller" in str(mapped)
    before = translate(cut, sdk, provider="p", model="m", api_key=None)
    assert isinstance(before, ModelConnectionError) and "no response" in str(before)
