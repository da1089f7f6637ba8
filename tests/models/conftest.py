"""Model tests run offline: real requests are off unless a loopback test opts in."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import statewise.models


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
def allow_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    """Opt in: only for tests whose provider talks to a fake server on 127.0.0.1."""
    monkeypatch.setattr(statewise.models, "ALLOW_MODEL_REQUESTS", True)
