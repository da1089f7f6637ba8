"""Retries with exponential backoff and jitter, honouring `Retry-After`.

We retry ourselves instead of using the SDKs' built-in retries (providers build their
clients with `max_retries=0`) so that every provider follows one documented policy and
tests can inject `sleep` and `random` to check the exact delays without waiting.

Policy: a retryable failure (HTTP 408, 409, 429, 5xx, or no response at all: connection
error or timeout) is retried up to `max_retries` times. The delay before retry `n` (0-based)
is `min(max_delay, initial_delay * 2**n)`, reduced by up to `jitter` (a fraction) at random,
unless the server sent `Retry-After` / `retry-after-ms` with a value no larger than
`max_retry_after`, which is then used as is. A server that says `x-should-retry: false` is
believed. A larger `Retry-After` makes the failure final at once: waiting minutes inside a
run is worse than telling the caller.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")

RETRYABLE_STATUS = frozenset({408, 409, 429})


@dataclass(frozen=True, kw_only=True)
class Retryable:
    """How a failure may be retried; `retry_after` is the server's wish in seconds."""

    retry_after: float | None = None


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """When and how long to wait between attempts (see the module docstring)."""

    max_retries: int = 3
    initial_delay: float = 0.5
    max_delay: float = 20.0
    jitter: float = 0.25
    max_retry_after: float = 60.0
    sleep: Callable[[float], Awaitable[None]] = field(default=asyncio.sleep, repr=False)
    random: Callable[[], float] = field(default=random.random, repr=False)

    def delay(self, retry: int, retry_after: float | None) -> float:
        """Seconds to wait before retry number `retry` (0-based)."""
        if retry_after is not None and 0 <= retry_after <= self.max_retry_after:
            return retry_after
        base = min(self.max_delay, self.initial_delay * 2.0**retry)
        return base * (1 - self.jitter * self.random())

    def wait_before(self, retry: int, verdict: Retryable | None) -> float | None:
        """Seconds to wait before retry number `retry`, or None when the failure is final
        (not retryable, retries used up, or the server asks for too long a wait)."""
        if verdict is None or retry >= self.max_retries:
            return None
        ra = verdict.retry_after
        if ra is not None and ra > self.max_retry_after:
            return None
        return self.delay(retry, ra)


def status_is_retryable(status: int, headers: Mapping[str, str]) -> bool:
    """Whether an HTTP error status is worth another attempt."""
    should = headers.get("x-should-retry")
    if should == "true":
        return True
    if should == "false":
        return False
    return status in RETRYABLE_STATUS or status >= 500


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """`retry-after-ms`, else `retry-after` as seconds or as an HTTP date, else None."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    parsed = email.utils.parsedate_tz(value)
    if parsed is None:
        return None
    return max(0.0, email.utils.mktime_tz(parsed) - (time.time() if now is None else now))


async def with_retries(
    attempt: Callable[[], Awaitable[T]],
    *,
    policy: RetryPolicy,
    classify: Callable[[Exception], Retryable | None],
) -> T:
    """Run `attempt` until it succeeds, `classify` calls the failure final, or the policy
    runs out of retries; then the last exception propagates unchanged."""
    retry = 0
    while True:
        try:
            return await attempt()
        except Exception as exc:
            wait = policy.wait_before(retry, classify(exc))
            if wait is None:
                raise
            await policy.sleep(wait)
            retry += 1
