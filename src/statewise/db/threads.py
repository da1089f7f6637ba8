"""The worker threads a database's blocking I/O runs in for async callers (`run_blocking`),
shared by every database of the process and by the server's reads."""

from __future__ import annotations

from collections.abc import Callable
from typing import ParamSpec, TypeVar

from statewise._workers import Workers

P = ParamSpec("P")
T = TypeVar("T")

BLOCKING_THREADS = 40
"""How many threads `run_blocking` uses (anyio's default for a server's sync routes)."""

_blocking = Workers(BLOCKING_THREADS, "statewise-blocking")


async def run_blocking(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`fn(*args, **kwargs)` in a shared worker thread (see `Workers`), for blocking calls
    made from an event loop: a network database's I/O, a server's read."""
    return await _blocking.run(fn, *args, **kwargs)
