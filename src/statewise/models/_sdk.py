"""What the SDK-backed providers share: the request switch, retries, error translation,
settings routing and one client per event loop.

A client is bound to the event loop it first ran on (its connection pool is), and sync
façades may run each call in a fresh loop (`asyncio.run`). So the client is created lazily,
once per running loop, and closed *on that loop* before it shuts down: a small async
generator parked on the loop holds the client, and `asyncio.run` (like every runner that
calls `loop.shutdown_asyncgens()`) finalizes it, which closes the client's connections
while the loop still runs. A long-lived loop keeps one client and its connection pool.
Pass `client=` to manage your own instead.

Retries cover a whole non-streaming request, and a stream until its response headers
arrive; once deltas have been yielded a failure is raised, since the consumer has already
seen part of an answer that a retry could not take back.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from abc import abstractmethod
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any, Generic, TypeVar

from statewise.models._errors import SdkErrors, classify, translate
from statewise.models._guard import check_allow_model_requests
from statewise.models._retry import RetryPolicy, with_retries
from statewise.models.base import Model

T = TypeVar("T")
ClientT = TypeVar("ClientT")


class SdkModel(Model, Generic[ClientT]):
    """Base of `OpenAIChat`, `OpenAIResponses` and `Claude`; subclasses set `sdk_errors`
    and implement `_make_client`, `request` and `request_stream`."""

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
        keeper = _keep_until_loop_shutdown(client)
        await keeper.__anext__()  # parks it on this loop; shutdown_asyncgens closes it
        self._client, self._client_loop, self._keeper = client, loop, keeper

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
            return await with_retries(
                attempt, policy=self.retry, classify=classify(self.sdk_errors)
            )
        except Exception as exc:
            mapped = self._translate(exc)
            if mapped is exc:
                raise
            raise mapped from exc

    async def _stream(self, stream: AsyncIterator[T]) -> AsyncIterator[T]:
        """Iterate an SDK stream, translating failures that arrive mid-stream."""
        try:
            async for item in stream:
                yield item
        except Exception as exc:
            mapped = self._translate(exc)
            if mapped is exc:
                raise
            raise mapped from exc

    def _translate(self, exc: Exception) -> Exception:
        return translate(
            exc, self.sdk_errors, provider=self.provider, model=self.id, api_key=self.api_key
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


async def _keep_until_loop_shutdown(client: Any) -> AsyncGenerator[None, None]:
    """Yields once, then waits; finalizing it (aclose, or the loop's shutdown) closes
    `client`."""
    try:
        yield
    finally:
        await client.close()
