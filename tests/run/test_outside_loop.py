"""`run.sync.outside_loop`: a blocking call that wraps a coroutine of the run (a durable
engine's synchronous step) runs on the thread driving the run's private loop, with the
loop paused, and the coroutine runs on that same loop; no other thread takes part."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable

import pytest

from statewise.run.sync import outside_loop, run_sync


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

    async def run() -> int:
        loop = asyncio.get_running_loop()
        result = await outside_loop(blocking_step, body)
        assert asyncio.get_running_loop() is loop
        return result

    assert run_sync(run()) == 42
    assert seen == [("call", threading.current_thread()), ("body", threading.current_thread())]


def test_an_error_in_the_body_reaches_the_run() -> None:
    async def body() -> int:
        raise ValueError("the point failed")

    async def run() -> int:
        return await outside_loop(lambda run_body: run_body(), body)

    with pytest.raises(ValueError, match="the point failed"):
        run_sync(run())


def test_a_loop_it_cannot_pause_says_so() -> None:
    async def body() -> int:
        return 1

    async def shared() -> int:
        return await outside_loop(lambda run_body: run_body(), body)

    with pytest.raises(RuntimeError, match="run_sync"):
        asyncio.run(shared())

    async def nested() -> int:
        # inside a paused call: the loop is not paused again
        return await outside_loop(lambda run_body: run_body(), shared)

    with pytest.raises(RuntimeError, match="run_sync"):
        run_sync(nested())


_run_var: contextvars.ContextVar[str] = contextvars.ContextVar("run_var", default="unset")
_call_var: contextvars.ContextVar[str] = contextvars.ContextVar("call_var", default="unset")


def test_the_body_sees_the_runs_context_and_the_calls() -> None:
    """As if awaited in the run's task: what the run set before is there, what the body
    sets stays after it; and what the call set up around the body (an engine's step
    context) is there while it runs."""

    def blocking_step(run_body: Callable[[], str]) -> str:
        token = _call_var.set("step context")
        try:
            return run_body()
        finally:
            _call_var.reset(token)

    async def body() -> str:
        seen = f"{_run_var.get()} / {_call_var.get()}"
        _run_var.set("set by the body")
        return seen

    async def run() -> tuple[str, str, str]:
        _run_var.set("set by the run")
        seen = await outside_loop(blocking_step, body)
        return seen, _run_var.get(), _call_var.get()

    assert run_sync(run()) == ("set by the run / step context", "set by the body", "unset")


def test_a_call_that_has_its_answer_never_runs_the_body() -> None:
    ran: list[bool] = []

    async def body() -> str:
        ran.append(True)
        return "fresh"

    async def run() -> str:
        return await outside_loop(lambda run_body: "recorded", body)

    assert run_sync(run()) == "recorded"
    assert ran == []
