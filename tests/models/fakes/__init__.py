"""Fake provider servers for tests: real HTTP on 127.0.0.1, scripted replies.

They live under `tests/` rather than in the package: they are test fixtures, stdlib-only,
and shipping them would make them public API. Each protocol module builds `Reply`s in the
documented wire shapes of one API; `FakeServer` serves them in order and records requests.
"""

from tests.models.fakes.server import FakeServer, Received, Reply

__all__ = ["FakeServer", "Received", "Reply", "SleepRecorder"]


class SleepRecorder:
    """Stands in for `asyncio.sleep` in retry policies: records delays, waits for nothing."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
