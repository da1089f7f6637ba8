"""FunctionModel: a model whose answers come from a Python function.

Tests and examples script exact model behaviour with it instead of hand-rolling fake
`Model` subclasses. The function sees the same messages and `RequestInfo` a provider would.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import TypeAlias

from statewise.models._assemble import StreamAssembler
from statewise.models._offline import estimate_usage, response_chunks
from statewise.models.base import Model
from statewise.models.messages import (
    Message,
    ModelResponse,
    RequestInfo,
    StreamChunk,
    TextDelta,
    ToolCallDelta,
)

FunctionResult: TypeAlias = ModelResponse | str
ModelFunction: TypeAlias = Callable[
    [list[Message], RequestInfo], FunctionResult | Awaitable[FunctionResult]
]
StreamItem: TypeAlias = str | ToolCallDelta | ModelResponse
StreamFunction: TypeAlias = Callable[
    [list[Message], RequestInfo], Iterable[StreamItem] | AsyncIterator[StreamItem]
]


class FunctionModel(Model):
    """A model that calls `fn(messages, info)` for every request.

    `fn` may be sync or async and returns a `ModelResponse` or a `str` (a text answer).
    With `stream_fn` (a sync or async generator), `request_stream` yields what it yields:
    `str` pieces of text become `TextDelta`s, `ToolCallDelta`s pass through, and a
    `ModelResponse` ends the stream; without one the final response is assembled from the
    pieces, exactly as a provider assembles its stream. Without `stream_fn`, streaming
    calls `fn` and yields its text word by word, so streaming consumers still see deltas.

    Usage is estimated from text length unless the function's response carries its own.
    """

    provider = "function"

    def __init__(
        self,
        fn: ModelFunction,
        *,
        stream_fn: StreamFunction | None = None,
        id: str = "function",
    ) -> None:
        self.fn = fn
        self.stream_fn = stream_fn
        self.id = id

    async def request(self, messages: list[Message], info: RequestInfo) -> ModelResponse:
        result = self.fn(messages, info)
        if not isinstance(result, (ModelResponse, str)) and inspect.isawaitable(result):
            result = await result
        return self._finish(messages, result)

    async def request_stream(
        self, messages: list[Message], info: RequestInfo
    ) -> AsyncIterator[StreamChunk]:
        if self.stream_fn is None:
            response = await self.request(messages, info)
            for chunk in response_chunks(response):
                yield chunk
            yield response
            return
        assembler = StreamAssembler()
        final: ModelResponse | None = None
        async for item in _aiter(self.stream_fn(messages, info)):
            if isinstance(item, ModelResponse):
                final = item
                break
            yield assembler.add(TextDelta(content=item) if isinstance(item, str) else item)
        yield self._finish(messages, final if final is not None else assembler.response())

    def _finish(self, messages: list[Message], result: FunctionResult) -> ModelResponse:
        response = ModelResponse(content=result) if isinstance(result, str) else result
        if response.model_name is None:
            response.model_name = self.id
        if response.usage.requests == 0:
            response.usage = estimate_usage(messages, response)
        return response


async def _aiter(
    items: Iterable[StreamItem] | AsyncIterator[StreamItem],
) -> AsyncIterator[StreamItem]:
    if isinstance(items, AsyncIterator):
        async for item in items:
            yield item
    else:
        for item in items:
            yield item
