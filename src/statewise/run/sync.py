"""Run coroutines and async iterators from sync code, also inside a running event loop.

With no loop running in this thread we reuse one loop per thread (a new loop per call
costs more than a small run). Inside a running loop (Jupyter, an async web handler) the
coroutine runs to completion on a fresh loop in a worker thread, so sync calls never
raise "event loop is already running" and never deadlock the caller's loop. Either way
the coroutine sees the caller's context variables (an OpenTelemetry span, for one).
"""

from __future__ import annotations

import asyncio
import contextvars
import queue
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

_local = threading.local()


class _ThreadLoop:
    """This thread's reusable event loop, closed when the thread ends (thread-local data
    is dropped then), so worker threads leave no unclosed loops behind."""

    def __init__(self) -> None:
        self.runner = asyncio.Runner()

    def __del__(self) -> None:
        # Close the loop itself, not the Runner: Runner.close() starts a thread to shut
        # the default executor down, which deadlocks when this runs at interpreter exit.
        # Between sync calls no task is pending, so there is nothing else to finish.
        self.runner.get_loop().close()


def _thread_runner() -> asyncio.Runner:
    holder: _ThreadLoop | None = getattr(_local, "loop", None)
    if holder is None:
        holder = _local.loop = _ThreadLoop()
    return holder.runner


def _in_running_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    if not _in_running_loop():
        return _thread_runner().run(coro, context=contextvars.copy_context())
    result: list[T] = []
    error: list[BaseException] = []

    def target() -> None:
        try:
            result.append(asyncio.run(coro))
        except BaseException as exc:
            error.append(exc)

    context = contextvars.copy_context()
    worker = threading.Thread(target=context.run, args=(target,), name="statewise-sync-run")
    worker.start()
    worker.join()
    if error:
        raise error[0]
    return result[0]


_DONE = object()


def iterate_sync(agen: AsyncIterator[T]) -> Iterator[T]:
    """A sync iterator over an async one."""
    if not _in_running_loop():
        runner = _thread_runner()
        while True:
            try:
                yield runner.run(
                    agen.__anext__(),  # type: ignore[arg-type]
                    context=contextvars.copy_context(),
                )
            except StopAsyncIteration:
                return
    items: queue.Queue[Any] = queue.Queue(maxsize=64)

    async def pump() -> None:
        try:
            async for item in agen:
                items.put(item)
        except BaseException as exc:
            items.put(exc)
        else:
            items.put(_DONE)

    context = contextvars.copy_context()
    worker = threading.Thread(
        target=context.run, args=(lambda: asyncio.run(pump()),), name="statewise-sync-stream"
    )
    worker.start()
    while True:
        item = items.get()
        if item is _DONE:
            break
        if isinstance(item, BaseException):
            worker.join()
            raise item
        yield item
    worker.join()
