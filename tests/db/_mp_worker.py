"""Real processes (spawned) writing one backend: the harness and the workers it runs.

`run_workers` starts one spawned process per job, each with the backend already created
by the parent (the `mp_spec` fixture opens it once, so the workers never race on
creating the SQLite file or its schema), lines them up on a start barrier and returns
their results in job order. A process that does not report within `timeout` fails the
test with what every process was doing.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import queue
import threading
import time
import traceback
from collections.abc import Callable, Sequence
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


def _entry(
    index: int, fn: Callable[..., Any], args: tuple[Any, ...], barrier: Any, results: Any
) -> None:
    try:
        results.put((index, fn(*args, barrier), None))
    except BaseException:
        results.put((index, None, traceback.format_exc()))


def run_workers(
    fn: Callable[..., Any], jobs: Sequence[tuple[Any, ...]], timeout: float = 120.0
) -> list[Any]:
    """`fn(*job, barrier)` in one spawned process per job; their results in job order."""
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(len(jobs)), ctx.Queue()
    procs = [
        ctx.Process(target=_entry, args=(i, fn, job, barrier, results), daemon=True)
        for i, job in enumerate(jobs)
    ]
    for proc in procs:
        proc.start()
    out: dict[int, Any] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(out) < len(jobs):
            try:
                index, value, error = results.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(
                    f"{len(jobs) - len(out)} of {len(jobs)} worker processes did not finish "
                    f"within {timeout:g} s (exit codes: {[p.exitcode for p in procs]})"
                ) from None
            if error is not None:
                raise AssertionError(f"worker {index} failed:\n{error}")
            out[index] = value
    finally:
        for proc in procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
    return [out[i] for i in range(len(jobs))]


def start_together(barrier: Any) -> None:
    """Wait for the other workers, so their writes overlap. Only overlap depends on it: a
    peer slow to start (a loaded machine) makes the run less concurrent, not wrong."""
    with contextlib.suppress(threading.BrokenBarrierError):
        barrier.wait(timeout=60)


def append_worker(spec: tuple[str, ...], session_id: str, tag: str, n: int, barrier: Any) -> float:
    from statewise.db.testing.store_cases import append_items

    db = open_backend(spec)
    try:
        start_together(barrier)
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
        start_together(barrier)
        for _ in range(n):
            with store.begin(session) as txn:
                n = txn.state.get("n", 0)
                time.sleep(0.002)  # read, think, write: what makes `+=` race
                txn.state["n"] = n + 1
                txn.commit(source="counter")
    finally:
        db.close()
