"""Worker threads that async code hands blocking calls to: a database's I/O, a server's
read, a sync tool. The bottom of the package: it imports nothing of statewise, so every
layer can use it, and the one place that makes threads for them: `run_blocking` (I/O) and
`run_user_code` (sync tools and hooks).

A hop is a queue put and a `call_soon_threadsafe` back: the calling task waits on a plain
asyncio future that the worker resolves. `loop.run_in_executor` / `asyncio.to_thread` /
`asyncio.wrap_future` on a `ThreadPoolExecutor` do the same work through a
`concurrent.futures.Future` (a Condition and its locks) chained to an asyncio future both
ways, several times the CPU of a hop here under concurrent callers
(`bench/bench_server.py` measures the server that depends on it); a server's run makes
several hops.

`Workers(size)` starts threads as calls arrive, up to `size`, and reuses idle ones. The
caller's context variables travel with each call.

This is the one place that decides where a blocking call runs. A loop that only a sync
call drives (`agent.run()` runs its coroutine on one: see `mark_inline_loop`) runs every
call inline: nobody else shares that loop, so there is no one to block, and a thread hop
would only add latency. The layers above ask nothing; they hand blocking calls here. A call whose caller was cancelled still
runs to its end (a thread cannot be interrupted), and its result is dropped. Threads are
daemons; a forked child starts its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import os
import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

_Call = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[[], Any]]
_STOP = None


class Workers:
    """Up to `size` threads named `name`-N running blocking calls for async callers."""

    def __init__(self, size: int, name: str) -> None:
        self.size = size
        self.name = name
        self.closed = False
        self._reset()
        _all.add(self)

    def _reset(self) -> None:
        self._queue: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0  # threads waiting for a call that no queued call has claimed yet

    async def run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """`fn(*args, **kwargs)` in one of these threads, with the caller's context."""
        if self.closed:
            raise RuntimeError(f"the {self.name} threads are closed")
        loop = asyncio.get_running_loop()
        if loop in _inline_loops:
            return fn(*args, **kwargs)
        future: asyncio.Future[T] = loop.create_future()
        call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
        with self._lock:
            if self._idle:
                self._idle -= 1
            elif self._threads < self.size:
                self._threads += 1
                threading.Thread(
                    target=self._work, name=f"{self.name}-{self._threads}", daemon=True
                ).start()
        self._queue.put((loop, future, call))
        return await future

    def close(self) -> None:
        """End the threads once the calls already queued have run."""
        self.closed = True
        with self._lock:
            threads, self._threads, self._idle = self._threads, 0, 0
        for _ in range(threads):
            self._queue.put(_STOP)

    def _work(self) -> None:
        take = self._queue.get
        while (item := take()) is not _STOP:
            loop, future, call = item
            try:
                outcome: tuple[Any, BaseException | None] = (call(), None)
            except BaseException as exc:
                outcome = (None, exc)
            del item, call
            # Idle before the caller hears back: its next call then finds this thread
            # instead of starting another one.
            with self._lock:
                self._idle += 1
            # (A closed loop raises RuntimeError: nobody waits for this call any more.)
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, future, *outcome)
            del future, outcome


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():  # the caller was cancelled
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)


_all: weakref.WeakSet[Workers] = weakref.WeakSet()

_inline_loops: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()


def mark_inline_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Declare that `loop` is driven by sync calls alone, one at a time: blocking calls
    made on it run inline (see the module's docstring)."""
    _inline_loops.add(loop)


def runs_inline() -> bool:
    """Whether a blocking call made here runs inline: on a loop a sync call drives. A
    backend with two drivers (PostgreSQL's sync and async psycopg) asks it to pick one."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # (no loop: the caller is sync code, which blocks anyway)
        return True
    return loop in _inline_loops


def _after_fork() -> None:
    for workers in list(_all):
        workers._reset()


os.register_at_fork(after_in_child=_after_fork)


BLOCKING_THREADS = 40
"""How many threads `run_blocking` uses (anyio's default for a server's sync routes)."""

USER_CODE_THREADS = min(32, (os.cpu_count() or 1) + 4)
"""How many threads `run_user_code` uses: as many as asyncio's default executor has,
which tools ran in before."""

_blocking = Workers(BLOCKING_THREADS, "statewise-blocking")
_user_code = Workers(USER_CODE_THREADS, "statewise-tool")


async def run_blocking(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`fn(*args, **kwargs)` in a shared worker thread, for blocking calls made from an
    event loop: a network database's I/O, a server's read. Every database of the process
    and the server share these threads."""
    return await _blocking.run(fn, *args, **kwargs)


async def run_user_code(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`fn(*args, **kwargs)` for a sync tool or tool hook, in threads of their own: slow
    tools filling `run_blocking`'s threads would hold back every run's commits."""
    return await _user_code.run(fn, *args, **kwargs)
