"""Run coroutines and async iterators from sync code, also inside a running event loop.

With no loop running in this thread we reuse one loop per thread (a new loop per call
costs more than a small run). Inside a running loop (Jupyter, an async web handler) the
coroutine runs to completion on a fresh loop in a worker thread, so sync calls never
raise "event loop is already running" and never deadlock the caller's loop. Either way
the coroutine sees the caller's context variables (an OpenTelemetry span, for one).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import queue
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Any, TypeVar

from statewise._workers import mark_inline_loop

T = TypeVar("T")

_local = threading.local()


class _ThreadLoop:
    """This thread's reusable event loop, closed when the thread ends (thread-local data
    is dropped then), so worker threads leave no unclosed loops behind."""

    def __init__(self) -> None:
        self.runner = asyncio.Runner()
        self.loop = self.runner.get_loop()

    def __del__(self) -> None:
        # Close the loop itself, not the Runner: Runner.close() starts a thread to shut
        # the default executor down, which deadlocks when this runs at interpreter exit.
        # Between sync calls no task is pending, so there is nothing else to finish.
        self.loop.close()


def _thread_loop() -> asyncio.AbstractEventLoop:
    holder: _ThreadLoop | None = getattr(_local, "loop", None)
    if holder is None:
        holder = _local.loop = _ThreadLoop()
    return holder.loop


def _in_running_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # none: the common case (a raise costs about a microsecond)
        return False
    return True


def _run_private(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` to completion on a loop that only sync calls drive, one at a time
    (blocking calls made on it run inline: see `statewise._workers`).

    `run_forever` stopped by the task itself as it ends, rather than `run_until_complete`
    (whose stop is a done callback: one more turn of the loop, a twentieth of a small
    run), or `Runner.run` (which installs and removes a SIGINT handler on every call, a
    sixth of it). An interrupt still cancels the run, so its cleanup (releasing the
    session) happens before the exception propagates.
    """
    mark_inline_loop(loop)
    task = loop.create_task(_stopping(loop, coro))
    try:
        while not task.done():  # (a stop left over from an interrupted call: go on)
            loop.run_forever()
        return task.result()
    except BaseException:
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                loop.run_until_complete(task)
        raise


async def _stopping(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]) -> T:
    """`coro`, stopping `loop` when it ends: the loop returns in the turn the run ended."""
    try:
        return await coro
    finally:
        loop.stop()


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    if not _in_running_loop():
        return _run_private(_thread_loop(), coro)  # the task copies our context
    result: list[T] = []
    error: list[BaseException] = []

    def target() -> None:
        try:
            with asyncio.Runner() as runner:
                result.append(_run_private(runner.get_loop(), coro))
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
        loop = _thread_loop()
        while True:
            try:
                yield _run_private(loop, agen.__anext__())  # type: ignore[arg-type]
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

    def pump_privately() -> None:
        with asyncio.Runner() as runner:
            _run_private(runner.get_loop(), pump())

    context = contextvars.copy_context()
    worker = threading.Thread(
        target=context.run, args=(pump_privately,), name="statewise-sync-stream"
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
