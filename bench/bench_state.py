"""State-engine benchmark: one command, one table, ratios measured side by side.

    python bench/bench_state.py            # full (about a minute)
    python bench/bench_state.py --quick    # smaller counts, for a smoke test

Every run is a one-tool-call run (the tool appends one item) on SQLite on disk with the
default durability (WAL, synchronous=FULL), driven by an offline model. Measured:

* the floor: the bare SQLite commits such a run needs (the same number of
  `BEGIN IMMEDIATE; INSERT; UPDATE ... WHERE version=?; COMMIT` on the same pragmas);
* ms per run at run #1 (a new session), #10, #1000 and #10,000 of one session;
* a run on a session already holding 100,000 items (~10 MB) against an empty one;
* database bytes written per run, against the size of the change.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import tempfile
import time
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


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller counts")
    args = parser.parse_args()
    long_runs = 1_000 if args.quick else 10_000
    big_items = 10_000 if args.quick else 100_000
    chunk, rounds = (10, 8) if args.quick else (20, 15)
    work = Path(tempfile.mkdtemp(prefix="statewise-bench-"))
    console = Console()
    agent = make_agent(work / "bench.db")

    # Prepare: a session at run #N, and one holding many items.
    for _ in range(long_runs - chunk * rounds // 2):
        agent.run("go", session_id="long")
    commits = commits_per_run(agent, "long")
    item = {"sku": "SKU-000000", "name": "a product name", "qty": 1, "tags": ["a", "b"]}
    big = [dict(item, sku=f"SKU-{i:06d}") for i in range(big_items)]
    agent.state.for_session("big").set("items", big)
    state_bytes = len(json.dumps({"items": big}))
    agent.run("go", session_id="big")
    agent.run("go", session_id="empty")
    bare = BareCommits(work / "floor.db", commits)
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
            "empty": lambda: timed(lambda: agent.run("go", session_id="empty"), chunk),
            "big": lambda: timed(lambda: agent.run("go", session_id="big"), chunk),
        },
        rounds,
    )

    # Growth: bytes the database grows by per run on the big session.
    growth_db = work / "growth.db"
    grower = make_agent(growth_db)
    grower.state.for_session("big").set("items", big)
    grower.run("go", session_id="big")
    before = db_bytes(growth_db)
    growth_runs = 200 if args.quick else 500
    for _ in range(growth_runs):
        grower.run("go", session_id="big")
    growth = (db_bytes(growth_db) - before) / growth_runs

    f = ms["floor"]
    rows = [
        ("commits per one-tool-call run", f"{commits}", ""),
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
        ("run on an empty state", f"{ms['empty']:.3f} ms", ""),
        (
            f"run with {big_items:,} items ({state_bytes / 1e6:.1f} MB) in state",
            f"{ms['big']:.3f} ms",
            f"{ms['big'] / ms['empty']:.2f}x empty (target <= 2x)",
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
