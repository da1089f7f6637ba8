"""State-engine benchmark: one command, one table, ratios measured side by side.

    python bench/bench_state.py            # full (about a minute)
    python bench/bench_state.py --quick    # smaller counts, for a smoke test
    python bench/bench_state.py --only hundreds,first5   # just those rows (see --help)

Every run is a one-tool-call run (the tool appends one item) on SQLite on disk with the
default durability (WAL, synchronous=FULL), driven by an offline model. Measured:

* the floor: the bare SQLite commits such a run needs (the same number of
  `BEGIN IMMEDIATE; INSERT; UPDATE ... WHERE version=?; COMMIT` on the same pragmas);
* building an agent with one tool (time, and tracemalloc's peak), and an in-memory run;
* ms per run at run #1 (a new session), #10, #91-100, #491-500, and #10,000 of one session;
  runs 91-100 and 491-500 are timed between two chunks of the floor, in one invocation;
* a run on a session holding 100,000 items (~10 MB) against one holding 100, in steady
  state and for each of the first 5 runs after the big write; beside it, a control: the
  100-item run right after an unrelated `json.dumps` of the 100,000 items. The first run
  after a big write is slower mostly because touching ~10 MB evicts the CPU caches, not
  because of storage: the control, which stores nothing, is about as slow;
* writing the 100,000 items with `agent.state...set`, against one `json.dumps` of them in
  the same invocation (a big write should cost a small multiple of encoding it once);
* database bytes a write of the 100,000 items adds, against their size (each copy of
  the state stored is one more);
* database bytes written per run, against the size of the change;
* pages a run writes to the WAL (each one written and synced in its commit), against the
  floor's.
"""

from __future__ import annotations

import argparse
import gc
import json
import sqlite3
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from statewise import Agent
from statewise.db import SqliteDb
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo, ToolCall


def add(session_state: dict[str, Any], item: str) -> str:
    """Append one item."""
    session_state["items"].append(item)
    return "ok"


def model(messages: list[Message], info: RequestInfo) -> ModelResponse:
    if messages[-1].role == "tool":
        return ModelResponse(content="ok")
    return ModelResponse(tool_calls=[ToolCall("add", {"item": "item-0123456789"}, "c")])


def make_agent(db_file: Path) -> Agent:
    return Agent(
        model=FunctionModel(model),
        tools=[add],
        db=SqliteDb(db_file=db_file),
        session_state={"items": []},
    )


def db_bytes(db_file: Path) -> int:
    with sqlite3.connect(db_file) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return sum(p.stat().st_size for p in db_file.parent.glob(db_file.name + "*"))


def wal_pages_per_run(db_file: Path, run: Any, runs: int = 20) -> float:
    """Pages one run writes to the WAL, counted from an emptied WAL: each page a commit
    dirties (a table or index it touches) is one more page_size write to sync."""
    with sqlite3.connect(db_file) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    for _ in range(runs):
        run()
    wal_bytes = Path(f"{db_file}-wal").stat().st_size
    return (wal_bytes - 32) / (page_size + 24) / runs


def wal_pages_by_tree(db_file: Path, run: Any, runs: int = 20) -> dict[str, float]:
    """Like `wal_pages_per_run`, per table or index: which b-tree each page written to the
    WAL belongs to (SQLite's `dbstat`; empty where SQLite was built without it)."""
    with sqlite3.connect(db_file) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    for _ in range(runs):
        run()
    wal = Path(f"{db_file}-wal").read_bytes()
    with sqlite3.connect(db_file) as conn:
        try:
            names = dict(conn.execute("SELECT pageno, name FROM dbstat").fetchall())
        except sqlite3.OperationalError:
            return {}
    counts: dict[str, float] = {}
    for offset in range(32, len(wal) - page_size, page_size + 24):
        name = names.get(int.from_bytes(wal[offset : offset + 4], "big"), "(free or new)")
        counts[name] = counts.get(name, 0) + 1 / runs
    return dict(sorted(counts.items(), key=lambda item: -item[1]))


def commits_per_run(agent: Agent, session_id: str) -> int:
    """How many commits (transactions) one run makes, counted at the database."""
    db = agent.db
    original = db.commit
    calls = 0

    def counting(commit: Any) -> Any:
        nonlocal calls
        calls += 1
        return original(commit)

    db.commit = counting  # type: ignore[method-assign]
    try:
        agent.run("count", session_id=session_id)
    finally:
        del db.commit  # back to the class's method
    return calls


def interleaved(measures: dict[str, Any], rounds: int) -> dict[str, float]:
    """Run each measure once per round, round-robin, and keep each one's median, so a
    busy disk or CPU slows every side alike instead of whichever ran at the bad moment.
    A measure is a function returning ms per run for one chunk."""
    results: dict[str, list[float]] = {name: [] for name in measures}
    for _ in range(rounds):
        for name, measure in measures.items():
            results[name].append(measure())
    return {name: statistics.median(values) for name, values in results.items()}


def timed(fn: Any, n: int) -> float:
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n * 1000


class BareCommits:
    """The bare commits a run needs, on the same pragmas, timed per run."""

    def __init__(self, db_file: Path, commits: int) -> None:
        self.conn = sqlite3.connect(db_file, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.execute("CREATE TABLE log (id INTEGER PRIMARY KEY, body TEXT)")
        self.conn.execute("CREATE TABLE ver (id TEXT PRIMARY KEY, version INTEGER)")
        self.conn.execute("INSERT INTO ver VALUES ('s', 0)")
        self.commits = commits
        self.version = 0

    def run(self) -> None:
        for _ in range(self.commits):
            self.conn.execute("BEGIN IMMEDIATE")
            self.conn.execute("INSERT INTO log (body) VALUES (?)", ('{"op":"append"}',))
            self.conn.execute(
                "UPDATE ver SET version = version + 1 WHERE id = 's' AND version = ?",
                (self.version,),
            )
            self.conn.execute("COMMIT")
            self.version += 1


def construction(db: SqliteDb, n: int) -> tuple[float, int]:
    """µs to build an agent with one tool on an open database (as a server would per
    request), and the tracemalloc peak of building one."""
    model_ = FunctionModel(model)

    def build() -> Agent:
        return Agent(model=model_, tools=[add], db=db, session_state={"items": []})

    build()
    us = timed(build, n) * 1000
    gc.collect()
    tracemalloc.start()
    try:
        build()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return us, peak


def advance(agent: Agent, session_id: str, runs: int) -> None:
    for _ in range(runs):
        agent.run("go", session_id=session_id)


SECTIONS = {
    "steady": "the interleaved rows: floor, run #1, #10, #N, 100 vs 100,000 items, in-memory",
    "pages": "pages a run writes to the WAL",
    "construct": "building an agent",
    "hundreds": "runs 91-100 and 491-500 against the floor",
    "first5": "the first 5 runs after writing the 100,000 items, and the cold-cache control",
    "bigwrite": "writing the 100,000 items against one json.dumps of them",
    "growth": "database growth by the big write and per run",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller counts")
    parser.add_argument(
        "--only",
        default=",".join(SECTIONS),
        help="comma-separated rows to measure (default: all): "
        + "; ".join(f"{name}: {what}" for name, what in SECTIONS.items()),
    )
    args = parser.parse_args()
    only = {name.strip() for name in args.only.split(",") if name.strip()}
    if only - set(SECTIONS):
        parser.error(f"--only: unknown {', '.join(sorted(only - set(SECTIONS)))}")
    long_runs = 1_000 if args.quick else 10_000
    big_items = 10_000 if args.quick else 100_000
    chunk, rounds = (10, 8) if args.quick else (20, 15)
    work = Path(tempfile.mkdtemp(prefix="statewise-bench-"))
    console = Console(width=150)
    agent = make_agent(work / "bench.db")
    memory_agent = Agent(model=FunctionModel(model), tools=[add], session_state={"items": []})
    rows: list[tuple[str, str, str]] = []

    # Prepare: a session at run #N (only for the rows that use it), and one holding many items.
    counted = "long" if "steady" in only or "pages" in only else "count"
    for _ in range(long_runs - chunk * rounds // 2 if counted == "long" else 10):
        agent.run("go", session_id=counted)
    commits = commits_per_run(agent, counted)
    item = {"sku": "SKU-000000", "name": "a product name", "qty": 1, "tags": ["a", "b"]}
    big = [dict(item, sku=f"SKU-{i:06d}") for i in range(big_items)]
    agent.state.for_session("big").set("items", big)
    state_bytes = len(json.dumps({"items": big}))
    agent.run("go", session_id="big")
    agent.state.for_session("hundred").set("items", big[:100])
    agent.run("go", session_id="hundred")
    memory_agent.run("go", session_id="memory")
    bare = BareCommits(work / "floor.db", commits)
    rows.append(("commits per one-tool-call run", f"{commits}", ""))

    if "construct" in only:
        construct_us, construct_peak = construction(agent.db, 2_000 if args.quick else 10_000)  # type: ignore[arg-type]
        rows.append(("construct an agent with one tool", f"{construct_us:.1f} µs", ""))
        rows.append(
            ("  tracemalloc peak of one construction", f"{construct_peak / 1024:.1f} KiB", "")
        )

    if "steady" in only:
        young = iter(range(10**9))

        def young_session() -> float:
            session_id = f"young-{next(young)}"
            for _ in range(9):
                agent.run("go", session_id=session_id)
            return timed(lambda: agent.run("go", session_id=session_id), chunk)

        new = iter(range(10**9))
        ms = interleaved(
            {
                "floor": lambda: timed(bare.run, chunk),
                "new": lambda: timed(lambda: agent.run("go", session_id=f"new-{next(new)}"), chunk),
                "young": young_session,
                "long": lambda: timed(lambda: agent.run("go", session_id="long"), chunk),
                "hundred": lambda: timed(lambda: agent.run("go", session_id="hundred"), chunk),
                "big": lambda: timed(lambda: agent.run("go", session_id="big"), chunk),
                "memory": lambda: timed(lambda: memory_agent.run("go", session_id="memory"), chunk),
            },
            rounds,
        )
        f = ms["floor"]
        rows += [
            ("in-memory run (no database)", f"{ms['memory']:.3f} ms", ""),
            ("floor: the bare SQLite commits of a run", f"{f:.3f} ms", "1.00x"),
            ("run #1 (new session)", f"{ms['new']:.3f} ms", f"{ms['new'] / f:.2f}x floor"),
            (
                "run #10 of a session",
                f"{ms['young']:.3f} ms",
                f"{ms['young'] / f:.2f}x floor (target <= 3x)",
            ),
            (
                f"run #{long_runs:,} of a session",
                f"{ms['long']:.3f} ms",
                f"{ms['long'] / ms['young']:.2f}x run #10 (target <= 1.2x)",
            ),
            ("run with 100 items in state", f"{ms['hundred']:.3f} ms", ""),
            (
                f"run with {big_items:,} items ({state_bytes / 1e6:.1f} MB) in state",
                f"{ms['big']:.3f} ms",
                f"{ms['big'] / ms['hundred']:.2f}x 100 items (target <= 1.5x)",
            ),
        ]

    if "pages" in only:
        wal_pages = wal_pages_per_run(
            work / "bench.db", lambda: agent.run("go", session_id=counted)
        )
        floor_pages = wal_pages_per_run(work / "floor.db", bare.run)
        rows.append(
            ("pages written to the WAL per run", f"{wal_pages:.1f}", f"floor {floor_pages:.1f}")
        )
        by_tree = wal_pages_by_tree(work / "bench.db", lambda: agent.run("go", session_id=counted))
        prefix = agent.db.table_prefix  # type: ignore[union-attr]
        for name, pages in by_tree.items():
            rows.append((f"  of which {name.removeprefix(prefix)}", f"{pages:.1f}", ""))

    if "hundreds" in only:
        # Runs 91-100 and 491-500 of fresh sessions, each chunk between two chunks of the floor.
        runs_at: dict[int, list[float]] = {100: [], 500: []}
        floors: list[float] = []
        for r in range(2 if args.quick else 3):
            session_id = f"hundreds-{r}"
            done = 0
            for upto in (100, 500):
                advance(agent, session_id, upto - 10 - done)
                floors.append(timed(bare.run, 10))
                runs_at[upto].append(
                    timed(lambda sid=session_id: agent.run("go", session_id=sid), 10)
                )  # type: ignore[misc]
                floors.append(timed(bare.run, 10))
                done = upto
        floor_at = statistics.median(floors)
        for upto in (100, 500):
            at = statistics.median(runs_at[upto])
            rows.append(
                (
                    f"runs {upto - 9}-{upto} of a session",
                    f"{at:.3f} ms",
                    f"{at / floor_at:.2f}x floor {floor_at:.3f} ms (target <= 1.25x)",
                )
            )

    if "first5" in only:
        # The first 5 runs after writing ~10 MB, each against the 100-item runs right after it.
        first: list[list[float]] = [[] for _ in range(5)]
        for r in range(2 if args.quick else 3):
            session_id = f"fresh-big-{r}"
            agent.state.for_session(session_id).set("items", big)
            for i in range(5):  # the big run first: run 1 comes straight after the write
                run_big = lambda sid=session_id: agent.run("go", session_id=sid)  # type: ignore[misc]  # noqa: E731
                big_ms = timed(run_big, 1)
                first[i].append(big_ms / timed(lambda: agent.run("go", session_id="hundred"), 3))
        first_ratios = [statistics.median(values) for values in first]
        rows.append(
            (
                f"each of the first 5 runs after writing {big_items:,} items",
                ", ".join(f"{r:.2f}x" for r in first_ratios),
                f"worst {max(first_ratios):.2f}x 100 items (target <= 1.5x)",
            )
        )
        # Control: the same 100-item run right after touching as much memory as the write
        # did, storing nothing (json.dumps of the same items): a cold CPU cache alone.
        cold: list[float] = []
        for _ in range(5 * (2 if args.quick else 3)):
            json.dumps(big)
            cold_ms = timed(lambda: agent.run("go", session_id="hundred"), 1)
            cold.append(cold_ms / timed(lambda: agent.run("go", session_id="hundred"), 3))
        rows.append(
            (
                "  control: a 100-item run right after json.dumps of them",
                f"{statistics.median(cold):.2f}x",
                f"worst {max(cold):.2f}x 100 items (a cold CPU cache, no storage)",
            )
        )

    if "bigwrite" in only:
        # Writing the items, each time to a new session, against one json.dumps of them.
        fresh = iter(range(10**9))
        write_ms = interleaved(
            {
                "dumps": lambda: timed(lambda: json.dumps(big), 1),
                "set": lambda: timed(
                    lambda: agent.state.for_session(f"write-{next(fresh)}").set("items", big), 1
                ),
            },
            3 if args.quick else 5,
        )
        rows.append(
            (
                f"agent.state...set of the {big_items:,} items",
                f"{write_ms['set']:.0f} ms",
                f"{write_ms['set'] / write_ms['dumps']:.2f}x json.dumps "
                f"{write_ms['dumps']:.0f} ms (target <= 3x)",
            )
        )

    if "growth" in only:
        growth_db = work / "growth.db"
        grower = make_agent(growth_db)
        grower.run("go", session_id="small")
        empty = db_bytes(growth_db)
        grower.state.for_session("big").set("items", big)
        big_write = db_bytes(growth_db) - empty
        grower.run("go", session_id="big")
        before = db_bytes(growth_db)
        growth_runs = 200 if args.quick else 500
        for _ in range(growth_runs):
            grower.run("go", session_id="big")
        growth = (db_bytes(growth_db) - before) / growth_runs
        rows += [
            (
                f"database growth by writing the {big_items:,} items",
                f"{big_write / 1e6:,.1f} MB",
                f"{big_write / state_bytes:.2f}x the state",
            ),
            (
                "database growth per run (big state)",
                f"{growth:,.0f} B",
                f"{growth / state_bytes * 100:.4f}% of the state",
            ),
        ]

    table = Table(
        title=f"statewise state engine: SQLite WAL synchronous=FULL, "
        f"{rounds} interleaved rounds of {chunk} runs"
    )
    for column in ("measure", "ms per run / bytes", "ratio"):
        table.add_column(column)
    for row in rows:
        table.add_row(*row)
    console.print(table)


if __name__ == "__main__":
    main()
