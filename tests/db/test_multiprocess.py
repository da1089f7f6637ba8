"""Real processes (spawned) writing through StateStore: no lost update, no blocking."""

from __future__ import annotations

import multiprocessing
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from statewise.db.testing.store_cases import append_items, stored_state
from tests.db._mp_worker import append_worker, open_backend

pytestmark = pytest.mark.slow
PROCESSES, COMMITS = 4, 100


@pytest.fixture(params=["sqlite", "postgres", "redis"])
def spec(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, ...]]:
    if request.param == "sqlite":
        yield ("sqlite", str(tmp_path / "mp.db"))
        return
    url = request.getfixturevalue("pg_url" if request.param == "postgres" else "redis_url")
    if request.param == "postgres":
        import psycopg

        schema = f"sw_mp_{secrets.token_hex(4)}"
        yield ("postgres", url, schema)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    else:
        import redis

        prefix = f"sw-mp-{secrets.token_hex(4)}"
        yield ("redis", url, prefix)
        client = redis.Redis.from_url(url)
        keys = list(client.scan_iter(match="{" + prefix + "}*"))
        for i in range(0, len(keys), 500):
            client.delete(*keys[i : i + 500])
        client.close()


def _run(spec: tuple[str, ...], sessions: list[str]) -> list[float]:
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager, ctx.Pool(PROCESSES) as pool:
        barrier = manager.Barrier(PROCESSES)
        jobs = [
            pool.apply_async(append_worker, (spec, sessions[n], f"p{n}", COMMITS, barrier))
            for n in range(PROCESSES)
        ]
        return [job.get(timeout=120) for job in jobs]


def test_four_processes_appending_to_one_session_keep_all_400_items(spec: tuple[str, ...]) -> None:
    db = open_backend(spec)
    try:
        append_items(db, "shared", ["seed"])
        _run(spec, ["shared"] * PROCESSES)
        items = stored_state(db, "shared")["items"]
        assert len(items) == PROCESSES * COMMITS + 1
        expected = {"seed"} | {f"p{n}-{i}" for n in range(PROCESSES) for i in range(COMMITS)}
        assert set(items) == expected
        for n in range(PROCESSES):
            assert [x for x in items if x.startswith(f"p{n}-")] == [
                f"p{n}-{i}" for i in range(COMMITS)
            ]
    finally:
        db.close()


def test_four_processes_on_distinct_sessions_all_finish(spec: tuple[str, ...]) -> None:
    sessions = [f"own-{n}" for n in range(PROCESSES)]
    durations = _run(spec, sessions)
    db = open_backend(spec)
    try:
        for n, sid in enumerate(sessions):
            assert stored_state(db, sid)["items"] == [f"p{n}-{i}" for i in range(COMMITS)]
    finally:
        db.close()
    assert max(durations) < 60, durations
