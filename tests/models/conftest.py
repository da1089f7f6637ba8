"""Model tests run offline: real requests are off unless a loopback test opts in."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.models.fakes import FakeServer, SleepRecorder

import statewise.models
from statewise.models._guard import allow_model_requests
from statewise.models._retry import RetryPolicy


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _no_real_model_requests() -> Iterator[None]:
    previous = statewise.models.ALLOW_MODEL_REQUESTS
    statewise.models.ALLOW_MODEL_REQUESTS = False
    yield
    statewise.models.ALLOW_MODEL_REQUESTS = previous


@pytest.fixture
def fake() -> Iterator[FakeServer]:
    """A scripted HTTP server on 127.0.0.1; requests to it are allowed."""
    with FakeServer() as server, allow_model_requests(True):
        yield server


@pytest.fixture
def sleeps() -> SleepRecorder:
    return SleepRecorder()


@pytest.fixture
def retry(sleeps: SleepRecorder) -> RetryPolicy:
    """Two retries, no jitter, delays 0.5 then 1.0 unless the server says otherwise."""
    return RetryPolicy(max_retries=2, initial_delay=0.5, jitter=0.0, sleep=sleeps)
