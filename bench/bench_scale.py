"""Scale: what a run, a read and a listing cost as the database and one session grow.

    python bench/bench_scale.py                 # 1,000 vs 100,000 sessions; 10,000 runs
    python bench/bench_scale.py --quick         # 100 vs 2,000 sessions; 300 runs (a smoke run)
    python bench/bench_scale.py --only SQLite   # one backend (repeatable)

Everything is measured side by side in one invocation, on SQLite (a file, WAL,
synchronous=FULL), PostgreSQL and Redis (the local test servers, STATEWISE_TEST_POSTGRES_URL
/ STATEWISE_TEST_REDIS_URL; one that is not reachable is skipped):

* with few and with many sessions in the database (the small and the big one, measured in
  alternating rounds of batches of calls, medians): a one-tool-call run on an existing session, a read of its
  state, the first page of `list_sessions(limit=50)`, and a page in the middle reached by
  `offset=N/2` and by cursor. The ratio is big / small: 1.0 means the size costs nothing.
  The many sessions are written in bulk into the backend's own tables (a state, a delta and
  an updated_at spread over 30 days each), which is what a database that grew looks like
  to these reads.
* one session of many runs (one append each): its export as the CLI writes it (time, and
  peak traced memory in a fresh process), one page of its state history (50 versions),
  and a fork of it; and the storage it takes per session and per run, without and with a
  retention policy (n/a until `statewise.Retention` exists).
* the session cache's memory in a fresh process that ran once on each of 512 sessions of
  190 KB of state (it is bounded by bytes: STATEWISE_CACHE_MB, default 64).

The long session is written with durability relaxed (SQLite synchronous=NORMAL, PostgreSQL
synchronous_commit=off), which changes how fast it is written, not what is stored.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

POSTGRES_URL = os.environ.get(
    "STATEWISE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
REDIS_URL = os.environ.get("STATEWISE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
SPREAD = 30 * 86400.0  # the many sessions were last updated over the past 30 days
PAGE = 50


def add(session_state: dict[str, Any], item: str) -> str:
    """Append one item."""
    session_state["items"].append(item)
    return "ok"


def _model(messages: Any, info: Any) -> Any:
    from statewise.models import ModelResponse, ToolCall

    if messages[-1].role == "tool":
        return ModelResponse(content="ok")
    return ModelResponse(tool_calls=[ToolCall("add", {"item": messages[-1].content}, "c")])


def agent_on(db: Any) -> Any:
    from statewise import Agent
    from statewise.models import FunctionModel

    return Agent(model=FunctionModel(_model), tools=[add], db=db, session_state={"items": []})


# ---- backends: where a database lives, and how to fill one in bulk -----------------------


class Backend:
    name = "?"

    def __init__(self, tag: str) -> None:
        self.tag = tag

    def url(self, part: str) -> str:
        raise NotImplementedError

    def fast_db(self, part: str) -> Any:
        """The database for writing the long session (durability relaxed)."""
        return self.url(part)

    def fill(self, part: str, count: int) -> None:
        raise NotImplementedError

    def storage(self, part: str) -> int:
        """Bytes the database of `part` takes."""
        raise NotImplementedError

    def cleanup(self) -> None:
        pass


def _rows(count: int) -> list[tuple[str, str, float]]:
    rng = random.Random(count)
    now = time.time()
    return [
        (f"bulk-{i:07d}", f"u{i % 1000}", now - 60 - rng.uniform(0, SPREAD)) for i in range(count)
    ]


SEGMENTS = json.dumps(
    [{"source": "default_state", "ops": [{"op": "set", "path": ["items"], "value": []}]}]
)


class Sqlite(Backend):
    name = "SQLite"

    def __init__(self, tag: str) -> None:
        super().__init__(tag)
        self.dir = Path(tempfile.mkdtemp(prefix="swscale-"))

    def url(self, part: str) -> str:
        return f"sqlite:///{self.dir / part}.db"

    def fast_db(self, part: str) -> Any:
        from statewise.db import SqliteDb

        return SqliteDb(db_file=self.dir / f"{part}.db", synchronous="NORMAL")

    def fill(self, part: str, count: int) -> None:
        from statewise.db import resolve_db

        resolve_db(self.url(part)).close()  # (the schema)
        rows = _rows(count)
        p = "statewise_"
        with sqlite3.connect(self.dir / f"{part}.db") as conn:
            conn.executemany(
                f"INSERT INTO {p}sessions (session_id, user_id, app_name, kind, created_at, "
                f"updated_at, last_seq, metadata) VALUES (?, ?, 'default', 'agent', ?, ?, 0, '{{}}')",
                [(sid, user, at, at) for sid, user, at in rows],
            )
            conn.executemany(
                f"INSERT INTO {p}scopes (kind, scope_id, version, updated_at) "
                f"VALUES ('session', ?, 1, ?)",
                [(sid, at) for sid, _user, at in rows],
            )
            conn.executemany(
                f"INSERT INTO {p}deltas (kind, scope_id, version, session_id, segments, "
                f"created_at) VALUES ('session', ?, 1, ?, ?, ?)",
                [(sid, sid, SEGMENTS, at) for sid, _user, at in rows],
            )
            conn.execute("ANALYZE")
        with sqlite3.connect(self.dir / f"{part}.db") as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # (as a database that has settled)

    def storage(self, part: str) -> int:
        path = self.dir / f"{part}.db"
        with sqlite3.connect(path) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            page = conn.execute("PRAGMA page_size").fetchone()[0]
            used = conn.execute("PRAGMA page_count").fetchone()[0]
            free = conn.execute("PRAGMA freelist_count").fetchone()[0]
        return int((used - free) * page)


class Postgres(Backend):
    name = "PostgreSQL"

    def schema(self, part: str) -> str:
        return f"{self.tag}_{part}"

    def url(self, part: str) -> str:
        return f"{POSTGRES_URL}?schema={self.schema(part)}"

    def fast_db(self, part: str) -> Any:
        return f"{POSTGRES_URL}?schema={self.schema(part)}&options=-csynchronous_commit%3Doff"

    def fill(self, part: str, count: int) -> None:
        import psycopg

        from statewise.db import resolve_db

        resolve_db(self.url(part)).close()
        s = f'"{self.schema(part)}"'
        rows = _rows(count)
        with psycopg.connect(POSTGRES_URL) as conn:
            with conn.cursor() as cur:
                cols = "session_id, user_id, app_name, kind, created_at, updated_at, last_seq, metadata"
                with cur.copy(f"COPY {s}.sessions ({cols}) FROM STDIN") as copy:
                    for sid, user, at in rows:
                        copy.write_row((sid, user, "default", "agent", at, at, 0, "{}"))
                with cur.copy(
                    f"COPY {s}.scopes (kind, scope_id, version, updated_at) FROM STDIN"
                ) as copy:
                    for sid, _user, at in rows:
                        copy.write_row(("session", sid, 1, at))
                cols = "kind, scope_id, version, session_id, segments, created_at"
                with cur.copy(f"COPY {s}.deltas ({cols}) FROM STDIN") as copy:
                    for sid, _user, at in rows:
                        copy.write_row(("session", sid, 1, sid, SEGMENTS, at))
            conn.commit()
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f"VACUUM ANALYZE {s}.sessions")
            conn.execute(f"VACUUM ANALYZE {s}.scopes")
            conn.execute(f"VACUUM ANALYZE {s}.deltas")

    def storage(self, part: str) -> int:
        import psycopg

        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            # What the data takes, as SQLite's row counts free pages out: deleted rows
            # leave dead tuples whose space PostgreSQL reuses only once vacuumed.
            for (table,) in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s", (self.schema(part),)
            ).fetchall():
                conn.execute(f'VACUUM FULL "{self.schema(part)}"."{table}"')
            row = conn.execute(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = %s AND c.relkind IN ('r', 'm')",
                (self.schema(part),),
            ).fetchone()
        return int(row[0]) if row else 0

    def cleanup(self) -> None:
        import psycopg

        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            for (name,) in conn.execute(
                "SELECT nspname FROM pg_namespace WHERE nspname LIKE %s", (f"{self.tag}_%",)
            ).fetchall():
                conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


class Redis(Backend):
    name = "Redis"

    def prefix(self, part: str) -> str:
        return f"{self.tag}_{part}"

    def url(self, part: str) -> str:
        return f"{REDIS_URL}?prefix={self.prefix(part)}"

    def fill(self, part: str, count: int) -> None:
        import redis

        client = redis.Redis.from_url(REDIS_URL)
        p = "{" + self.prefix(part) + "}"
        pipe = client.pipeline(transaction=False)
        for n, (sid, user, at) in enumerate(_rows(count)):
            stamp = repr(at)
            pipe.hset(
                f"{p}:s:{sid}",
                mapping={
                    "session_id": sid, "kind": "agent", "created_at": stamp, "updated_at": stamp,
                    "last_seq": 0, "metadata": "{}", "runs": 0, "user_id": user,
                    "app_name": "default",
                },
            )  # fmt: skip
            score = -at
            pipe.zadd(f"{p}:sessions", {sid: score})
            pipe.zadd(f"{p}:by_user:{user}", {sid: score})
            pipe.zadd(f"{p}:by_app:default", {sid: score})
            if n % 5000 == 4999:
                pipe.execute()
        pipe.execute()
        client.close()

    def storage(self, part: str) -> int:
        import redis

        client = redis.Redis.from_url(REDIS_URL)
        total = 0
        for key in client.scan_iter("{" + self.prefix(part) + "}*", count=1000):
            total += int(client.memory_usage(key, samples=0) or 0)
        client.close()
        return total

    def cleanup(self) -> None:
        import redis

        client = redis.Redis.from_url(REDIS_URL)
        for key in client.scan_iter("{" + self.tag + "_*", count=1000):
            client.delete(key)
        client.close()


def reachable(backend: Backend) -> str | None:
    from statewise.db import resolve_db

    try:
        resolve_db(backend.url("probe")).close()
    except Exception as exc:  # reported in the table
        return str(exc).splitlines()[0][:60]
    return None


# ---- measuring -------------------------------------------------------------------------------


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def side_by_side(cells: dict[str, Callable[[], Any]], rounds: int) -> dict[str, float]:
    """Each cell's median time per call, over rounds that visit every cell in turn. A
    round times a batch of calls of each cell (as many as fill about 50 ms), so a cell of
    a fraction of a millisecond is not one timer reading at the mercy of a stray pause."""
    batch = {name: max(1, min(500, int(0.05 / max(timed(fn), 1e-6)))) for name, fn in cells.items()}
    seen: dict[str, list[float]] = {name: [] for name in cells}
    for _ in range(rounds):
        for name, fn in cells.items():
            n = batch[name]
            seen[name].append(timed(lambda fn=fn, n=n: [fn() for _ in range(n)]) / n)
    return {name: statistics.median(times) for name, times in seen.items()}


def many_sessions(
    backend: Backend, small: int, big: int, rounds: int
) -> dict[str, tuple[float, float]]:
    """Per measure, (small, big) median seconds."""
    from statewise.db import resolve_db
    from statewise.db.listing import encode_cursor

    cells: dict[str, Callable[[], Any]] = {}
    closers = []
    for label, count in (("small", small), ("big", big)):
        backend.fill(label, count)
        db = resolve_db(backend.url(label))
        closers.append(db)
        agent = agent_on(db)
        agent.run("first", session_id="probe", user_id="u1")
        reader = agent_on(resolve_db(backend.url(label)))  # (a second process's view)
        closers.append(reader.db)
        middle = db.list_sessions(limit=1, offset=count // 2)[0]
        cursor = encode_cursor(middle)
        n = count // 2
        cells[f"run {label}"] = lambda a=agent: a.run("more", session_id="probe", user_id="u1")
        cells[f"read {label}"] = lambda r=reader: r.get_session_state("probe")
        cells[f"first {label}"] = lambda d=db: d.list_sessions(limit=PAGE)
        cells[f"offset {label}"] = lambda d=db, n=n: d.list_sessions(limit=PAGE, offset=n)
        cells[f"cursor {label}"] = lambda d=db, c=cursor: d.list_sessions(limit=PAGE, cursor=c)
    for fn in cells.values():
        fn()  # warm
    measured = side_by_side(cells, rounds)
    for db in closers:
        db.close()
    names = ("run", "read", "first", "offset", "cursor")
    return {name: (measured[f"{name} small"], measured[f"{name} big"]) for name in names}


EXPORT = """
import json, sys, time, tracemalloc
from statewise import Sessions
url, sid, out = sys.argv[1:4]
def export():
    with Sessions(url) as sessions, open(out, "w", encoding="utf-8") as file:
        file.writelines(json.dumps(r, ensure_ascii=False) + "\\n" for r in sessions.iter_export(sid))
export()  # (imports, connections)
start = time.perf_counter(); export(); seconds = time.perf_counter() - start
tracemalloc.start(); export(); peak = tracemalloc.get_traced_memory()[1]
print(json.dumps({"seconds": seconds, "peak": peak}))
"""


def long_session(backend: Backend, runs: int) -> dict[str, Any]:
    from statewise import Sessions
    from statewise.db import resolve_db

    out: dict[str, Any] = {}
    resolve_db(backend.url("long")).close()
    empty = backend.storage("long")  # (the schema's empty tables)
    fast = agent_on(backend.fast_db("long"))
    for n in range(runs):
        fast.run(f"item-{n}", session_id="long", user_id="u1")
    out["storage"] = backend.storage("long") - empty
    for n in range(10):
        fast.run(f"item-{n}", session_id="short", user_id="u1")
    if not isinstance(fast.db, str):
        fast.db.close()
    path = Path(tempfile.mkdtemp(prefix="swscale-export-")) / "long.jsonl"
    done = subprocess.run(
        [sys.executable, "-c", EXPORT, backend.url("long"), "long", str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    out["export"] = json.loads(done.stdout.strip().splitlines()[-1])
    out["export_bytes"] = path.stat().st_size
    path.unlink()
    with Sessions(backend.url("long")) as sessions:
        history = {}
        for sid in ("short", "long"):
            top = sessions.state(sid).version
            history[sid] = statistics.median(
                timed(
                    lambda s=sid, t=top: sessions.get_state_history(
                        s, after_version=t - PAGE, limit=PAGE
                    )
                )
                for _ in range(5)
            )
        out["history"] = history
        forks = {}
        for sid in ("short", "long"):
            forks[sid] = statistics.median(
                timed(
                    lambda s=sid: sessions.fork_session(
                        s, new_session_id=f"fork-{s}-{uuid.uuid4().hex[:6]}"
                    )
                )
                for _ in range(3)
            )
        out["fork"] = forks
    return out


def retention_storage(backend: Backend, runs: int, kept: int) -> int:
    """Storage of the same long session written under a retention policy that keeps its
    last `kept` versions (compacted as it goes, after commits)."""
    from statewise import Retention
    from statewise.db import resolve_db

    resolve_db(backend.url("kept")).close()
    empty = backend.storage("kept")  # (the schema's empty tables)
    given = backend.fast_db("kept")
    db = resolve_db(given) if isinstance(given, str) else given
    db.retention = Retention(keep_versions=kept)
    agent = agent_on(db)
    for n in range(runs):
        agent.run(f"item-{n}", session_id="long", user_id="u1")
    db.close()
    return backend.storage("kept") - empty


CACHE = """
import gc, json, sys, tracemalloc
from statewise import Agent
from statewise.models import FunctionModel
url, count = sys.argv[1], int(sys.argv[2])
agent = Agent(model=FunctionModel(lambda m, i: "ok"), db=url)
agent.run("warm", session_id="c-0")
gc.collect()
tracemalloc.start()
base = tracemalloc.get_traced_memory()[0]
for n in range(count):
    agent.run("hi", session_id=f"c-{n}")
gc.collect()
print(json.dumps({"bytes": tracemalloc.get_traced_memory()[0] - base}))
"""


def cache_memory(sessions: int, state_kb: int) -> dict[str, Any]:
    """Traced memory held after one run on each of `sessions` sessions of `state_kb` KB."""
    from statewise import Agent
    from statewise.db import SqliteDb

    path = Path(tempfile.mkdtemp(prefix="swscale-cache-")) / "cache.db"
    blob = ["x" * 1000 for _ in range(state_kb)]
    with SqliteDb(db_file=path, synchronous="OFF") as db:
        agent = Agent(db=db)
        for n in range(sessions):
            agent.state.for_session(f"c-{n}").set("blob", blob)
    done = subprocess.run(
        [sys.executable, "-c", CACHE, f"sqlite:///{path}", str(sessions)],
        capture_output=True,
        text=True,
        check=True,
    )
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    return {"bytes": measured["bytes"], "budget": os.environ.get("STATEWISE_CACHE_MB", "64")}


# ---- the table ---------------------------------------------------------------------------------


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.2f} ms" if seconds < 1 else f"{seconds:,.2f} s"


def size(n: float) -> str:
    return f"{n / 1e6:,.1f} MB" if n >= 1e6 else f"{n / 1e3:,.1f} KB"


def ratio(small: float, big: float) -> str:
    return f"{ms(small)} → {ms(big)}  [b]{big / small:.2f}×[/b]"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument(
        "--only", action="append", choices=["SQLite", "PostgreSQL", "Redis"], help="(repeatable)"
    )
    args = parser.parse_args()
    small, big, runs, rounds = (100, 2_000, 300, 5) if args.quick else (1_000, 100_000, 10_000, 21)
    cache_sessions, cache_kb = (64, 190) if args.quick else (512, 190)
    kept = 100 if args.quick else 1_000  # versions the retention row's policy keeps
    tag = f"swscale_{uuid.uuid4().hex[:8]}"
    backends = [b(tag) for b in (Sqlite, Postgres, Redis) if not args.only or b.name in args.only]
    skipped = {b.name: reachable(b) for b in backends}
    results: dict[str, dict[str, Any]] = {}
    started = time.perf_counter()
    try:
        for backend in backends:
            if skipped[backend.name]:
                continue
            found = results[backend.name] = {}
            found["many"] = many_sessions(backend, small, big, rounds)
            found["long"] = long_session(backend, runs)
            found["retention"] = retention_storage(backend, runs, kept)
        cache = cache_memory(cache_sessions, cache_kb)
    finally:
        for backend in backends:
            backend.cleanup()
    table = Table(
        title=f"statewise at scale: {small:,} vs {big:,} sessions (medians of {rounds} "
        f"alternating rounds of ~50 ms batches); one session of {runs:,} runs; "
        f"{os.cpu_count()} cores",
        show_lines=True,
    )
    table.add_column("measure")
    for backend in backends:
        table.add_column(backend.name, justify="right")

    def row(label: str, cell: Callable[[dict[str, Any]], str]) -> None:
        cells = []
        for backend in backends:
            if skipped[backend.name]:
                cells.append(f"skipped ({skipped[backend.name]})")
            else:
                cells.append(cell(results[backend.name]))
        table.add_row(label, *cells)

    def many(name: str) -> Callable[[dict[str, Any]], str]:
        return lambda r: ratio(*r["many"][name])

    row(f"run (one tool call), {small:,} → {big:,} sessions", many("run"))
    row("state read", many("read"))
    row(f"list_sessions first page ({PAGE})", many("first"))
    row("list page at N/2 by offset", many("offset"))
    row("list page at N/2 by cursor", many("cursor"))
    row(
        f"export, {runs:,}-run session (time; peak traced memory)",
        lambda r: (
            f"{ms(r['long']['export']['seconds'])}; {size(r['long']['export']['peak'])} "
            f"({size(r['long']['export_bytes'])} of JSON Lines)"
        ),
    )
    row(
        f"history, one page of {PAGE}: 10 runs → {runs:,} runs",
        lambda r: ratio(r["long"]["history"]["short"], r["long"]["history"]["long"]),
    )
    row(
        f"fork: 10 runs → {runs:,} runs",
        lambda r: ratio(r["long"]["fork"]["short"], r["long"]["fork"]["long"]),
    )
    row(
        f"storage of the {runs:,}-run session (per run)",
        lambda r: f"{size(r['long']['storage'])} ({r['long']['storage'] / runs:,.0f} B/run)",
    )
    row(
        f"the same under Retention(keep_versions={kept:,})",
        lambda r: f"{size(r['retention'])} ({r['retention'] / r['long']['storage']:.2f}×)",
    )
    table.add_row(
        f"session cache after one run on each of {cache_sessions} sessions of {cache_kb} KB",
        *[
            f"{size(cache['bytes'])} (STATEWISE_CACHE_MB={cache['budget']})" if i == 0 else "(same)"
            for i, _ in enumerate(backends)
        ],
    )
    Console(width=200).print(table)
    print(
        f"goal: list pages (first and at N/2 by cursor) <= 1.5x from {small:,} to {big:,} sessions"
    )
    print(f"took {time.perf_counter() - started:,.0f} s")


if __name__ == "__main__":
    main()
