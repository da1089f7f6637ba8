"""PostgresDb on the event loop: psycopg `AsyncConnection`s of each event loop.

A server's state GET reads through them (`PostgresDb.aread_scopes`) and its runs commit
through them (`PostgresDb.acommit`) instead of hopping to a worker thread: the read never
queues behind runs' work for a thread, and a commit, one round trip, costs no thread
handoff (a hop and the thread's wait for the loop's interpreter lock cost more than it).
Reads and commits use a `LoopConnections` each, so a read never waits for a connection a
commit holds.

A connection belongs to the loop that opened it (psycopg's async I/O waits on that loop),
so each loop has its own: up to `size` at once, idle ones reused. (psycopg_pool's
`AsyncConnectionPool` runs tasks of its own on one loop and must be closed on it; these
connections need neither, so a loop that ends without a word leaves nothing running.) The
connections of a loop that has closed are closed at the next use from another loop, and all
are closed by `close` (psycopg closes a connection without awaiting anything, so that
needs no loop).
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import psycopg
from psycopg.pq import TransactionStatus
from psycopg_pool import PoolTimeout

from statewise.db._pg_arrays import ADAPTERS

T = TypeVar("T")
_Conn = psycopg.AsyncConnection[tuple[Any, ...]]


@dataclass
class _LoopSet:
    """One loop's connections."""

    loop: weakref.ref[asyncio.AbstractEventLoop]
    slots: asyncio.Semaphore
    idle: list[_Conn] = field(default_factory=list)
    opened: list[_Conn] = field(default_factory=list)


class LoopConnections:
    def __init__(self, url: str, connect_timeout: float, size: int, wait: float) -> None:
        self._url = url
        self._connect_timeout = max(1, round(connect_timeout))
        self._size = size
        self._wait = wait
        self._lock = threading.Lock()
        self._by_loop: dict[int, _LoopSet] = {}
        self._closed = False

    async def read(self, fn: Callable[[_Conn], Awaitable[T]]) -> T:
        """Run an idempotent read on one of this loop's connections; on a dropped
        connection, once more on a fresh one (raises psycopg's OperationalError otherwise)."""
        for attempt in (1, 2):
            async with self.connection() as conn:
                try:
                    return await fn(conn)
                except psycopg.OperationalError:
                    if attempt == 2 or not (conn.broken or conn.closed):
                        raise
        raise AssertionError("unreachable")  # pragma: no cover

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[_Conn]:
        """One of this loop's connections, for this block alone: an idle one, or a new one
        while fewer than `size` are open (`PoolTimeout` when all were busy for `wait`
        seconds, as psycopg_pool's pools raise). One left mid-statement (an error, a
        cancelled caller) or dropped is closed instead of kept."""
        loop_set = self._loop_set()
        if loop_set.slots.locked():  # (`wait_for` costs a task: only when it may wait)
            try:
                await asyncio.wait_for(loop_set.slots.acquire(), self._wait)
            except TimeoutError:
                raise PoolTimeout(
                    f"all {self._size} connections were busy for {self._wait:g} s"
                ) from None
        else:
            await loop_set.slots.acquire()
        try:
            conn = loop_set.idle.pop() if loop_set.idle else await self._open(loop_set)
            try:
                yield conn
            finally:
                if (
                    conn.closed
                    or conn.broken
                    or conn.info.transaction_status != TransactionStatus.IDLE
                ):
                    self._forget(loop_set, conn)
                elif self._closed:
                    _close_now(conn)
                else:
                    loop_set.idle.append(conn)
        finally:
            loop_set.slots.release()

    def _loop_set(self) -> _LoopSet:
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._closed:
                raise psycopg.OperationalError("the database was closed")
            found = self._by_loop.get(id(loop))
            if found is not None and found.loop() is loop:
                return found
            orphans = self._take_orphans()
            found = self._by_loop[id(loop)] = _LoopSet(
                weakref.ref(loop), asyncio.Semaphore(self._size)
            )
        for conn in orphans:
            _close_now(conn)
        return found

    async def _open(self, loop_set: _LoopSet) -> _Conn:
        conn = await psycopg.AsyncConnection.connect(
            self._url, autocommit=True, connect_timeout=self._connect_timeout, context=ADAPTERS
        )
        with self._lock:
            closed = self._closed
            if not closed:
                loop_set.opened.append(conn)
        if closed:
            _close_now(conn)
            raise psycopg.OperationalError("the database was closed")
        return conn

    def _forget(self, loop_set: _LoopSet, conn: _Conn) -> None:
        with self._lock:
            if conn in loop_set.opened:
                loop_set.opened.remove(conn)
        _close_now(conn)

    def _take_orphans(self) -> list[_Conn]:
        """The connections of loops that are closed or gone (the lock held)."""
        orphans: list[_Conn] = []
        for key, loop_set in list(self._by_loop.items()):
            loop = loop_set.loop()
            if loop is None or loop.is_closed():
                del self._by_loop[key]
                orphans += loop_set.opened
        return orphans

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conns = [conn for loop_set in self._by_loop.values() for conn in loop_set.opened]
            self._by_loop.clear()
        for conn in conns:
            _close_now(conn)


def _close_now(conn: _Conn) -> None:
    """Close an async connection from any thread, without its loop: psycopg's `close` is a
    coroutine that awaits nothing (it finishes the libpq connection)."""
    closing = conn.close()
    try:
        closing.send(None)
    except StopIteration:
        return
    closing.close()  # pragma: no cover - a psycopg whose close awaits: finish it directly
    conn.pgconn.finish()  # pragma: no cover
