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

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Generator
from typing import Any

from statewise.run.events import RunEvent
from statewise.state.secrets import mask_json

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


def masking(emit: Emit | None, secret_values: Callable[[], tuple[str, ...]]) -> Emit | None:
    """`emit` with the session's secret values (as its state has them at each event)
    masked by value in every event's text and arguments: a value that became secret is
    the marker in whatever the run emits from then on (a model echoing it, a tool call
    carrying it). The run's output object, for library callers, is left as it is."""
    if emit is None:
        return None
    send = emit

    async def masked(event: RunEvent) -> None:
        values = secret_values()
        await send(masked_event(event, values) if values else event)

    return masked


def masked_event(event: RunEvent, values: tuple[str, ...]) -> RunEvent:
    """`event` with `values` masked by value in its text and arguments (see `masking`)."""
    if not dataclasses.is_dataclass(event) or getattr(event, "output", None) is not None:
        return event
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(event):
        value = getattr(event, f.name)
        if isinstance(value, str | dict | list):
            masked = mask_json(value, values)
            if masked is not value:
                changes[f.name] = masked
    return dataclasses.replace(event, **changes) if changes else event


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
