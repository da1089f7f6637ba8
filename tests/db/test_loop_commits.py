"""Commits from a shared event loop (a server's runs) on PostgreSQL and Redis go through
the database's async driver on that loop, not a worker thread: they land while every
worker thread is busy, in one round trip; a lost race is still rebased; a server that went
away gives a clear error and writes nothing. (What each backend does with a cancelled
caller is tested with each: they are held up differently.)"""

from __future__ import annotations

import asyncio
import secrets
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from statewise._workers import BLOCKING_THREADS, run_blocking
from statewise.db.base import BaseDb
from statewise.db.store import SessionSpec, StateStore
from statewise.exceptions import DatabaseUnavailableError
from tests.db._proxy import TcpProxy


@dataclass
class Backend:
    url: str
    open: Callable[[str], BaseDb]  # the database at a URL (the server's, or a proxy's)
    gone: str  # what the error says when the server went away


@pytest.fixture(
    params=[
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("redis", marks=pytest.mark.redis),
    ]
)
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "postgres":
        import psycopg

        from statewise.db.postgres import PostgresDb

        url = request.getfixturevalue("pg_url")
        schema = f"sw_test_{secrets.token_hex(4)}"
        yield Backend(url, lambda at: PostgresDb(at, schema=schema), "PostgreSQL at")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    else:
        import redis

        from statewise.db.redis import RedisDb

        url = request.getfixturevalue("redis_url")
        prefix = f"sw-test-{secrets.token_hex(4)}"
        yield Backend(url, lambda at: RedisDb(at, prefix=prefix), "failed during commit")
        client = redis.Redis.from_url(url)
        keys = list(client.scan_iter(match="{" + prefix + "}*"))
        if keys:
            client.delete(*keys)
        client.close()


def test_a_commit_on_the_event_loop_is_one_round_trip_and_waits_for_no_worker_thread(
    backend: Backend,
) -> None:
    """With every worker thread busy (slow sync work elsewhere in the server), a run's
    commit still lands at once."""
    proxy = TcpProxy(backend.url)
    released = threading.Event()
    try:
        with backend.open(proxy.url) as db:
            store = StateStore(db)
            spec = SessionSpec(session_id="s1", user_id="u1", app_name="app")

            async def main() -> list[int]:
                txn = await store.abegin(spec)
                txn.state["items"] = ["a"]
                await txn.commit(source="first")  # (connects this loop's connection)
                busy = [
                    asyncio.ensure_future(run_blocking(released.wait))
                    for _ in range(BLOCKING_THREADS)
                ]
                await asyncio.sleep(0.05)
                trips = []
                try:
                    for item in ("b", "c"):
                        txn.state["items"].append(item)
                        before = proxy.round_trips
                        await asyncio.wait_for(txn.commit(source=item), 5)
                        trips.append(proxy.round_trips - before)
                finally:
                    released.set()
                    await asyncio.gather(*busy)
                    txn.close()
                return trips

            assert asyncio.run(main()) == [1, 1]
            assert store.read_state(spec)[0] == {"items": ["a", "b", "c"]}
            assert [e.seq for e in db.read_events("s1")] == [1, 2, 3]
    finally:
        released.set()
        proxy.close()


def test_a_commit_on_the_loop_that_loses_a_race_is_rebased(backend: Backend) -> None:
    with backend.open(backend.url) as db:
        store = StateStore(db)
        spec = SessionSpec(session_id="s1")

        async def main() -> None:
            first = await store.abegin(spec)
            first.state["items"] = []
            await first.commit(source="start")
            second = await StateStore(db).abegin(spec)  # a second process's view
            first.state["items"].append("a")
            second.state["items"].append("b")
            await first.commit(source="a")
            changed = await second.commit(source="b")  # lost to `first`: rebased
            assert changed.conflicts == []
            first.close()
            second.close()

        asyncio.run(main())
        assert store.read_state(spec)[0] == {"items": ["a", "b"]}


def test_a_commit_on_the_loop_with_the_server_gone_fails_clearly_and_writes_nothing(
    backend: Backend,
) -> None:
    proxy = TcpProxy(backend.url)
    try:
        with backend.open(proxy.url) as db, backend.open(backend.url) as direct:
            spec = SessionSpec(session_id="s1")

            async def main() -> None:
                txn = await StateStore(db).abegin(spec)
                txn.state["items"] = ["a"]
                await txn.commit(source="start")
                proxy.server_gone()
                txn.state["items"].append("b")
                with pytest.raises(DatabaseUnavailableError, match=backend.gone):
                    await txn.commit(source="b")
                txn.close(keep=False)

            asyncio.run(main())
            assert StateStore(direct).read_state(spec)[0] == {"items": ["a"]}
    finally:
        proxy.close()


@pytest.mark.postgres
def test_a_commit_on_the_loop_after_a_lost_race_queues_at_once(pg_url: str) -> None:
    """Like a sync commit: once one of its commits lost a race, a writer's next commit
    to the session skips the try it would lose and goes straight to the locked rebase."""
    import psycopg

    from statewise.db.postgres import PostgresDb

    schema = f"sw_test_{secrets.token_hex(4)}"
    try:
        with PostgresDb(pg_url, schema=schema) as db:
            store, other = StateStore(db), StateStore(db)
            spec = SessionSpec(session_id="s1")
            tried: list[int] = []
            real_acommit = db.acommit

            async def acommit(commit: Any) -> Any:
                tried.append(len(commit.writes))
                return await real_acommit(commit)

            async def other_appends(item: str) -> None:
                txn = await other.abegin(spec)
                txn.state["items"].append(item)
                await txn.commit(source="other")
                txn.close()

            async def main() -> None:
                mine = await store.abegin(spec)
                mine.state["items"] = []
                await mine.commit(source="start")
                db.acommit = acommit  # type: ignore[method-assign]
                for i in range(3):
                    await other_appends(f"theirs{i}")
                    mine.state["items"].append(f"mine{i}")
                    tried.clear()
                    await mine.commit(source="tool")
                    # The first tries (and loses); the next ones queue at once.
                    assert tried == ([1] if i == 0 else []), (i, tried)
                mine.close()

            asyncio.run(main())
            items = store.read_state(spec)[0]["items"]
            assert sorted(items) == sorted(
                [f"theirs{i}" for i in range(3)] + [f"mine{i}" for i in range(3)]
            )
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
