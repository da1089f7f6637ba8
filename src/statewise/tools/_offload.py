"""The worker threads a sync tool (or a sync tool hook) runs in on a shared event loop.

Their own threads, not the ones a network database's I/O uses (`run_blocking`): slow
tools filling those would hold back every run's commits. As many as asyncio's default
executor has, which tools ran in before; a hop here costs a fraction of `to_thread`'s
(see `statewise._workers`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from statewise._workers import Workers

P = ParamSpec("P")
T = TypeVar("T")

TOOL_THREADS = min(32, (os.cpu_count() or 1) + 4)

_tools = Workers(TOOL_THREADS, "statewise-tool")


async def off_loop(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`fn(*args, **kwargs)` in a tool thread, with the caller's context."""
    return await _tools.run(fn, *args, **kwargs)
