"""What the server does as it starts and as it stops.

When the process let statewise manage its garbage collector (`tune_collector()`, which
`statewise serve` calls), every object alive at startup (modules, classes, routes, the
validators pydantic built, the agents served) is moved out of the collector's sight
(`gc.freeze`): they live as long as the server, and each full collection would walk all
of them again with the event loop stopped meanwhile, a pause that shows as the server's
tail latency (`bench/bench_server.py`). Objects made later are collected as before. At
shutdown they go back (`gc.unfreeze`), so a process that starts one app after another (a
test suite) does not keep their cyclic garbage.

An app mounted in a host application (`create_app()` inside another FastAPI app) leaves
the collector alone: the host owns its process.
"""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from statewise import collector_tuned


@asynccontextmanager
async def lifespan(app: Any) -> AsyncIterator[None]:
    try:
        if not collector_tuned():
            yield
            return
        gc.collect()  # (garbage frozen now would stay until shutdown)
        gc.freeze()
        try:
            yield
        finally:
            gc.unfreeze()
    finally:
        _close_owned_databases(app)


def _close_owned_databases(app: Any) -> None:
    """Close the databases of an app that owns them (`statewise serve` built it from an
    app file, `app.state.statewise_owns_databases`) while the process can still join
    their pools' threads: a pool left to the collector may be collected on one of its own
    threads, which cannot join itself (psycopg_pool then prints a traceback at exit)."""
    state: Any = getattr(app, "state", None)
    if not getattr(state, "statewise_owns_databases", False):
        return
    for db, _served in state.statewise_registry.databases():
        db.close()
