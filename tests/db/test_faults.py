"""Exactly once under faults: a fault-injecting TCP proxy on loopback in front of the real
PostgreSQL and Redis drops connections at each point of a commit. Every round appends one
item; afterwards the item is stored exactly once if the commit reported success, and not
at all if it reported failure (a failure is reported only when the commit did not land).
"""

from __future__ import annotations

import asyncio
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from statewise.db.base import BaseDb
from statewise.db.store import SessionSpec, StateStore
from tests.db._pg_locks import wait_until_blocked
from tests.db._proxy import Fault, TcpProxy

SPEC = SessionSpec(session_id="s1", user_id="u1", app_name="app")


def _append(db: BaseDb, item: str) -> None:
    with StateStore(db).begin(SPEC) as txn:
        txn.state.setdefault("items", []).append(item)
        txn.commit(source=f"item:{item}")
        txn.close(keep=False)


def _append_on_a_loop(db: BaseDb, item: str) -> None:
    """`_append` as a server's run commits: on a shared event loop, through the
    database's async commit."""

    async def append() -> None:
        txn = await StateStore(db).abegin(SPEC)
        try:
            txn.state.setdefault("items", []).append(item)
            await txn.commit(source=f"item:{item}")
        finally:
            txn.close(keep=False)

    asyncio.run(append())


def _items(db: BaseDb) -> list[str]:
    with StateStore(db).begin(SPEC) as txn:
        items = list(txn.state.get("items", []))
        txn.close(keep=False)
        return items


def _round(
    faulty: BaseDb,
    direct: BaseDb,
    item: str,
    arm: Callable[[], None],
    append: Callable[[BaseDb, str], None] = _append,
) -> tuple[bool, int]:
    """(did the commit report success, how many times the item is stored)."""
    arm()
    try:
        append(faulty, item)
        ok = True
    except Exception:
        ok = False
    return ok, _items(direct).count(item)


def _check(outcomes: list[tuple[bool, int]], what: str) -> None:
    duplicated = sum(1 for _ok, n in outcomes if n > 1)
    lost = sum(1 for ok, n in outcomes if ok and n == 0)
    false_failures = sum(1 for ok, n in outcomes if not ok and n > 0)
    assert (duplicated, lost, false_failures) == (0, 0, 0), (
        f"{what}: {duplicated} duplicated, {lost} lost, {false_failures} reported failed "
        f"but landed, of {len(outcomes)} rounds"
    )


# ---- PostgreSQL ----------------------------------------------------------------------------


@pytest.fixture
def pg(pg_url: str) -> Iterator[tuple[str, str]]:
    psycopg = pytest.importorskip("psycopg")
    name = f"sw_test_{secrets.token_hex(4)}"
    yield pg_url, name
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def _pg(url: str, schema: str) -> BaseDb:
    from statewise.db.postgres import PostgresDb

    return PostgresDb(url, schema=schema, pool_size=2, pool_timeout=5, connect_timeout=3)


@pytest.mark.postgres
@pytest.mark.parametrize("on_loop", [False, True], ids=["sync", "event-loop"])
@pytest.mark.parametrize("fault", ["before_request", "after_request", "after_reply"])
def test_postgres_commit_through_a_dropped_connection_lands_exactly_once(
    pg: tuple[str, str], fault: Fault, on_loop: bool
) -> None:
    """Through a worker thread's pooled connection, and through the event loop's own
    connections (a server's runs)."""
    url, schema = pg
    append = _append_on_a_loop if on_loop else _append
    direct = _pg(url, schema)
    proxy = TcpProxy(url)
    faulty = _pg(proxy.url, schema)
    other = _pg(url, schema)
    try:
        _append(direct, "start")
        outcomes = []
        for i in range(5):
            # Another writer commits while the fault fires: the retry follows its commit.
            outcomes.append(
                _round(
                    faulty,
                    direct,
                    f"x{i}",
                    lambda i=i: proxy.arm(
                        fault, lambda: _append(other, f"other{i}"), f"x{i}".encode()
                    ),  # type: ignore[misc]
                    append,
                )
            )
        assert (proxy.fired, proxy.hook_errors) == (5, [])
        _check(outcomes, f"PostgreSQL{' on a loop' if on_loop else ''}, drop {fault}")
    finally:
        for db in (faulty, direct, other):
            db.close()
        proxy.close()


@pytest.mark.postgres
def test_postgres_commit_dropped_while_blocked_behind_another_writer_lands_once(
    pg: tuple[str, str],
) -> None:
    import psycopg

    url, schema = pg
    direct = _pg(url, schema)
    proxy = TcpProxy(url)
    faulty = _pg(proxy.url, schema)
    try:
        _append(direct, "start")
        outcomes = []
        for i in range(10):
            with psycopg.connect(url) as locker:
                # Another writer holds the session scope's row: our commit waits for it.
                locker.execute(
                    f'SELECT 1 FROM "{schema}".scopes WHERE kind = %s AND scope_id = %s FOR UPDATE',
                    ("session", "s1"),
                )
                result: dict[str, Any] = {}

                def commit(i: int = i, result: dict[str, Any] = result) -> None:
                    try:
                        _append(faulty, f"x{i}")
                        result["ok"] = True
                    except Exception as exc:
                        result["ok"] = False
                        result["error"] = exc

                thread = threading.Thread(target=commit)
                thread.start()
                wait_until_blocked(url, schema)
                proxy.drop_all()  # the client loses the commit still waiting on the server
                time.sleep(0.3)  # the client reconnects and sends it again
                locker.rollback()  # the other writer lets go
            thread.join(30)
            assert not thread.is_alive()
            outcomes.append((bool(result.get("ok")), _items(direct).count(f"x{i}")))
        _check(outcomes, "PostgreSQL, drop while blocked")
    finally:
        faulty.close()
        direct.close()
        proxy.close()


@pytest.mark.postgres
@pytest.mark.parametrize("fault", ["before_request", "after_request", "after_reply"])
@pytest.mark.parametrize("stage", ["lock", "commit"])
def test_postgres_commit_after_a_lost_race_through_a_dropped_connection_lands_exactly_once(
    pg: tuple[str, str], fault: Fault, stage: str
) -> None:
    """A commit that lost a race commits again under the session's lock (`commit_rebased`):
    its connection dropped while it takes the lock, or with the rebased commit in flight,
    still lands exactly once, after the writer it lost to."""
    url, schema = pg
    direct = _pg(url, schema)
    proxy = TcpProxy(url)
    faulty = _pg(proxy.url, schema)
    other = _pg(url, schema)
    locked = faulty.commit_rebased

    def arm_then_commit(*args: Any) -> Any:
        # The first attempt lost; the fault waits for this one's lock or its commit. One
        # fault per commit: if the commit comes through here again after it (a retry),
        # that attempt must land exactly once without a second fault.
        if armed_for[0] != marker[0]:
            armed_for[0] = marker[0]
            proxy.arm(fault, None, b"FOR UPDATE" if stage == "lock" else marker[0])
        return locked(*args)

    faulty.commit_rebased = arm_then_commit  # type: ignore[method-assign,assignment]
    marker = [b""]
    armed_for = [b""]
    try:
        _append(direct, "start")
        outcomes = []
        store = StateStore(faulty)
        for i in range(4):
            marker[0] = f"x{i}".encode()
            txn = store.begin(SPEC)
            try:
                txn.state.setdefault("items", []).append(f"x{i}")
                _append(other, f"other{i}")  # lands first: the commit below loses once
                txn.commit(source=f"item:x{i}")
                ok = True
            except Exception:
                ok = False
            finally:
                txn.close(keep=False)
            outcomes.append((ok, _items(direct).count(f"x{i}")))
        assert proxy.fired == 4
        _check(outcomes, f"PostgreSQL, rebased commit, drop {fault} at the {stage}")
        assert all(_items(direct).count(f"other{i}") == 1 for i in range(4))
    finally:
        for db in (faulty, direct, other):
            db.close()
        proxy.close()


# ---- Redis -------------------------------------------------------------------------------


@pytest.fixture
def rprefix(redis_url: str) -> Iterator[tuple[str, str]]:
    redis = pytest.importorskip("redis")
    name = f"sw-test-{secrets.token_hex(4)}"
    yield redis_url, name
    client = redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(match="{" + name + "}*"))
    if keys:
        client.delete(*keys)
    client.close()


def _redis(url: str, prefix: str, client: Any = None) -> BaseDb:
    from statewise.db.redis import RedisDb

    return RedisDb(url, prefix=prefix, client=client)


@pytest.mark.redis
def test_redis_client_retry_after_another_writers_commit_does_not_duplicate(
    rprefix: tuple[str, str],
) -> None:
    """redis-py's default Retry resends a script whose reply was lost; another writer
    committed in between."""
    import redis

    url, prefix = rprefix
    proxy = TcpProxy(url)
    host, port = proxy.url.split("//", 1)[1].split("/", 1)[0].split(":")
    client = redis.Redis(host=host, port=int(port))  # the default Retry
    faulty = _redis(proxy.url, prefix, client=client)
    direct, other = _redis(url, prefix), _redis(url, prefix)
    try:
        _append(direct, "start")
        outcomes = [
            _round(
                faulty,
                direct,
                f"x{i}",
                lambda i=i: proxy.arm(
                    "after_request", lambda: _append(other, f"other{i}"), f"x{i}".encode()
                ),  # type: ignore[misc]
            )
            for i in range(5)
        ]
        _check(outcomes, "Redis with redis-py's Retry")
    finally:
        for db in (faulty, direct, other):
            db.close()
        client.close()
        proxy.close()


@pytest.mark.redis
@pytest.mark.parametrize("on_loop", [False, True], ids=["sync", "event-loop"])
@pytest.mark.parametrize("fault", ["before_request", "after_request", "after_reply"])
def test_redis_url_client_commit_through_a_dropped_connection_lands_exactly_once(
    rprefix: tuple[str, str], fault: Fault, on_loop: bool
) -> None:
    """The client built from a URL (and its redis.asyncio twin, which a server's runs
    commit through): a commit that landed is never reported as failed."""
    url, prefix = rprefix
    append = _append_on_a_loop if on_loop else _append
    proxy = TcpProxy(url)
    faulty = _redis(proxy.url, prefix)
    direct, other = _redis(url, prefix), _redis(url, prefix)
    try:
        _append(direct, "start")
        outcomes = [
            _round(
                faulty,
                direct,
                f"x{i}",
                lambda i=i: proxy.arm(fault, lambda: _append(other, f"other{i}"), f"x{i}".encode()),  # type: ignore[misc]
                append,
            )
            for i in range(5)
        ]
        assert proxy.fired == 5
        _check(outcomes, f"Redis URL client{' on a loop' if on_loop else ''}, drop {fault}")
    finally:
        for db in (faulty, direct, other):
            db.close()
        proxy.close()
