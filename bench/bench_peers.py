"""statewise next to Agno: the same one-tool agent, interleaved in one invocation.

    python bench/bench_peers.py            # full (a few minutes)
    python bench/bench_peers.py --quick    # smaller counts, for a smoke test

Agno is a peer, never a dependency of statewise: install it in a separate environment
used only for benchmarks, with statewise itself, e.g.

    python3 -m venv /tmp/bench-venv
    /tmp/bench-venv/bin/pip install -e . 'agno==3.1.10' sqlalchemy greenlet
    /tmp/bench-venv/bin/python bench/bench_peers.py

Without Agno the table shows statewise alone. Both frameworks run the same agent: one
tool that appends an item to a list in session state, a scripted model that answers
instantly (call the tool, then answer), and SQLite on disk with each framework's default
durability (statewise: WAL, synchronous=FULL, a commit at each commit point).

Each framework runs in a process of its own, as it would in production: in one shared
process each one's garbage (Agno's in-memory sessions keep every run) made the other's
collections longer, and a long Agno run left the CPU caches cold for the statewise runs
timed next; statewise measured 17-28% slower beside Agno than alone. This process only
drives the two: every measure runs in rounds that alternate between them (one works while
the other waits), and the table shows each side's median, so a busy machine slows both
alike; compare ratios, not absolute times.

The in-memory run is timed twice: by the wall clock, and by the process's CPU time, which
other jobs on a busy machine disturb far less (that run does no I/O, so it is all CPU).
The persisted rows come with a floor: the bare SQLite commits a statewise run makes (the
same number of `BEGIN IMMEDIATE; INSERT; UPDATE; COMMIT`, same pragmas), timed in the same
rounds. Agno's time over the floor is the most any framework making those durable commits
could lead Agno by on this machine's disk. The first runs after writing 100,000 items come
with a control: the 100-item run right after an unrelated `json.dumps` of those items.
Touching ~10 MB evicts the CPU caches, so the first run after it is slower whatever it
stores; the control shows how much of the big-state row is that refill rather than the
state's size.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import multiprocessing
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from bench_state import BareCommits, commits_per_run
from rich.console import Console
from rich.table import Table

import statewise
from statewise.db import SqliteDb
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo, ToolCall

ITEM = "item-0123456789"
BIG_ITEM = {"sku": "SKU-000000", "name": "a product name", "qty": 1, "tags": ["a", "b"]}


# ---- statewise --------------------------------------------------------------------------


def sw_add(session_state: dict[str, Any], item: str) -> str:
    """Append one item."""
    session_state["items"].append(item)
    return "ok"


def sw_script(messages: list[Message], info: RequestInfo) -> ModelResponse:
    if messages[-1].role == "tool":
        return ModelResponse(content="ok")
    return ModelResponse(tool_calls=[ToolCall("sw_add", {"item": ITEM}, "c")])


class Statewise:
    name = "statewise"

    def __init__(self, work: Path) -> None:
        self.model = FunctionModel(sw_script)
        self.db = SqliteDb(db_file=work / "statewise.db")
        self.agent = self.construct()
        self.memory_agent = statewise.Agent(
            model=self.model, tools=[sw_add], session_state={"items": []}
        )

    def construct(self) -> Any:
        return statewise.Agent(
            model=self.model, tools=[sw_add], db=self.db, session_state={"items": []}
        )

    def run(self, session_id: str) -> None:
        self.agent.run("go", session_id=session_id)

    def run_in_memory(self, session_id: str) -> None:
        self.memory_agent.run("go", session_id=session_id)

    def write_big(self, session_id: str, items: list[Any]) -> None:
        self.agent.state.for_session(session_id).set("items", items)

    def count(self, session_id: str) -> int:
        return len(self.agent.get_session_state(session_id)["items"])


# ---- measuring, in each framework's own process ----------------------------------------


def per_call(fn: Callable[[], Any], n: int) -> float:
    """Seconds per call of `fn`, over `n` calls."""
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n


def cpu_per_call(fn: Callable[[], Any], n: int) -> float:
    """CPU seconds (this process, all threads) per call of `fn`, over `n` calls. A run with
    no I/O costs CPU only; on a busy machine this is steadier than the wall clock, which
    also counts the time other processes held the cores."""
    start = time.process_time()
    for _ in range(n):
        fn()
    return (time.process_time() - start) / n


def peak_bytes(fn: Callable[[], Any]) -> int:
    """tracemalloc's peak while `fn` runs once (after a warm-up call)."""
    fn()
    gc.collect()
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


class Measures:
    """What the driver can ask of one framework's process; `side` is that framework."""

    def __init__(self, side: Any) -> None:
        self.side = side
        self.done: dict[str, int] = {}  # session -> runs made so far
        side.run_in_memory("mem")

    def construct(self, n: int) -> float:
        return per_call(self.side.construct, n)

    def construct_peak(self) -> int:
        return peak_bytes(self.side.construct)

    def in_memory(self, n: int) -> float:
        return per_call(lambda: self.side.run_in_memory("mem"), n)

    def in_memory_cpu(self, n: int) -> float:
        return cpu_per_call(lambda: self.side.run_in_memory("mem"), n)

    def persisted(self, session_id: str, after: int, n: int) -> float:
        """Seconds per run of runs `after`+1..`after`+`n` of `session_id`."""
        while self.done.get(session_id, 0) < after:
            self.side.run(session_id)
            self.done[session_id] = self.done.get(session_id, 0) + 1
        seconds = per_call(lambda: self.side.run(session_id), n)
        self.done[session_id] += n
        return seconds

    def count(self, session_id: str) -> int:
        return int(self.side.count(session_id))

    def big_state(self, big_items: int) -> tuple[list[float], float, float]:
        """The first 5 runs after writing `big_items` items, the 100-item run, and the
        100-item run right after an unrelated `json.dumps` of the big items (seconds)."""
        side = self.side
        small_items = [dict(BIG_ITEM, sku=f"SKU-{i:06d}") for i in range(100)]
        big = [dict(BIG_ITEM, sku=f"SKU-{i:06d}") for i in range(big_items)]
        side.write_big("small", small_items)
        side.run("small")
        small = statistics.median(per_call(lambda: side.run("small"), 5) for _ in range(3))
        side.write_big("big", big)
        first_five = [per_call(lambda: side.run("big"), 1) for _ in range(5)]

        def after_cold_caches() -> float:
            # Encoding the big value evicts the CPU caches the way writing it does, so
            # this run pays the refill the first run after the big write pays.
            json.dumps(big)
            return per_call(lambda: side.run("small"), 1)

        cold = statistics.median(after_cold_caches() for _ in range(3))
        return first_five, small, cold


def serve(conn: Connection, framework: str, work: Path) -> None:
    """A framework's process: build its side, then answer the driver's calls."""
    if framework == "Agno":
        from peer_agno import Agno

        measures = Measures(Agno(work))
    else:
        measures = Measures(Statewise(work))
    conn.send("ready")
    while (call := conn.recv()) is not None:
        name, args = call
        conn.send(getattr(measures, name)(*args))


class Framework:
    """The driver's handle on one framework's process."""

    def __init__(self, name: str, work: Path) -> None:
        self.name = name
        self._conn, child = multiprocessing.Pipe()
        context = multiprocessing.get_context("spawn")
        self._process = context.Process(target=serve, args=(child, name, work), daemon=True)
        self._process.start()
        if self._conn.recv() != "ready":
            raise RuntimeError(f"{name}'s process did not start")

    def __call__(self, name: str, *args: Any) -> Any:
        self._conn.send((name, args))
        return self._conn.recv()

    def close(self) -> None:
        self._conn.send(None)
        self._process.join(timeout=30)


# ---- driving ----------------------------------------------------------------------------


@dataclass
class Row:
    """One measure: each side's figure, how to print one, and its goal. `floor`, for a
    persisted run: the bare commits' time, printed with each side's time over it.
    `compared`: whether Agno's figure over statewise's means anything (not for ratios)."""

    label: str
    values: list[float]
    fmt: Callable[[float], str]
    goal: str = ""
    floor: float | None = None
    compared: bool = True


def interleaved(sides: list[Any], measure: Callable[[Any], float], rounds: int) -> list[float]:
    """Each side's median of `rounds` measurements, taken in alternation."""
    results: list[list[float]] = [[] for _ in sides]
    for _ in range(rounds):
        for i, side in enumerate(sides):
            results[i].append(measure(side))
    return [statistics.median(r) for r in results]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller counts")
    args = parser.parse_args()
    rounds = 3 if args.quick else 7
    big_items = 10_000 if args.quick else 100_000
    work = Path(tempfile.mkdtemp(prefix="statewise-peers-"))
    names = ["statewise"] + (["Agno"] if importlib.util.find_spec("agno") else [])
    sides = [Framework(name, work) for name in names]
    has_agno = len(sides) > 1
    counter = statewise.Agent(
        model=FunctionModel(sw_script), tools=[sw_add], db=SqliteDb(db_file=work / "count.db")
    )
    counter.run("go", session_id="count")
    commits = commits_per_run(counter, "count")
    floor = BareCommits(work / "floor.db", commits)
    console = Console(width=230)
    rows: list[Row] = []

    def ms(v: float) -> str:
        return f"{v * 1e3:.3f} ms"

    def times_small(v: float) -> str:
        return f"{v:.2f}x the 100-item run"

    # Construction.
    construct = interleaved(sides, lambda s: s("construct", 2000), rounds)
    rows.append(Row("construct an agent with one tool", construct, lambda v: f"{v * 1e6:.1f} µs"))
    memory = [float(s("construct_peak")) for s in sides]
    rows.append(
        Row("  tracemalloc peak of one construction", memory, lambda v: f"{v / 1024:.1f} KiB")
    )

    # In-memory runs (no database).
    in_memory = interleaved(sides, lambda s: s("in_memory", 50), rounds)
    rows.append(Row("in-memory run", in_memory, ms, "statewise >= 6x faster"))
    in_memory_cpu = interleaved(sides, lambda s: s("in_memory_cpu", 50), rounds)
    rows.append(Row("  the same, CPU time", in_memory_cpu, ms))

    # Persisted runs at 91-100 and 491-500 of one session, on fresh sessions per round,
    # with a chunk of the floor timed beside each side's.
    at_100: list[list[float]] = [[] for _ in sides]
    at_500: list[list[float]] = [[] for _ in sides]
    floors: list[float] = []
    for r in range(2 if args.quick else 5):
        session = f"long-{r}"
        for i, side in enumerate(sides):
            at_100[i].append(side("persisted", session, 90, 10))
            floors.append(per_call(floor.run, 10))
        for i, side in enumerate(sides):
            at_500[i].append(side("persisted", session, 490, 10))
            floors.append(per_call(floor.run, 10))
        for side in sides:
            count = side("count", session)
            assert count == 500, f"{side.name} holds {count} items after 500 runs"
    bare = statistics.median(floors)
    for label, values, goal in (
        ("persisted run (SQLite), runs 91-100", at_100, "statewise >= 5x faster, <= 1.25x floor"),
        ("persisted run (SQLite), runs 491-500", at_500, "statewise >= 8x faster"),
    ):
        rows.append(Row(label, [statistics.median(v) for v in values], ms, goal, floor=bare))

    # 100,000 items (~10 MB) in state: each of the first 5 runs after the write, against a
    # run on a session holding 100 items.
    big_runs = [side("big_state", big_items) for side in sides]
    first_five = [runs for runs, _, _ in big_runs]
    small_runs = [small for _, small, _ in big_runs]
    rows.append(
        Row(
            f"{big_items:,} items in state: worst of the first 5 runs after the write",
            [max(f) / s for f, s in zip(first_five, small_runs, strict=True)],
            times_small,
            "statewise <= 1.5x",
            compared=False,
        )
    )
    rows.append(
        Row(
            f"  control: the 100-item run right after an unrelated json.dumps of the {big_items:,} items",
            [cold / small for _, small, cold in big_runs],
            times_small,
            compared=False,
        )
    )
    for side in sides:
        side.close()

    table = Table(title=f"statewise vs peers: one-tool agent, {rounds} interleaved rounds")
    table.add_column("measure")
    for side in sides:
        table.add_column(side.name, justify="right")
    if has_agno:
        table.add_column("Agno / statewise", justify="right")
    table.add_column(f"floor: {commits} bare commits", justify="right")
    table.add_column("statewise / floor", justify="right")
    if has_agno:
        table.add_column("Agno / floor", justify="right")
    table.add_column("goal")
    for row in rows:
        values = row.values
        cells = [row.fmt(v) for v in values]
        if has_agno:
            cells.append(f"{values[1] / values[0]:.1f}x" if row.compared else "")
        if row.floor is None:
            cells += ["", ""] + ([""] if has_agno else [])
        else:
            cells += [ms(row.floor)] + [f"{v / row.floor:.2f}x" for v in values]
        table.add_row(row.label, *cells, row.goal)
    console.print(table)
    if not has_agno:
        console.print("Agno is not installed here; see this file's docstring to compare.")
    console.print(
        "first 5 runs after the write, ms: "
        + "; ".join(
            f"{s.name} " + ", ".join(f"{t * 1e3:.1f}" for t in runs)
            for s, runs in zip(sides, first_five, strict=True)
        )
        + " (100-item run: "
        + ", ".join(f"{s.name} {t * 1e3:.2f}" for s, t in zip(sides, small_runs, strict=True))
        + ")"
    )


if __name__ == "__main__":
    main()
