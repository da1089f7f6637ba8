"""How a run hands out its events: to an `Emit` callable, only when someone listens.

The run loop is plain coroutines. A run nobody iterates (`run()`, `arun()` without
`stream=True`, a team member whose host does not stream) gets no `Emit` and builds no
events at all; a run someone iterates gets one from `events_of`, which turns the run's
coroutine into an async iterator of its events.

`events_of` drives the coroutine itself, in the task of whoever iterates, and hands every
future the coroutine waits on to that task's event loop unchanged: `asyncio.current_task()`,
`asyncio.timeout()`, cancellation, context variables and anyio inside tools behave as in
any coroutine, and the run goes no further than the event its consumer asked for (as an
async generator would). Closing the iterator early (`aclose()`, or the loop finalizing
an abandoned one) throws `GeneratorExit` into the run at the event it stopped at, so its
cleanup (discarding uncommitted work, releasing the session) runs then; events emitted
during that cleanup go nowhere.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Generator
from typing import Any

from statewise.run.events import RunEvent

Emit = Callable[[RunEvent], Awaitable[None]]
"""Where a run sends its events; `await emit(event)`."""


class _Emitted:
    """Awaiting this suspends the run's coroutine with the event, for `events_of`."""

    __slots__ = ("event",)

    def __init__(self, event: RunEvent) -> None:
        self.event = event

    def __await__(self) -> Generator[Any, Any, None]:
        yield self


class _Pass:
    """Awaiting this hands what the run's coroutine yielded (a future, or None for a bare
    `sleep(0)`) to the event loop, and the loop's answer back."""

    __slots__ = ("item",)

    def __init__(self, item: Any) -> None:
        self.item = item

    def __await__(self) -> Generator[Any, Any, Any]:
        return (yield self.item)


def _emit(event: RunEvent) -> _Emitted:
    return _Emitted(event)


async def events_of(start: Callable[[Emit], Coroutine[Any, Any, Any]]) -> AsyncIterator[RunEvent]:
    """The events of the run `start(emit)` makes, as it makes them."""
    coro = start(_emit)
    sent: Any = None
    thrown: BaseException | None = None
    closing = False
    try:
        while True:
            try:
                if thrown is None:
                    item = coro.send(sent)
                else:
                    error, thrown = thrown, None
                    item = coro.throw(error)
            except StopIteration:
                return
            sent = None
            if type(item) is _Emitted:
                if closing:
                    continue
                try:
                    yield item.event
                except BaseException as exc:  # aclose() or athrow() at this event
                    thrown = exc
                    closing = isinstance(exc, GeneratorExit)
            else:
                try:
                    sent = await _Pass(item)
                except BaseException as exc:  # cancellation, a timeout: the run's to handle
                    thrown = exc
    finally:
        coro.close()  # (nothing left to do unless the consumer's own task is torn down)
