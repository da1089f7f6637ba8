"""Backend throughput: one table, SQLite vs PostgreSQL vs Redis, side by side.

    python bench/bench_backends.py            # 3 s per cell
    python bench/bench_backends.py --quick    # 1 s per cell
    python bench/bench_backends.py --only PostgreSQL --shared   # one backend, shared cells

Runs per second of one-tool-call runs (the tool appends one item), with 1, 4 and 16
concurrent worker *processes* (started once, reused for every cell), each worker on its
own session ("distinct") or all on one session ("shared": every commit races the others
and is rebased on a lost compare-and-swap; the final item count is checked). PostgreSQL
and Redis are the local test servers (STATEWISE_TEST_POSTGRES_URL /
STATEWISE_TEST_REDIS_URL); a backend that is not reachable is shown as skipped. A ✓ after a
shared cell means the session holds exactly one item per run done (no lost update); a
count of lost updates replaces it otherwise. The last lines put each backend's shared
session at the most workers next to its rate with 1 worker (the contention goal). The
shared cells run in rounds that alternate between the worker counts, and each cell shows
its median, so a slow moment of the machine (a checkpoint, another job) lands on every
count alike instead of on the one cell the ratio divides by.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import tempfile
import time
import uuid
from multiprocessing.queues import Queue
from typing import Any

from rich.console import Console
from rich.table import Table

POSTGRES_URL = os.environ.get(
    "STATEWISE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
REDIS_URL = os.environ.get("STATEWISE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
WORKER_COUNTS = (1, 4, 16)
SHARED_ROUNDS = 3


def add(session_state: dict[str, Any], item: str) -> str:
    """Append one item."""
    session_state["items"].append(item)
    return "ok"


def _model(messages: Any, info: Any) -> Any:
    from statewise.models import ModelResponse, ToolCall

    if messages[-1].role == "tool":
        return ModelResponse(content="ok")
    return ModelResponse(tool_calls=[ToolCall("add", {"item": messages[-1].content}, "c")])


def _worker(tasks: Queue[Any], results: Queue[Any]) -> None:
    from statewise import Agent
    from statewise.models import FunctionModel

    agents: dict[str, Any] = {}
    while (task := tasks.get()) is not None:
        url, session_id, start_at, duration = task
        if url not in agents:
            agents[url] = Agent(
                model=FunctionModel(_model), tools=[add], db=url, session_state={"items": []}
            )
        agent = agents[url]
        while time.time() < start_at:
            time.sleep(0.001)
        runs, deadline = 0, start_at + duration
        while time.time() < deadline:
            agent.run(f"{os.getpid()}-{runs}", session_id=session_id)
            runs += 1
        results.put(runs)


def _reachable(url: str) -> str | None:
    from statewise.db import resolve_db

    try:
        resolve_db(url).close()
    except Exception as exc:  # reported in the table
        return str(exc).splitlines()[0][:60]
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 s per cell instead of 3")
    parser.add_argument(
        "--only",
        action="append",
        choices=["SQLite", "PostgreSQL", "Redis"],
        help="measure this backend only (repeatable)",
    )
    parser.add_argument("--shared", action="store_true", help="the shared-session cells only")
    args = parser.parse_args()
    duration = 1.0 if args.quick else 3.0
    tag = f"swbench_{uuid.uuid4().hex[:8]}"
    backends = {
        "SQLite": f"sqlite:///{tempfile.mkdtemp(prefix='swbench-')}/bench.db",
        "PostgreSQL": f"{POSTGRES_URL}?schema={tag}",
        "Redis": f"{REDIS_URL}?prefix={tag}",
    }
    backends = {k: v for k, v in backends.items() if not args.only or k in args.only}
    skipped = {name: _reachable(url) for name, url in backends.items()}
    ctx = mp.get_context("spawn")
    tasks: Queue[Any] = ctx.Queue()
    results: Queue[Any] = ctx.Queue()
    workers = [
        ctx.Process(target=_worker, args=(tasks, results)) for _ in range(max(WORKER_COUNTS))
    ]
    for w in workers:
        w.start()
    table = Table(
        title=f"runs/second, one-tool-call runs, {duration:.0f} s per cell (shared: median of "
        f"{SHARED_ROUNDS} alternating rounds), {os.cpu_count()} cores (worker processes)"
    )
    table.add_column("sessions")
    table.add_column("workers", justify="right")
    for name in backends:
        table.add_column(name, justify="right")
    rates: dict[tuple[str, int, str], float] = {}
    each: dict[tuple[str, int, str], list[float]] = {}  # every round's rate
    lost: dict[tuple[int, str], int] = {}
    try:
        # Warm-up: every worker imports statewise and opens every backend once.
        for name, url in backends.items():
            if not skipped[name]:
                for i in range(len(workers)):
                    tasks.put((url, f"warmup-{i}", time.time(), 0.05))
                for _ in workers:
                    results.get()
        for layout in ("shared",) if args.shared else ("distinct", "shared"):
            rounds = SHARED_ROUNDS if layout == "shared" else 1
            measured: dict[tuple[int, str], list[int]] = {}
            for round_ in range(rounds):
                for n in WORKER_COUNTS:
                    for name, url in backends.items():
                        if skipped[name]:
                            continue
                        start_at = time.time() + 1.0
                        shared = f"{layout}-{n}-{round_}-shared"
                        for i in range(n):
                            session = shared if layout == "shared" else f"{layout}-{n}-w{i}"
                            tasks.put((url, session, start_at, duration))
                        total = sum(results.get() for _ in range(n))
                        measured.setdefault((n, name), []).append(total)
                        if layout == "shared":
                            missing = total - _items(url, shared)
                            lost[n, name] = lost.get((n, name), 0) + missing
            for n in WORKER_COUNTS:
                row = [layout, str(n)]
                for name in backends:
                    if skipped[name]:
                        row.append(f"skipped ({skipped[name]})")
                        continue
                    rate = statistics.median(measured[n, name]) / duration
                    rates[layout, n, name] = rate
                    each[layout, n, name] = [total / duration for total in measured[n, name]]
                    cell = f"{rate:,.0f}"
                    if layout == "shared":
                        cell += " ✓" if lost[n, name] == 0 else f" {lost[n, name]} LOST"
                    row.append(cell)
                table.add_row(*row)
    finally:
        for _ in workers:
            tasks.put(None)
        for w in workers:
            w.join()
        _cleanup(tag, skipped)
    Console().print(table)
    _contention_summary(rates, each, lost)


def _contention_summary(
    rates: dict[tuple[str, int, str], float],
    each: dict[tuple[str, int, str], list[float]],
    lost: dict[tuple[int, str], int],
) -> None:
    """The contention goal, side by side: 16 workers on one shared session against 1."""
    most = max(WORKER_COUNTS)
    for name in ("SQLite", "PostgreSQL", "Redis"):
        one, many = rates.get(("shared", 1, name)), rates.get(("shared", most, name))
        if not one or many is None:
            continue
        print(
            f"shared session, {name}: {most} workers {many:,.0f} runs/s = "
            f"{many / one:.0%} of 1 worker ({one:,.0f} runs/s); lost updates: "
            f"{lost.get((most, name), 0)}; rounds: 1 worker "
            f"{', '.join(f'{r:,.0f}' for r in each['shared', 1, name])}, {most} workers "
            f"{', '.join(f'{r:,.0f}' for r in each['shared', most, name])}"
        )
    print(f"goal (PostgreSQL): {most} workers >= 50% of 1 worker, 0 lost")


def _items(url: str, session_id: str) -> int:
    """How many items the shared session holds: every run's append must be there."""
    from statewise import Agent

    agent = Agent(db=url)
    with agent.db:
        return len(agent.get_session_state(session_id).get("items", []))


def _cleanup(tag: str, skipped: dict[str, str | None]) -> None:
    if skipped.get("PostgreSQL", "") is None:
        import psycopg

        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{tag}" CASCADE')
    if skipped.get("Redis", "") is None:
        import redis

        client = redis.Redis.from_url(REDIS_URL)
        for key in client.scan_iter(f"{{{tag}}}*"):
            client.delete(key)
        client.close()


if __name__ == "__main__":
    main()
