"""RedisDb on the event loop: one `redis.asyncio` client per event loop.

A server's state GET reads through it (`RedisDb.aread_scopes`), and its runs commit
through it (`RedisDb.acommit`), instead of hopping to a worker thread: the read never
queues behind runs' work for a thread, and a commit, one round trip, costs no thread
handoff (a hop and the wait for the loop's interpreter lock cost more than it). A client's
connections belong to the loop that opened them, so each loop gets its own client, and
the loop closes it as it shuts down: the client is held by an async generator of that loop
(`_held`), which asyncio (and uvloop) close when the loop ends (`shutdown_asyncgens`,
as `asyncio.run` and servers do), or as soon as nothing holds it (`close`).
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import AsyncGenerator, Callable
from typing import Any

_Held = tuple[weakref.ref[asyncio.AbstractEventLoop], Any, AsyncGenerator[None, None]]


class LoopClients:
    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._lock = threading.Lock()
        self._by_loop: dict[int, _Held] = {}
        self._closed = False

    async def client(self) -> Any:
        """This loop's client (opened at its first read)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            held = self._by_loop.get(id(loop))
            if held is not None and held[0]() is loop:
                return held[1]
            for key, (ref, _, _) in list(self._by_loop.items()):
                gone = ref()
                if gone is None or gone.is_closed():  # its loop closed the client
                    del self._by_loop[key]
            if self._closed:
                raise RuntimeError("closed")
            client = self._make()
            holder = _held(client)
            self._by_loop[id(loop)] = (weakref.ref(loop), client, holder)
        await holder.__anext__()  # the loop now closes the client when it shuts down
        return client

    def close(self) -> None:
        """Let go of every loop's client: each loop closes its own (see the docstring)."""
        with self._lock:
            self._closed = True
            self._by_loop.clear()


async def _held(client: Any) -> AsyncGenerator[None, None]:
    try:
        yield
    finally:
        await client.aclose()
