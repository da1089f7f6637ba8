"""Backends for the conformance suite: memory and SQLite always; PostgreSQL and Redis when
their test servers answer (STATEWISE_TEST_POSTGRES_URL / STATEWISE_TEST_REDIS_URL).

An unreachable server skips its tests with the reason, except under CI=true, where it is a
failure. Every harness uses its own schema / key prefix (random suffix) and drops it."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from functools import cache
from pathlib import Path

import pytest

from statewise.db.testing import Harness, register_backend, registered_backends
from tests.db._mp_worker import open_backend

POSTGRES_URL = os.environ.get(
    "STATEWISE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
REDIS_URL = os.environ.get("STATEWISE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
IN_CI = os.environ.get("CI", "").lower() == "true"


@cache
def postgres_problem() -> str | None:
    """Why the PostgreSQL test server cannot be used, or None."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed (pip install 'statewise[postgres]')"
    try:
        with psycopg.connect(POSTGRES_URL, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        from statewise.db.url import mask_password

        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"PostgreSQL test server {mask_password(POSTGRES_URL)} unreachable: {first}"
    return None


@cache
def redis_problem() -> str | None:
    try:
        import redis
    except ImportError:
        return "redis-py is not installed (pip install 'statewise[redis]')"
    try:
        client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3)
        client.ping()
        client.close()
    except redis.RedisError as exc:
        from statewise.db.url import mask_password

        return f"Redis test server {mask_password(REDIS_URL)} unreachable: {exc}"
    return None


def require(problem: str | None) -> None:
    if problem is None:
        return
    if IN_CI:
        pytest.fail(f"{problem} (CI=true: the test servers must be up)", pytrace=False)
    pytest.skip(problem)


def _guarded(
    problem: Callable[[], str | None],
    make: Callable[[], Callable[[], AbstractContextManager[Harness]]],
) -> Callable[[], AbstractContextManager[Harness]]:
    @contextmanager
    def factory() -> Iterator[Harness]:
        require(problem())
        with make()() as harness:
            yield harness

    return factory


def _postgres() -> Callable[[], AbstractContextManager[Harness]]:
    from statewise.db.testing._pg import postgres_backend

    return postgres_backend(POSTGRES_URL)


def _redis() -> Callable[[], AbstractContextManager[Harness]]:
    from statewise.db.testing._redis import redis_backend

    return redis_backend(REDIS_URL)


register_backend("postgres", _guarded(postgres_problem, _postgres))
register_backend("redis", _guarded(redis_problem, _redis))


@pytest.fixture(params=sorted(registered_backends()))
def harness(request: pytest.FixtureRequest) -> Iterator[Harness]:
    with registered_backends()[request.param]() as h:
        yield h


@pytest.fixture
def pg_url() -> str:
    require(postgres_problem())
    return POSTGRES_URL


@pytest.fixture
def redis_url() -> str:
    require(redis_problem())
    return REDIS_URL


@pytest.fixture(params=["sqlite", "postgres", "redis"])
def mp_spec(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, ...]]:
    """A backend for spawned worker processes (`tests.db._mp_worker`), as a picklable
    spec: its own SQLite file, PostgreSQL schema or Redis key prefix, created (schema
    migrated) here, once, before any worker opens it, and dropped afterwards."""
    if request.param == "sqlite":
        spec: tuple[str, ...] = ("sqlite", str(tmp_path / "mp.db"))
    elif request.param == "postgres":
        spec = ("postgres", request.getfixturevalue("pg_url"), f"sw_mp_{secrets.token_hex(4)}")
    else:
        spec = ("redis", request.getfixturevalue("redis_url"), f"sw-mp-{secrets.token_hex(4)}")
    open_backend(spec).close()
    yield spec
    if spec[0] == "postgres":
        import psycopg

        with psycopg.connect(spec[1], autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{spec[2]}" CASCADE')
    elif spec[0] == "redis":
        import redis

        client = redis.Redis.from_url(spec[1])
        keys = list(client.scan_iter(match="{" + spec[2] + "}*"))
        for i in range(0, len(keys), 500):
            client.delete(*keys[i : i + 500])
        client.close()
