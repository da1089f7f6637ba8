"""The backends under attack: SQLite, PostgreSQL and Redis (the fixtures of tests/db)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from statewise.db.testing import Harness, registered_backends
from tests.db.conftest import pg_url, redis_url  # noqa: F401 (fixtures)

BACKENDS = ["sqlite", "postgres", "redis"]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Iterator[Harness]:
    with registered_backends()[request.param]() as harness:
        yield harness


@pytest.fixture(autouse=True)
def _encryption_key(monkeypatch: pytest.MonkeyPatch) -> None:
    from cryptography.fernet import Fernet

    monkeypatch.setenv("STATEWISE_ENCRYPTION_KEY", Fernet.generate_key().decode())
