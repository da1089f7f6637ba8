"""A run's deadline (`run_timeout=`): past it, the run stops and ends `failed`.

The deadline is checked where a run can stop cleanly (before each model step, each
workflow step and each commit) and bounds every wait that might never end (a model
request, a tool call): a model that answers with tool calls forever stops at its next
step, one that never answers stops when its time is up. Only waits that hold no event of
the run's stream are bounded this way (a streamed run's coroutine may move between tasks
at each event it emits, and `asyncio.timeout` belongs to one task). Code that blocks the
thread (a sync tool in an endless loop) cannot be interrupted from Python; the run stops
at its next check.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import time
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from statewise.exceptions import ConfigurationError, RunTimeoutError

T = TypeVar("T")

DEADLINE_KEY = "statewise.deadline"
"""Where a run keeps its `Deadline` in the run context's metadata (shared with the agents
it runs nested: team members, a workflow step's agents)."""


def check_run_timeout(value: float | None, what: str = "run_timeout") -> float | None:
    """`value` as seconds, or None (no deadline); a clear error for anything else."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigurationError(f"{what} must be a number of seconds or None, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ConfigurationError(f"{what} must be a positive number of seconds, got {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class Deadline:
    seconds: float
    at: float  # on the monotonic clock

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(seconds=seconds, at=time.monotonic() + seconds)

    @property
    def reason(self) -> str:
        return f"run exceeded its run_timeout of {self.seconds:g} s"

    def check(self) -> None:
        """Raise `RunTimeoutError` once the deadline has passed."""
        if time.monotonic() >= self.at:
            raise RunTimeoutError(self.reason)

    async def bound(self, awaitable: Awaitable[T]) -> T:
        """Await `awaitable` for at most the time left (it must not emit run events)."""
        if time.monotonic() >= self.at:
            if inspect.iscoroutine(awaitable):
                awaitable.close()  # never started: nothing to warn about
            raise RunTimeoutError(self.reason)
        timeout = asyncio.timeout_at(asyncio.get_running_loop().time() + self.at - time.monotonic())
        try:
            async with timeout:
                return await awaitable
        except TimeoutError:
            if timeout.expired():
                raise RunTimeoutError(self.reason) from None
            raise


def deadline_of(metadata: Mapping[str, Any]) -> Deadline | None:
    deadline = metadata.get(DEADLINE_KEY)
    return deadline if isinstance(deadline, Deadline) else None


async def bounded(metadata: Mapping[str, Any], awaitable: Awaitable[T]) -> T:
    """`awaitable`, bounded by the run's deadline if it has one."""
    deadline = deadline_of(metadata)
    if deadline is None:
        return await awaitable
    return await deadline.bound(awaitable)
