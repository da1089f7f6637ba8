"""Run coroutines and async iterators from sync code, also inside a running event loop.

With no loop running in this thread the call takes an idle private loop (a new loop per
call costs more than a small run) and gives it back when it ends. Idle loops are shared by
every thread, not kept one per thread: a thread that makes one sync call and ends (a DBOS
worker runs each queued run on such a thread) makes no loop of its own, and there are
never more loops than sync calls that once ran at the same time. Inside a running loop (Jupyter, an async web handler) the
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
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any, Generic, TypeVar

from statewise._workers import mark_inline_loop

T = TypeVar("T")
R = TypeVar("R")

_local = threading.local()


class _PrivateLoop:
    """An event loop only sync calls drive, one at a time, from any thread; closed when
    dropped (the idle ones at exit), so no unclosed loop is left behind. It is nobody's
    current event loop (`asyncio.get_event_loop()` outside a run never returns it: another
    thread may be driving it)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()

    def __del__(self) -> None:
        # Close the loop itself: between sync calls no task is pending, so there is
        # nothing else to finish (and a Runner's close starts a thread to shut the default
        # executor down, which deadlocks when this runs at interpreter exit).
        self.loop.close()


_idle: list[_PrivateLoop] = []  # (list.pop and list.append are atomic)


@contextlib.contextmanager
def _private_loop() -> Iterator[asyncio.AbstractEventLoop]:
    """An idle private loop (a new one when every loop is busy) for one sync call."""
    try:
        holder = _idle.pop()
    except IndexError:
        holder = _PrivateLoop()
    try:
        yield holder.loop
    finally:
        _idle.append(holder)


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
    outer: list[_Paused[Any]] | None = getattr(_local, "paused", None)
    paused: list[_Paused[Any]] = []
    _local.paused = paused
    task = loop.create_task(_stopping(loop, coro))
    try:
        while not task.done():  # (a stop left over from an interrupted call: go on)
            loop.run_forever()
            while paused:
                _local.paused = None  # (a call made from inside it cannot pause it)
                try:
                    paused.pop(0).run()
                finally:
                    _local.paused = paused
        return task.result()
    except BaseException:
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                loop.run_until_complete(task)
        raise
    finally:
        _local.paused = outer


class _Paused(Generic[R]):
    """A blocking call that `outside_loop` hands to the thread driving a private loop."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, call: Callable[[Callable[[], R]], R]
    ) -> None:
        self.loop, self.call = loop, call
        # What the call set up around the body (its context variables), once it asks for
        # the body; None when it ended without asking.
        self.gate: asyncio.Future[list[tuple[Any, Any]] | None] = loop.create_future()
        self.ran: asyncio.Future[R] = loop.create_future()  # the body's result, for the call
        self.result: asyncio.Future[R] = loop.create_future()  # what the call returned
        self.before = contextvars.Context()

    def run(self) -> None:
        """Make the call, the loop not running: only the body runs the loop again."""
        self.before = contextvars.copy_context()
        try:
            value = self.call(self.run_body)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:
            self._end()
            if not self.result.done():  # (not if the run was cancelled meanwhile)
                self.result.set_exception(exc)
        else:
            self._end()
            if not self.result.done():
                self.result.set_result(value)

    def run_body(self) -> R:
        """The call's way to run the body: the run's own task runs it on the loop."""
        after = contextvars.copy_context()
        changed = [
            (var, value) for var, value in after.items() if self.before.get(var) is not value
        ]
        if not self.gate.done():  # (cancelled with the run: `ran` holds why)
            self.gate.set_result(changed)
        return self.loop.run_until_complete(self.ran)

    def _end(self) -> None:
        if not self.gate.done():
            self.gate.set_result(None)  # (it had an outcome without the body: a replay)


async def outside_loop(
    call: Callable[[Callable[[], T]], T], body: Callable[[], Coroutine[Any, Any, T]]
) -> T:
    """`call(run_body)` on the thread that drives this private loop, with the loop paused
    (not running) meanwhile; `run_body()` returns what `body()` returns, run by this task.

    For a blocking API that refuses to run inside a running loop and wraps code of ours
    (a durable engine's synchronous step around a commit point): it runs on this thread,
    with no hop to another thread and back. Only this sync call drives the loop (see
    `statewise._workers`), so pausing it keeps nothing else waiting. The body runs in this
    task, as if awaited here, and sees the context variables the call set around it."""
    loop = asyncio.get_running_loop()
    handed: list[_Paused[Any]] | None = getattr(_local, "paused", None)
    if handed is None:
        raise RuntimeError(
            "outside_loop pauses a loop that run_sync or iterate_sync drives, from a "
            "coroutine it runs (not from a shared loop, nor from inside another such call)"
        )
    paused: _Paused[T] = _Paused(loop, call)
    handed.append(paused)
    loop.stop()  # run_forever returns after this turn, to `_run_private`
    try:
        changed = await paused.gate
        if changed is not None:
            tokens = [(var, var.set(value)) for var, value in changed]
            try:
                paused.ran.set_result(await body())
            finally:
                for var, token in reversed(tokens):
                    var.reset(token)
    except BaseException as exc:
        if not paused.ran.done():
            paused.ran.set_exception(exc)  # the call sees it (and raises it, or another)
    return await paused.result


async def _stopping(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]) -> T:
    """`coro`, stopping `loop` when it ends: the loop returns in the turn the run ended."""
    try:
        return await coro
    finally:
        loop.stop()


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    if not _in_running_loop():
        with _private_loop() as loop:
            return _run_private(loop, coro)  # the task copies our context
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
        with _private_loop() as loop:
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
