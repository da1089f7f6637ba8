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

from statewise.state.gcpause import collector_tuned


@asynccontextmanager
async def lifespan(app: Any) -> AsyncIterator[None]:
    if not collector_tuned():
        yield
        return
    gc.collect()  # (garbage frozen now would stay until shutdown)
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
