"""`run.sync.outside_loop`: a blocking call that wraps a coroutine of the run (a durable
engine's synchronous step) runs on the thread driving the run's private loop, with the
loop paused, and the coroutine runs on that same loop; no other thread takes part."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest

from statewise.run.sync import can_leave_loop, outside_loop, run_sync


def test_the_call_runs_on_the_driving_thread_with_the_loop_paused() -> None:
    seen: list[tuple[str, object]] = []

    def blocking_step(run_body: Callable[[], int]) -> int:
        # Not inside a running loop: an API that refuses one accepts this thread.
        with pytest.raises(RuntimeError):
            asyncio.get_running_loop()
        seen.append(("call", threading.current_thread()))
        return run_body() + 1

    async def body() -> int:
        seen.append(("body", threading.current_thread()))
        await asyncio.sleep(0)
        return 41

    async def run() -> tuple[int, bool]:
        assert can_leave_loop()
        loop = asyncio.get_running_loop()
        result = await outside_loop(blocking_step, body)
        assert asyncio.get_running_loop() is loop
        return result, can_leave_loop()

    assert run_sync(run()) == (42, True)
    assert seen == [("call", threading.current_thread()), ("body", threading.current_thread())]


def test_an_error_in_the_body_reaches_the_run() -> None:
    async def body() -> int:
        raise ValueError("the point failed")

    async def run() -> int:
        return await outside_loop(lambda run_body: run_body(), body)

    with pytest.raises(ValueError, match="the point failed"):
        run_sync(run())


def test_a_loop_it_cannot_pause_says_so() -> None:
    async def shared() -> bool:
        return can_leave_loop()

    assert asyncio.run(shared()) is False

    async def nested() -> bool:
        async def inner() -> bool:
            return can_leave_loop()  # inside a paused call: the loop is not ours to pause

        return await outside_loop(lambda run_body: run_body(), inner)

    assert run_sync(nested()) is False
