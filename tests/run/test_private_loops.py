"""`run.sync`: a sync call runs on an idle private loop shared by every thread, so a thread
that makes one call and ends (a DBOS worker runs each queued run on such a thread) makes
no loop of its own, and two calls at once never share one."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator

from statewise.run.sync import iterate_sync, run_sync


async def _running_loop() -> asyncio.AbstractEventLoop:
    return asyncio.get_running_loop()


def _in_a_new_thread() -> asyncio.AbstractEventLoop:
    seen: list[asyncio.AbstractEventLoop] = []
    thread = threading.Thread(target=lambda: seen.append(run_sync(_running_loop())))
    thread.start()
    thread.join()
    return seen[0]


def test_a_new_thread_takes_an_idle_loop() -> None:
    here = run_sync(_running_loop())
    assert _in_a_new_thread() is here
    assert not here.is_closed()
    assert run_sync(_running_loop()) is here


def test_calls_at_once_each_have_their_own_loop() -> None:
    inner: list[asyncio.AbstractEventLoop] = []

    async def outer() -> asyncio.AbstractEventLoop:
        # Another thread's call while this one holds its loop (a blocking call made
        # from the run, as a sync tool would), and a nested call on this thread.
        thread = threading.Thread(target=lambda: inner.append(run_sync(_running_loop())))
        thread.start()
        thread.join()
        return asyncio.get_running_loop()

    loop = run_sync(outer())
    assert inner[0] is not loop


def test_a_stream_holds_its_loop_until_it_ends() -> None:
    async def items() -> AsyncIterator[asyncio.AbstractEventLoop]:
        for _ in range(2):
            yield asyncio.get_running_loop()

    stream = iterate_sync(items())
    first = next(stream)
    assert run_sync(_running_loop()) is not first  # (taken by the stream meanwhile)
    assert next(stream) is first
    assert list(stream) == []
    assert run_sync(_running_loop()) is first  # (idle again: the last one given back)
