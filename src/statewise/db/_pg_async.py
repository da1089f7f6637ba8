"""PostgresDb's reads on the event loop: one psycopg `AsyncConnection` per event loop.

A server's state GET reads through it (`PostgresDb.aread_scopes`) instead of hopping to a
worker thread: the read never queues behind runs' work for a thread, nor for a pooled
connection a commit holds. A connection belongs to the loop that opened it (psycopg's async
I/O waits on that loop), so each loop gets its own; one of a loop that has closed is closed
at the next read from another loop, and all are closed by `close` (psycopg closes a
connection without awaiting anything, so that needs no loop).
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import psycopg

T = TypeVar("T")
_Conn = psycopg.AsyncConnection[tuple[Any, ...]]


class LoopConnections:
    def __init__(self, url: str, connect_timeout: float) -> None:
        self._url = url
        self._connect_timeout = max(1, round(connect_timeout))
        self._lock = threading.Lock()
        self._by_loop: dict[int, tuple[weakref.ref[asyncio.AbstractEventLoop], _Conn]] = {}
        self._closed = False

    async def read(self, fn: Callable[[_Conn], Awaitable[T]]) -> T:
        """Run an idempotent read on this loop's connection; on a dropped connection,
        once more on a fresh one (raises psycopg's OperationalError otherwise)."""
        for attempt in (1, 2):
            conn = await self._connection()
            try:
                return await fn(conn)
            except psycopg.OperationalError:
                if attempt == 2 or not (conn.broken or conn.closed):
                    raise
                self._forget(conn)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _connection(self) -> _Conn:
        loop = asyncio.get_running_loop()
        with self._lock:
            entry = self._by_loop.get(id(loop))
        if entry is not None and entry[0]() is loop and not entry[1].closed:
            return entry[1]
        self._close_orphans()
        conn = await psycopg.AsyncConnection.connect(
            self._url, autocommit=True, connect_timeout=self._connect_timeout
        )
        with self._lock:
            entry = self._by_loop.get(id(loop))
            ours = entry is not None and entry[0]() is loop and not entry[1].closed
            if not ours and not self._closed:
                self._by_loop[id(loop)] = (weakref.ref(loop), conn)
                return conn
        _close_now(conn)  # closed meanwhile, or another read of this loop connected first
        if entry is None or not ours:
            raise psycopg.OperationalError("the database was closed")
        return entry[1]

    def _forget(self, conn: _Conn) -> None:
        with self._lock:
            for key, (_, held) in list(self._by_loop.items()):
                if held is conn:
                    del self._by_loop[key]
        _close_now(conn)

    def _close_orphans(self) -> None:
        """Close the connections of loops that are closed or gone."""
        with self._lock:
            orphans = []
            for key, (ref, conn) in list(self._by_loop.items()):
                loop = ref()
                if loop is None or loop.is_closed():
                    del self._by_loop[key]
                    orphans.append(conn)
        for conn in orphans:
            _close_now(conn)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conns = [conn for _, conn in self._by_loop.values()]
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
