"""Run in spawned processes by test_multiprocess.py: open a backend, append items."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

from statewise.db.base import BaseDb


def open_backend(spec: tuple[str, ...]) -> BaseDb:
    kind = spec[0]
    if kind == "postgres":
        from statewise.db.postgres import PostgresDb

        return PostgresDb(spec[1], schema=spec[2], pool_size=2)
    if kind == "redis":
        from statewise.db.redis import RedisDb

        return RedisDb(spec[1], prefix=spec[2])
    from statewise.db.sqlite import SqliteDb

    return SqliteDb(db_file=spec[1])


def append_worker(spec: tuple[str, ...], session_id: str, tag: str, n: int, barrier: Any) -> float:
    from statewise.db.testing.store_cases import append_items

    db = open_backend(spec)
    try:
        barrier.wait(timeout=60)
        start = time.monotonic()
        append_items(db, session_id, [f"{tag}-{i}" for i in range(n)])
        return time.monotonic() - start
    finally:
        db.close()


def increment_worker(spec: tuple[str, ...], session_id: str, n: int, barrier: Any) -> None:
    """`session_state["n"] += 1`, `n` times, each its own checkout → commit."""
    from statewise.db.store import SessionSpec, StateStore

    db = open_backend(spec)
    try:
        store = StateStore(db)
        session = SessionSpec(session_id=session_id, user_id="u1", app_name="app")
        # The barrier only makes the writers overlap more; a peer that was slow to start
        # must not fail the property under test (no silent lost update).
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait(timeout=60)
        for _ in range(n):
            ws = store.checkout(session)
            try:
                n = ws.root.get("n", 0)
                time.sleep(0.002)  # read, think, write: what makes `+=` race
                ws.root["n"] = n + 1
                store.commit(ws, source="counter")
            finally:
                store.release(ws)
    finally:
        db.close()
