"""`RunStream`: the events of a streamed async run, iterable at once or after `await`.

Agno's `agent.arun(..., stream=True)` returns the async iterator itself, so
`async for event in agent.arun(..., stream=True)` is what its users write; statewise's
`arun` was a coroutine, so the same line failed (`'async for' requires an object with
__aiter__ method, got coroutine`) and only `async for event in await agent.arun(...)`
worked. A `RunStream` is both: iterate it, or await it (which gives the stream itself).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Generator
from typing import Any

from statewise.run.events import RunEvent


class RunStream(AsyncIterator[RunEvent]):
    """A streamed run's events (see the module)."""

    def __init__(self, events: AsyncIterator[RunEvent]) -> None:
        self._events = events

    def __aiter__(self) -> RunStream:
        return self

    async def __anext__(self) -> RunEvent:
        return await self._events.__anext__()

    def __await__(self) -> Generator[Any, None, RunStream]:
        return self
        yield  # (a generator that finishes at once: `await stream` is the stream)

    async def aclose(self) -> None:
        """Stop the run's stream early (the run ends as a client that left does)."""
        closing = getattr(self._events, "aclose", None)
        if closing is not None:
            await closing()


__all__ = ["RunStream"]
