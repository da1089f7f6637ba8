"""Worker threads for blocking calls from async code (`statewise._workers`)."""

from __future__ import annotations

import asyncio
import contextvars
import multiprocessing
import threading
import time

import pytest

from statewise._workers import Workers, run_blocking

REQUEST: contextvars.ContextVar[str] = contextvars.ContextVar("request", default="")


def test_a_call_runs_in_a_worker_thread_with_the_callers_context() -> None:
    def work(n: int, *, twice: bool) -> tuple[str, str, int]:
        return threading.current_thread().name, REQUEST.get(), n * (2 if twice else 1)

    def boom() -> None:
        raise KeyError("nope")

    async def main() -> tuple[str, str, int]:
        REQUEST.set("r-1")
        with pytest.raises(KeyError):
            await run_blocking(boom)
        return await run_blocking(work, 21, twice=True)

    thread, request, n = asyncio.run(main())
    assert thread != threading.current_thread().name and thread.startswith("statewise-blocking")
    assert (request, n) == ("r-1", 42)


def test_threads_start_as_calls_arrive_up_to_the_size_and_are_reused() -> None:
    workers = Workers(2, "test-workers")
    seen: set[str] = set()
    running = 0
    most = 0
    lock = threading.Lock()

    def work() -> None:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
            seen.add(threading.current_thread().name)
        time.sleep(0.02)
        with lock:
            running -= 1

    async def main() -> None:
        await workers.run(work)
        await workers.run(work)  # the idle thread takes it
        assert len(seen) == 1
        await asyncio.gather(*(workers.run(work) for _ in range(6)))

    try:
        asyncio.run(main())
    finally:
        workers.close()
    assert len(seen) == 2 and most == 2


def test_a_cancelled_or_abandoned_call_runs_to_its_end_and_the_thread_serves_on() -> None:
    workers = Workers(1, "test-workers")
    release = threading.Event()
    finished: list[str] = []

    def slow(name: str) -> str:
        release.wait(5)
        finished.append(name)
        return name

    async def cancel_one() -> None:
        task = asyncio.ensure_future(workers.run(slow, "cancelled"))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        release.set()

    async def abandon_one() -> asyncio.Future[str]:
        release.clear()
        task = asyncio.ensure_future(workers.run(slow, "abandoned"))
        await asyncio.sleep(0.01)
        return task  # the loop closes with the call still running

    async def next_call() -> str:
        return await workers.run(lambda: "next")

    try:
        asyncio.run(cancel_one())
        asyncio.run(abandon_one())
        release.set()
        assert asyncio.run(next_call()) == "next"
    finally:
        workers.close()
    assert finished == ["cancelled", "abandoned"]


def test_closed_workers_end_their_threads_and_refuse_calls() -> None:
    workers = Workers(3, "test-closing")

    async def main() -> None:
        await asyncio.gather(*(workers.run(time.sleep, 0.01) for _ in range(3)))

    asyncio.run(main())
    workers.close()
    deadline = time.monotonic() + 5
    while any(t.name.startswith("test-closing") for t in threading.enumerate()):
        assert time.monotonic() < deadline, "the threads did not end"
        time.sleep(0.01)
    with pytest.raises(RuntimeError, match="closed"):
        asyncio.run(main())


def _in_child(results: multiprocessing.Queue[str]) -> None:
    results.put(asyncio.run(run_blocking(lambda: "child")))


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="no fork")
def test_a_forked_child_starts_its_own_threads() -> None:
    assert asyncio.run(run_blocking(lambda: "parent")) == "parent"  # threads exist here
    context = multiprocessing.get_context("fork")
    results: multiprocessing.Queue[str] = context.Queue()
    child = context.Process(target=_in_child, args=(results,))
    child.start()
    try:
        assert results.get(timeout=10) == "child"
    finally:
        child.join(10)
        if child.is_alive():
            child.kill()
