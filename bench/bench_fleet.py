"""Fleet throughput: queued one-tool agent runs on 1, 2 and 4 worker processes, next to
the same runs called in-process. One table.

    python bench/bench_fleet.py            # 120 runs per cell
    python bench/bench_fleet.py --runs 40  # quicker

Each run is one agent run with one tool call (the tool appends an item), on its own
session, with sessions on PostgreSQL. "in-process" calls `agent.run` in a loop in this
process; "N workers" enqueues every run at once on a DBOS queue and lets N
`statewise worker` processes execute them. runs/s = runs / (last finish - first enqueue);
latency = queue to finish per run (DBOS's created/completed timestamps), p50 and p95. The
database is the local test server (STATEWISE_TEST_POSTGRES_URL); the bench creates its
own database and drops it afterwards.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

POSTGRES_URL = os.environ.get(
    "STATEWISE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
WORKER_COUNTS = (1, 2, 4)
HERE = Path(__file__).resolve()
SRC = HERE.parents[1] / "src"


def add(session_state: dict[str, Any], item: str) -> str:
    """Append one item."""
    session_state.setdefault("items", []).append(item)
    return "ok"


def _model(messages: Any, info: Any) -> Any:
    from statewise.models import ModelResponse, ToolCall

    if messages[-1].role == "tool":
        return ModelResponse(content="ok")
    return ModelResponse(tool_calls=[ToolCall("add", {"item": messages[-1].content}, "c")])


def build_agent(url: str) -> Any:
    from statewise import Agent
    from statewise.db.postgres import PostgresDb
    from statewise.models import FunctionModel

    return Agent(
        name="bench_agent",
        model=FunctionModel(_model),
        tools=[add],
        db=PostgresDb(url, schema="sessions", pool_size=8),
    )


if "STATEWISE_BENCH_FLEET_DB" in os.environ:  # loaded by `statewise worker`
    agent = build_agent(os.environ["STATEWISE_BENCH_FLEET_DB"])


def _admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(sql)


def start_worker(
    url: str, name: str, logs: Path, *, queue: str = "bench", command: list[str] | None = None
) -> subprocess.Popen[bytes]:
    """One worker process named `name`, its output in `logs/<name>.log`: a `statewise
    worker` serving this module's agent from `queue`, or `command` (another worker, e.g. a
    bare DBOS one) with the same environment."""
    env = dict(os.environ)
    env["STATEWISE_BENCH_FLEET_DB"] = url
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")])
    log = open(logs / f"{name}.log", "wb")  # noqa: SIM115 - owned by the process
    argv = command or [
        sys.executable,
        "-m",
        "statewise",
        "worker",
        f"{HERE}:agent",
        "--db",
        url,
        "--executor-id",
        name,
        "--queue",
        queue,
    ]
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    log.close()
    return proc


def wait_ready(procs: dict[str, subprocess.Popen[bytes]], logs: Path) -> None:
    """Wait until every worker logged `worker <name> serving`."""
    deadline = time.monotonic() + 120
    for name, proc in procs.items():
        while f"worker {name} serving" not in (logs / f"{name}.log").read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(
                    f"worker {name} did not start:\n{(logs / f'{name}.log').read_text()}"
                )
            time.sleep(0.05)


def stop_workers(procs: dict[str, subprocess.Popen[bytes]]) -> None:
    for proc in procs.values():
        proc.send_signal(signal.SIGTERM)
    for proc in procs.values():
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def in_process(url: str, runs: int) -> tuple[float, list[float]]:
    bench_agent = build_agent(url)
    latencies = []
    start = time.perf_counter()
    for i in range(runs):
        t0 = time.perf_counter()
        bench_agent.run(f"item{i}", session_id=f"inproc-{i}")
        latencies.append(time.perf_counter() - t0)
    elapsed = time.perf_counter() - start
    bench_agent.db.close()
    return runs / elapsed, latencies


def queued(url: str, workers: int, runs: int, logs: Path) -> tuple[float, list[float]]:
    from statewise.fleet import Fleet

    bench_agent = build_agent(url)
    procs = {
        f"bench-{workers}-{k}": start_worker(url, f"bench-{workers}-{k}", logs)
        for k in range(workers)
    }
    try:
        wait_ready(procs, logs)
        with Fleet(url) as fleet:
            start = time.time()
            handles = [
                fleet.enqueue(bench_agent, f"item{i}", session_id=f"q{workers}-{i}", queue="bench")
                for i in range(runs)
            ]
            for handle in handles:
                handle.result(timeout=600)
            infos = [h.status() for h in handles]
        finished = max(i.finished_at.timestamp() for i in infos if i.finished_at)
        latencies = [
            (i.finished_at - i.created_at).total_seconds()
            for i in infos
            if i.finished_at and i.created_at
        ]
        return runs / (finished - start), latencies
    finally:
        stop_workers(procs)
        bench_agent.db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=120, help="runs per cell")
    args = parser.parse_args()
    name = f"sw_fleet_bench_{secrets.token_hex(4)}"
    base, _, _ = POSTGRES_URL.rpartition("/")
    url = f"{base}/{name}"
    _admin(f'CREATE DATABASE "{name}"')
    console = Console()
    table = Table(title=f"one-tool agent runs, {args.runs} per row, sessions on PostgreSQL")
    for column in ("how", "runs/s", "p50 latency", "p95 latency"):
        table.add_column(column, justify="right" if column != "how" else "left")
    try:
        from statewise.fleet import Fleet

        with Fleet(url) as fleet:
            fleet.queue("bench", polling_interval=0.05)
        rows = [("in-process (agent.run loop)", *in_process(url, args.runs))]
        with tempfile.TemporaryDirectory() as tmp:
            for workers in WORKER_COUNTS:
                label = f"queued, {workers} worker process{'es' if workers > 1 else ''}"
                rows.append((label, *queued(url, workers, args.runs, Path(tmp))))
                console.print(f"{label}: done", style="dim")
        for label, rate, latencies in rows:
            q = statistics.quantiles(latencies, n=20)
            table.add_row(
                label,
                f"{rate:.1f}",
                f"{statistics.median(latencies) * 1000:.0f} ms",
                f"{q[18] * 1000:.0f} ms",
            )
        console.print(table)
        console.print(
            f"{os.cpu_count()} CPU(s); queue polling interval 0.05 s; in-process latency is "
            "the run itself (no queue)."
        )
    finally:
        _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
