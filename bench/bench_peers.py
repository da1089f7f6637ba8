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
durability (statewise: WAL, synchronous=FULL, a commit at each commit point). Every
measure runs in rounds that alternate between the frameworks, and the table shows each
side's median, so a busy machine slows both alike; compare ratios, not absolute times.
The in-memory run is timed twice: by the wall clock, and by the process's CPU time, which
other jobs on a busy machine disturb far less (that run does no I/O, so it is all CPU).
The first runs after writing 100,000 items come with a control: the 100-item run right
after an unrelated `json.dumps` of those items. Touching ~10 MB evicts the CPU caches, so
the first run after it is slower whatever it stores; the control shows how much of the
big-state row is that refill rather than the state's size.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

import statewise
from statewise.db import SqliteDb

try:
    from agno.agent import Agent as AgnoAgent
    from agno.db.sqlite import SqliteDb as AgnoSqliteDb
    from agno.models.base import Model as AgnoModel
    from agno.models.response import ModelResponse as AgnoResponse
    from agno.run import RunContext as AgnoRunContext
except ImportError:  # statewise alone
    AgnoAgent = None
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


# ---- Agno (only when installed) ---------------------------------------------------------


def agno_add(run_context: AgnoRunContext, item: str) -> str:
    """Append one item."""
    assert run_context.session_state is not None
    run_context.session_state["items"].append(item)
    return "ok"


def agno_side(work: Path) -> Any:
    """An object like `Statewise` driving Agno, or None when Agno is not installed."""
    if AgnoAgent is None:
        return None

    @dataclass
    class Scripted(AgnoModel):  # type: ignore[misc]
        """Call the tool, then answer; no I/O."""

        id: str = "scripted"
        name: str = "Scripted"
        provider: str = "scripted"

        def invoke(self, messages: Any = None, **kwargs: Any) -> Any:
            if messages and messages[-1].role == "tool":
                return AgnoResponse(role="assistant", content="ok")
            call = {
                "id": "c",
                "type": "function",
                "function": {"name": "agno_add", "arguments": f'{{"item": "{ITEM}"}}'},
            }
            return AgnoResponse(role="assistant", tool_calls=[call])

        async def ainvoke(self, *args: Any, **kwargs: Any) -> Any:
            return self.invoke(*args, **kwargs)

        def invoke_stream(self, *args: Any, **kwargs: Any) -> Any:
            yield self.invoke(*args, **kwargs)

        async def ainvoke_stream(self, *args: Any, **kwargs: Any) -> Any:
            yield self.invoke(*args, **kwargs)

        def _parse_provider_response(self, response: Any, **kwargs: Any) -> Any:
            return response

        def _parse_provider_response_delta(self, response: Any) -> Any:
            return response

    class Agno:
        name = "Agno"

        def __init__(self) -> None:
            self.model = Scripted()
            self.db = AgnoSqliteDb(db_file=str(work / "agno.db"))
            self.agent = self.construct()
            self.memory_agent = AgnoAgent(
                model=self.model, tools=[agno_add], session_state={"items": []}
            )

        def construct(self) -> Any:
            return AgnoAgent(
                model=self.model, tools=[agno_add], db=self.db, session_state={"items": []}
            )

        def run(self, session_id: str) -> None:
            self.agent.run("go", session_id=session_id)

        def run_in_memory(self, session_id: str) -> None:
            self.memory_agent.run("go", session_id=session_id)

        def write_big(self, session_id: str, items: list[Any]) -> None:
            writer = AgnoAgent(
                model=self.model, tools=[agno_add], db=self.db, session_state={"items": items}
            )
            writer.run("go", session_id=session_id)

        def count(self, session_id: str) -> int:
            return len(self.agent.get_session_state(session_id=session_id)["items"])

    return Agno()


# ---- measuring --------------------------------------------------------------------------


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


def after_cold_caches(fn: Callable[[], Any], big: list[Any]) -> float:
    """Seconds of one call right after touching ~10 MB that has nothing to do with it.

    Encoding the big value evicts the CPU caches the way writing it does, so this call
    pays the same refill cost the first run after the big write pays: the control that
    tells a storage cost from a cold cache."""
    json.dumps(big)
    return per_call(fn, 1)


def interleaved(sides: list[Any], measure: Callable[[Any], float], rounds: int) -> list[float]:
    """Each side's median of `rounds` measurements, taken in alternation."""
    results: list[list[float]] = [[] for _ in sides]
    for _ in range(rounds):
        for i, side in enumerate(sides):
            results[i].append(measure(side))
    return [statistics.median(r) for r in results]


def advance(side: Any, session_id: str, to_run: int, done: dict[str, int]) -> None:
    key = f"{side.name}:{session_id}"
    while done.get(key, 0) < to_run:
        side.run(session_id)
        done[key] = done.get(key, 0) + 1


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller counts")
    args = parser.parse_args()
    rounds = 3 if args.quick else 7
    big_items = 10_000 if args.quick else 100_000
    work = Path(tempfile.mkdtemp(prefix="statewise-peers-"))
    sides: list[Any] = [Statewise(work)]
    agno = agno_side(work)
    if agno is not None:
        sides.append(agno)
    console = Console(width=150)
    rows: list[tuple[str, list[str], str]] = []

    def add_row(label: str, values: list[float], fmt: Callable[[float], str], goal: str) -> None:
        rows.append((label, [fmt(v) for v in values], goal))

    # Construction.
    construct = interleaved(sides, lambda s: per_call(s.construct, 2000), rounds)
    add_row("construct an agent with one tool", construct, lambda v: f"{v * 1e6:.1f} µs", "")
    memory = [float(peak_bytes(s.construct)) for s in sides]
    add_row("  tracemalloc peak of one construction", memory, lambda v: f"{v / 1024:.1f} KiB", "")

    # In-memory runs (no database).
    for side in sides:
        side.run_in_memory("mem")
    in_memory = interleaved(sides, lambda s: per_call(lambda: s.run_in_memory("mem"), 50), rounds)
    add_row("in-memory run", in_memory, lambda v: f"{v * 1e3:.3f} ms", "statewise >= 6x faster")
    in_memory_cpu = interleaved(
        sides, lambda s: cpu_per_call(lambda: s.run_in_memory("mem"), 50), rounds
    )
    add_row("  the same, CPU time", in_memory_cpu, lambda v: f"{v * 1e3:.3f} ms", "")

    # Persisted runs at 91-100 and 491-500 of one session, on fresh sessions per round.
    done: dict[str, int] = {}
    at_100: list[list[float]] = [[] for _ in sides]
    at_500: list[list[float]] = [[] for _ in sides]
    persisted_rounds = 2 if args.quick else 3
    for r in range(persisted_rounds):
        session = f"long-{r}"
        for side in sides:
            advance(side, session, 90, done)
        for i, side in enumerate(sides):
            at_100[i].append(per_call(lambda s=side, sid=session: s.run(sid), 10))  # type: ignore[misc]
            done[f"{side.name}:{session}"] += 10
        for side in sides:
            advance(side, session, 490, done)
        for i, side in enumerate(sides):
            at_500[i].append(per_call(lambda s=side, sid=session: s.run(sid), 10))  # type: ignore[misc]
            done[f"{side.name}:{session}"] += 10
        for side in sides:
            count = side.count(session)
            assert count == 500, f"{side.name} holds {count} items after 500 runs"
    add_row(
        "persisted run (SQLite), runs 91-100",
        [statistics.median(v) for v in at_100],
        lambda v: f"{v * 1e3:.3f} ms",
        "statewise >= 5x faster",
    )
    add_row(
        "persisted run (SQLite), runs 491-500",
        [statistics.median(v) for v in at_500],
        lambda v: f"{v * 1e3:.3f} ms",
        "statewise >= 8x faster",
    )

    # 100,000 items (~10 MB) in state: each of the first 5 runs after the write, against a
    # run on a session holding 100 items.
    small_items = [dict(BIG_ITEM, sku=f"SKU-{i:06d}") for i in range(100)]
    big = [dict(BIG_ITEM, sku=f"SKU-{i:06d}") for i in range(big_items)]
    first_five: list[list[float]] = []
    small_runs: list[float] = []
    cold_small: list[float] = []
    for side in sides:
        side.write_big("small", small_items)
        side.run("small")
        run_small, run_big = (lambda s=side: s.run("small")), (lambda s=side: s.run("big"))
        small_runs.append(statistics.median(per_call(run_small, 5) for _ in range(3)))
        side.write_big("big", big)
        first_five.append([per_call(run_big, 1) for _ in range(5)])
        cold_small.append(statistics.median(after_cold_caches(run_small, big) for _ in range(3)))
    worst = [max(runs) / small for runs, small in zip(first_five, small_runs, strict=True)]
    add_row(
        f"{big_items:,} items in state: worst of the first 5 runs after the write",
        worst,
        lambda v: f"{v:.2f}x the 100-item run",
        "statewise <= 1.5x",
    )
    add_row(
        f"  control: the 100-item run right after an unrelated json.dumps of the {big_items:,} items",
        [cold / small for cold, small in zip(cold_small, small_runs, strict=True)],
        lambda v: f"{v:.2f}x the 100-item run",
        "",
    )

    table = Table(title=f"statewise vs peers: one-tool agent, {rounds} interleaved rounds")
    table.add_column("measure")
    for side in sides:
        table.add_column(side.name, justify="right")
    if agno is not None:
        table.add_column("Agno / statewise", justify="right")
    table.add_column("goal")
    raw = {
        "construct an agent with one tool": construct,
        "  tracemalloc peak of one construction": memory,
        "in-memory run": in_memory,
        "  the same, CPU time": in_memory_cpu,
        "persisted run (SQLite), runs 91-100": [statistics.median(v) for v in at_100],
        "persisted run (SQLite), runs 491-500": [statistics.median(v) for v in at_500],
    }
    for label, values, goal in rows:
        ratio = []
        if agno is not None:
            numbers = raw.get(label)
            ratio = [f"{numbers[1] / numbers[0]:.1f}x" if numbers else ""]
        table.add_row(label, *values, *ratio, goal)
    console.print(table)
    if agno is None:
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
