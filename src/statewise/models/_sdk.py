"""What the SDK-backed providers share: the request switch, retries, error translation,
settings routing and one client per event loop.

A client is bound to the event loop it first ran on (its connection pool is), and sync
façades may run each call in a fresh loop (`asyncio.run`). So the client is created lazily,
once per running loop, and closed *on that loop* before it shuts down: a small async
generator parked on the loop holds the client, and `asyncio.run` (like every runner that
calls `loop.shutdown_asyncgens()`) finalizes it, which closes the client's connections
while the loop still runs. A long-lived loop keeps one client and its connection pool.
Pass `client=` to manage your own instead.

Retries cover a whole non-streaming request, and a stream until its first delta reaches
the caller: a failure before that (an error status, a connection that breaks, an error
event such as a rate limit inside the stream) starts the stream again; once deltas have
been yielded a failure is raised, since the consumer has already seen part of an answer
that a retry could not take back. A stream must end with its terminator: one that stops
without it, or a 200 whose body is not SSE, is a `MalformedResponseError`.

`tool_choice` given to a model's constructor applies to the first step of a run only
(`RequestInfo.step <= 1`): forcing a tool on every step would force another call after
each tool result, forever. To choose per step, set `info.settings["tool_choice"]` (for
example in `before_model_callback`), which is sent as given.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from abc import abstractmethod
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Generic, Protocol, TypeVar

from statewise.exceptions import MalformedResponseError
from statewise.models._errors import SdkErrors, classify, translate
from statewise.models._guard import check_allow_model_requests
from statewise.models._retry import Retryable, RetryPolicy, with_retries
from statewise.models._sse import SseEvent, SseParser, StreamReader, sse_events
from statewise.models.base import Model
from statewise.models.messages import (
    ModelResponse,
    RequestInfo,
    StreamChunk,
    TextDelta,
    ToolCallDelta,
)

T = TypeVar("T")
ClientT = TypeVar("ClientT")


class ChunkReader(Protocol):
    """What `SdkModel._stream_chunks` needs of a reader: chunks in, deltas out, `done`
    once the stream's terminator came, and the complete response at the end."""

    terminator: str
    done: bool

    def feed(self, chunk: Any, /) -> Iterable[TextDelta | ToolCallDelta]: ...

    def response(self) -> ModelResponse: ...


class SdkModel(Model, Generic[ClientT]):
    """Base of every SDK-backed provider; subclasses implement `_make_client`, `request`
    and `request_stream`, and either set `sdk_errors` (the Stainless-generated OpenAI and
    Anthropic SDKs) or override `_classify` and `_translate` (other SDKs)."""

    sdk_errors: SdkErrors

    def __init__(
        self,
        *,
        id: str,
        api_key: str | None,
        timeout: float,
        retry: RetryPolicy | None,
        max_retries: int | None,
        client: ClientT | None,
        settings: dict[str, Any],
    ) -> None:
        self.id = id
        self.api_key = api_key
        self.timeout = timeout
        policy = retry or RetryPolicy()
        if max_retries is not None:
            policy = dataclasses.replace(policy, max_retries=max_retries)
        self.retry = policy
        self.settings = settings
        self._own_client = client is None
        self._client = client
        self._client_loop: asyncio.AbstractEventLoop | None = None
        self._keeper: AsyncGenerator[None, None] | None = None

    def __repr__(self) -> str:  # the key stays out of logs
        return f"{type(self).__name__}(id={self.id!r}, provider={self.provider!r})"

    @abstractmethod
    def _make_client(self) -> ClientT:
        """A new SDK client with the SDK's own retries off (`max_retries=0`)."""

    @property
    def client(self) -> ClientT:
        """The SDK client for the running event loop (set up by `_ensure_client`)."""
        if self._client is None:
            raise RuntimeError("no client yet: requests go through SdkModel._call")
        return self._client

    async def _ensure_client(self) -> None:
        if not self._own_client:
            return
        loop = asyncio.get_running_loop()
        if self._client is not None and self._client_loop is loop:
            return
        client = self._make_client()
        keeper = _keep_until_loop_shutdown(client, self._close_client)
        await keeper.__anext__()  # parks it on this loop; shutdown_asyncgens closes it
        self._client, self._client_loop, self._keeper = client, loop, keeper

    async def _close_client(self, client: ClientT) -> None:
        """Close a client this model made (the Stainless SDKs' `close()` is async)."""
        await client.close()  # type: ignore[attr-defined]

    async def aclose(self) -> None:
        """Close the client this model created (not one passed in)."""
        keeper, self._keeper, self._client = self._keeper, None, None
        if self._own_client and keeper is not None:
            await keeper.aclose()

    async def __aenter__(self: T) -> T:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _call(self, attempt: Callable[[], Awaitable[T]]) -> T:
        """Run one request with the switch check, retries and error translation."""
        check_allow_model_requests(self.name)
        await self._ensure_client()
        try:
            return await with_retries(attempt, policy=self.retry, classify=self._classify)
        except Exception as exc:
            mapped = self._translate(exc)
            if mapped is exc:
                raise
            raise mapped from exc

    async def _stream_request(
        self,
        open_stream: Callable[[], AbstractAsyncContextManager[Any]],
        new_reader: Callable[[], StreamReader],
    ) -> AsyncIterator[StreamChunk]:
        """Open a streaming response (an SDK `with_streaming_response` call), read its SSE
        with a fresh `new_reader()` per attempt, yield the deltas and then the response."""
        seen: dict[str, Any] = {}

        @asynccontextmanager
        async def events() -> AsyncIterator[AsyncIterator[SseEvent]]:
            async with open_stream() as response:
                seen["response"], seen["parser"] = response, SseParser()
                yield sse_events(response.iter_lines(), seen["parser"])

        def incomplete(reader: ChunkReader, sent: int) -> Exception:
            return self._unterminated(reader, seen["parser"], seen["response"], sent)

        async for chunk in self._stream_chunks(events, new_reader, incomplete):
            yield chunk

    async def _stream_chunks(
        self,
        open_chunks: Callable[[], AbstractAsyncContextManager[AsyncIterator[Any]]],
        new_reader: Callable[[], ChunkReader],
        incomplete: Callable[[ChunkReader, int], Exception],
    ) -> AsyncIterator[StreamChunk]:
        """Read a stream of chunks (SSE events, SDK stream objects, AWS event-stream
        events) with a fresh `new_reader()` per attempt; yield the deltas and then the
        response. A stream that ends before the reader is `done` raises
        `incomplete(reader, deltas_sent)`.

        Retried from scratch while no delta has reached the caller; afterwards a failure is
        raised with the number of deltas that had arrived in its message.
        """
        check_allow_model_requests(self.name)
        await self._ensure_client()
        retry = 0
        while True:
            reader = new_reader()
            sent = 0
            try:
                async with open_chunks() as chunks:
                    async for chunk in chunks:
                        for delta in reader.feed(chunk):
                            sent += 1
                            yield delta
                        if reader.done:
                            break
                    if not reader.done:
                        raise incomplete(reader, sent)
                yield reader.response()
                return
            except Exception as exc:
                wait = None if sent else self.retry.wait_before(retry, self._classify(exc))
                if wait is None:
                    mapped = self._translate(exc, deltas=sent)
                    if mapped is exc:
                        raise
                    raise mapped from exc
            await self.retry.sleep(wait)
            retry += 1

    def _unterminated(
        self, reader: ChunkReader, parser: SseParser, response: Any, sent: int
    ) -> MalformedResponseError:
        prefix = f"{self.provider} model {self.id!r}"
        content_type = response.headers.get("content-type", "")
        if not parser.events:
            return MalformedResponseError(
                f"{prefix}: a stream was answered with status {response.status_code} and a "
                f"body that is not server-sent events (content-type {content_type!r}): "
                f"{parser.stray[:200]!r}"
            )
        return self._ended_early(reader, sent)

    def _ended_early(self, reader: ChunkReader, sent: int) -> MalformedResponseError:
        """A stream that stopped before its terminator, after `sent` deltas."""
        delivered = f"after {sent} deltas; the partial answer is lost" if sent else "early"
        return MalformedResponseError(
            f"{self.provider} model {self.id!r}: the stream ended without its terminator "
            f"({reader.terminator}), {delivered}"
        )

    def _settings(self, info: RequestInfo) -> dict[str, Any]:
        """The model's settings under the request's; the model's `tool_choice` only on the
        first step, and no `tool_choice` at all without tools (APIs reject that)."""
        settings = dict(self.settings)
        if info.step > 1:
            settings.pop("tool_choice", None)
        settings.update(info.settings)
        if not info.tools:
            settings.pop("tool_choice", None)
        return settings

    def _classify(self, exc: Exception) -> Retryable | None:
        """Whether a failure deserves another attempt (see `_retry`)."""
        return classify(self.sdk_errors)(exc)

    def _translate(self, exc: Exception, *, deltas: int | None = None) -> Exception:
        """Our typed error for an SDK failure, or `exc` itself when it is not one."""
        return translate(
            exc,
            self.sdk_errors,
            provider=self.provider,
            model=self.id,
            api_key=self.api_key,
            deltas=deltas,
        )

    def _request_kwargs(
        self, create: Callable[..., Any], settings: dict[str, Any]
    ) -> dict[str, Any]:
        """Split settings into `create`'s own parameters and `extra_body` for the rest, so
        a provider-specific option never fails with an unexpected keyword argument."""
        params = inspect.signature(create).parameters
        known = {k: v for k, v in settings.items() if k in params}
        extra = {k: v for k, v in settings.items() if k not in params}
        if extra:
            known["extra_body"] = {**extra, **known.get("extra_body", {})}
        return known


async def _keep_until_loop_shutdown(
    client: Any, close: Callable[[Any], Awaitable[None]]
) -> AsyncGenerator[None, None]:
    """Yields once, then waits; finalizing it (aclose, or the loop's shutdown) closes
    `client`."""
    try:
        yield
    finally:
        await close(client)
