"""Test-wide settings: real model requests are switched off (loopback tests opt back in)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import statewise.models


@pytest.fixture(autouse=True)
def _no_real_model_requests(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(statewise.models, "ALLOW_MODEL_REQUESTS", False)
    monkeypatch.delenv("STATEWISE_DB_URL", raising=False)
    yield
