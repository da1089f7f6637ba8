"""Retention: a long session's storage and run rate with and without a policy, one table.

    python bench/bench_retention.py               # 2,000 runs per cell
    python bench/bench_retention.py --runs 10000

One session takes `--runs` runs of an agent whose tool sets one key (the state stays the
same size, so what grows is history). Each backend runs it twice, side by side: without a
policy and with `Retention(keep_versions=100)`. The table shows the bytes the session's
rows hold at the end (SQLite: the stored text of its rows; PostgreSQL: `pg_column_size` of
its rows; Redis: `MEMORY USAGE` of its keys), how many events and deltas are left, and
the runs per second of each cell (the two cells of a backend alternate, 50 runs at a time). PostgreSQL and Redis are the local test servers
(STATEWISE_TEST_POSTGRES_URL / STATEWISE_TEST_REDIS_URL); one that is not reachable is
skipped.
"""

from __future__ import annotations

import argparse
import os
import secrets
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from statewise import Agent, Retention
from statewise.db.base import BaseDb
from statewise.db.records import ScopeKey
from statewise.models import FunctionModel, ModelResponse, ToolCall

POSTGRES_URL = os.environ.get(
    "STATEWISE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
REDIS_URL = os.environ.get("STATEWISE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
POLICY = Retention(keep_versions=100)
SESSION = "long"


def note(session_state: dict[str, Any], item: str) -> str:
    """Note the latest item."""
    session_state["last"] = item
    return "ok"


def _model(messages: Any, info: Any) -> ModelResponse:
    if messages[-1].role == "tool":
        return ModelResponse(content="ok")
    return ModelResponse(tool_calls=[ToolCall("note", {"item": messages[-1].content}, "c")])


def _sqlite_bytes(db: Any) -> int:
    p, conn = db.table_prefix, db._conn
    by_session = ["events", "runs", "commits"]
    total = sum(
        conn.execute(
            f"SELECT coalesce(sum(length(data)), 0) FROM {p}events WHERE session_id = ?"
            if table == "events"
            else f"SELECT coalesce(sum(length(messages) + length(metrics) + "
            f"coalesce(length(content), 0) + coalesce(length(input), 0)), 0) "
            f"FROM {p}runs WHERE session_id = ?"
            if table == "runs"
            else f"SELECT coalesce(sum(length(result) + length(commit_id)), 0) "
            f"FROM {p}commits WHERE session_id = ?",
            (SESSION,),
        ).fetchone()[0]
        for table in by_session
    )
    total += conn.execute(
        f"SELECT coalesce(sum(length(segments)), 0) FROM {p}deltas "
        f"WHERE kind = 'session' AND scope_id = ?",
        (SESSION,),
    ).fetchone()[0]
    total += conn.execute(
        f"SELECT coalesce(sum(length(state)), 0) FROM {p}snapshots "
        f"WHERE kind = 'session' AND scope_id = ?",
        (SESSION,),
    ).fetchone()[0]
    return int(total)


def _postgres_bytes(db: Any) -> int:
    s = db._s
    sql = (
        f"SELECT (SELECT coalesce(sum(pg_column_size(t.*)), 0) FROM {s}.events t "
        f"WHERE session_id = %(s)s) + (SELECT coalesce(sum(pg_column_size(t.*)), 0) "
        f"FROM {s}.runs t WHERE session_id = %(s)s) + (SELECT coalesce(sum(pg_column_size(t.*)), "
        f"0) FROM {s}.commits t WHERE session_id = %(s)s) + (SELECT "
        f"coalesce(sum(pg_column_size(t.*)), 0) FROM {s}.deltas t WHERE kind = 'session' AND "
        f"scope_id = %(s)s) + (SELECT coalesce(sum(pg_column_size(t.*)), 0) FROM {s}.snapshots t "
        f"WHERE kind = 'session' AND scope_id = %(s)s)"
    )
    with db._connection() as conn:
        return int(conn.execute(sql, {"s": SESSION}).fetchone()[0])


def _redis_bytes(db: Any) -> int:
    return sum(db.client.memory_usage(k) or 0 for k in db.keys.owned_by_session(SESSION))


def _backends() -> list[tuple[str, Callable[[Retention | None], BaseDb], Callable[[Any], int]]]:
    from statewise.db import SqliteDb

    directory = Path(tempfile.mkdtemp(prefix="bench-retention-"))
    found: list[tuple[str, Callable[[Retention | None], BaseDb], Callable[[Any], int]]] = [
        (
            "SQLite",
            lambda r: SqliteDb(directory / f"{secrets.token_hex(4)}.db", retention=r),
            _sqlite_bytes,
        )
    ]
    try:
        import psycopg

        from statewise.db.postgres import PostgresDb

        psycopg.connect(POSTGRES_URL, connect_timeout=3).close()
        found.append(
            (
                "PostgreSQL",
                lambda r: PostgresDb(
                    POSTGRES_URL, schema=f"bench_ret_{secrets.token_hex(4)}", retention=r
                ),
                _postgres_bytes,
            )
        )
    except Exception as exc:
        print(f"PostgreSQL skipped: {exc}")
    try:
        from statewise.db.redis import RedisDb

        RedisDb(REDIS_URL, prefix="bench-retention-probe").close()
        found.append(
            (
                "Redis",
                lambda r: RedisDb(
                    REDIS_URL, prefix=f"bench-ret-{secrets.token_hex(4)}", retention=r
                ),
                _redis_bytes,
            )
        )
    except Exception as exc:
        print(f"Redis skipped: {exc}")
    return found


CHUNK = 50
"""Runs a cell does before the other cell of its backend takes a turn: the two alternate,
so a slow moment of the machine lands on both alike."""


def _cells(dbs: list[BaseDb], runs: int) -> list[float]:
    """Runs per second of each database, taking `runs` runs in alternating chunks."""
    agents = [
        Agent(model=FunctionModel(_model), tools=[note], db=db, session_state={}) for db in dbs
    ]
    spent = [0.0] * len(dbs)
    for start in range(0, runs, CHUNK):
        for i, agent in enumerate(agents):
            began = time.perf_counter()
            for n in range(start, min(runs, start + CHUNK)):
                agent.run(f"item {n}", session_id=SESSION)
            spent[i] += time.perf_counter() - began
    return [runs / s for s in spent]


def _drop(name: str, db: Any) -> None:
    if name == "PostgreSQL":
        with db._connection() as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {db._s} CASCADE")
    elif name == "Redis":
        keys = list(db.client.scan_iter(match=db.keys.p + "*", count=1000))
        for i in range(0, len(keys), 500):
            db.client.delete(*keys[i : i + 500])


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000, help="runs per cell (default 2000)")
    runs = parser.parse_args().runs
    table = Table(title=f"One session, {runs:,} runs: without a policy vs keep_versions=100")
    for column in (
        "backend",
        "bytes, no policy",
        "bytes, policy",
        "ratio",
        "events/deltas left",
        "runs/s, no policy",
        "runs/s, policy",
        "ratio",
    ):
        table.add_column(column, justify="right")
    for name, open_db, measure in _backends():
        plain, kept = open_db(None), open_db(POLICY)
        try:
            plain_rate, kept_rate = _cells([plain, kept], runs)
            plain_bytes, kept_bytes = measure(plain), measure(kept)
            events = len(kept.read_events(SESSION))
            deltas = len(kept.read_deltas(ScopeKey("session", SESSION)))
        finally:
            for db in (plain, kept):
                _drop(name, db)
                db.close()
        table.add_row(
            name,
            f"{plain_bytes:,}",
            f"{kept_bytes:,}",
            f"{kept_bytes / plain_bytes:.3f}",
            f"{events}/{deltas}",
            f"{plain_rate:,.0f}",
            f"{kept_rate:,.0f}",
            f"{kept_rate / plain_rate:.2f}",
        )
    Console(width=150).print(table)


if __name__ == "__main__":
    main()
