from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from statewise.models import (
    FunctionModel,
    Message,
    ModelResponse,
    RequestInfo,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    Usage,
)
from statewise.models.base import Model

pytestmark = pytest.mark.anyio

USER = [Message(role="user", content="hello there")]


async def collect(model: Model, messages: list[Message]) -> list[object]:
    return [chunk async for chunk in model.request_stream(messages, RequestInfo())]


async def test_sync_function_returning_text() -> None:
    seen: list[tuple[list[Message], RequestInfo]] = []

    def fn(messages: list[Message], info: RequestInfo) -> str:
        seen.append((messages, info))
        return "hi!"

    info = RequestInfo(step=3)
    response = await FunctionModel(fn).request(USER, info)
    assert response.content == "hi!"
    assert response.tool_calls == []
    assert response.model_name == "function"
    assert response.usage == Usage(input_tokens=3, output_tokens=1, requests=1)
    assert seen == [(USER, info)]


async def test_async_function_returning_response_keeps_its_usage() -> None:
    async def fn(messages: list[Message], info: RequestInfo) -> ModelResponse:
        return ModelResponse(
            tool_calls=[ToolCall("add", {"a": 1}, "c1")],
            usage=Usage(input_tokens=10, output_tokens=2, requests=1),
            model_name="mine",
        )

    model = FunctionModel(fn, id="scripted")
    response = await model.request(USER, RequestInfo())
    assert response.tool_calls == [ToolCall("add", {"a": 1}, "c1")]
    assert response.usage == Usage(input_tokens=10, output_tokens=2, requests=1)
    assert response.model_name == "mine"
    assert model.name == "function:scripted"


async def test_stream_without_stream_fn_yields_words_then_response() -> None:
    model = FunctionModel(lambda m, i: "one two  three")
    chunks = await collect(model, USER)
    assert chunks[:-1] == [
        TextDelta(content="one "),
        TextDelta(content="two  "),
        TextDelta(content="three"),
    ]
    final = chunks[-1]
    assert isinstance(final, ModelResponse)
    assert final.content == "one two  three"


async def test_stream_without_stream_fn_streams_tool_calls() -> None:
    model = FunctionModel(lambda m, i: ModelResponse(tool_calls=[ToolCall("f", {"x": 1}, "c")]))
    chunks = await collect(model, USER)
    assert chunks[0] == ToolCallDelta(index=0, id="c", name="f", arguments_delta='{"x": 1}')
    assert isinstance(chunks[1], ModelResponse)


async def test_sync_stream_fn_is_assembled() -> None:
    def stream(messages: list[Message], info: RequestInfo) -> Iterator[str | ToolCallDelta]:
        yield "Let me "
        yield "check."
        yield ToolCallDelta(index=0, id="c1", name="weather", arguments_delta='{"ci')
        yield ToolCallDelta(index=1, id="c2", name="time", arguments_delta="")
        yield ToolCallDelta(index=0, arguments_delta='ty": "Oslo"}')

    model = FunctionModel(lambda m, i: "unused", stream_fn=stream)
    chunks = await collect(model, USER)
    assert chunks[:2] == [TextDelta(content="Let me "), TextDelta(content="check.")]
    assert len(chunks) == 6
    final = chunks[-1]
    assert isinstance(final, ModelResponse)
    assert final.content == "Let me check."
    assert final.tool_calls == [
        ToolCall("weather", {"city": "Oslo"}, "c1"),
        ToolCall("time", {}, "c2"),
    ]
    assert final.usage.requests == 1


async def test_async_stream_fn_final_response_wins() -> None:
    async def stream(
        messages: list[Message], info: RequestInfo
    ) -> AsyncIterator[str | ModelResponse]:
        yield "partial"
        yield ModelResponse(content="complete", usage=Usage(output_tokens=7, requests=1))

    chunks = await collect(FunctionModel(lambda m, i: "", stream_fn=stream), USER)
    assert chunks[0] == TextDelta(content="partial")
    final = chunks[1]
    assert isinstance(final, ModelResponse)
    assert (final.content, final.usage.output_tokens) == ("complete", 7)


async def test_streamed_invalid_tool_json_becomes_arguments_error() -> None:
    def stream(messages: list[Message], info: RequestInfo) -> Iterator[ToolCallDelta]:
        yield ToolCallDelta(index=0, id="c1", name="f", arguments_delta="{not json")

    chunks = await collect(FunctionModel(lambda m, i: "", stream_fn=stream), USER)
    final = chunks[-1]
    assert isinstance(final, ModelResponse)
    (call,) = final.tool_calls
    assert call.arguments == {}
    assert call.arguments_error is not None
    assert "not valid JSON" in call.arguments_error
