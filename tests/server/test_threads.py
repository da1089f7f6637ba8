"""The server's hops off the event loop (`_threads.off_loop`)."""

from __future__ import annotations

import asyncio
import contextvars
import threading

import pytest

from statewise.server._threads import off_loop

REQUEST: contextvars.ContextVar[str] = contextvars.ContextVar("request", default="")


def test_off_loop_runs_in_a_worker_thread_with_the_callers_context() -> None:
    def work(n: int, *, twice: bool) -> tuple[str, str, int]:
        return threading.current_thread().name, REQUEST.get(), n * (2 if twice else 1)

    def boom() -> None:
        raise KeyError("nope")

    async def main() -> tuple[str, str, int]:
        REQUEST.set("r-1")
        with pytest.raises(KeyError):
            await off_loop(boom)
        return await off_loop(work, 21, twice=True)

    thread, request, n = asyncio.run(main())
    assert thread != threading.current_thread().name and thread.startswith("statewise-server")
    assert (request, n) == ("r-1", 42)
