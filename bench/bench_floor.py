"""At the engine's floor: statewise next to the storage engine under it. One command, one
table of ratios, every side measured in the same invocation.

    python bench/bench_floor.py            # full (a few minutes)
    python bench/bench_floor.py --quick    # smaller counts, a smoke run
    python bench/bench_floor.py --only hot,pages   # sections: hot, fleet, pages

* hot: writers (threads of one process) each incrementing a counter key with
  `agent.state.increment`, one commit each, all on one session ("hot") or each on its own
  ("spread"), 1, 4 and 16 of them, on SQLite and PostgreSQL. commits/s, and lost updates:
  the counters must add up to the increments made. Cells alternate in rounds; each shows
  its median. On PostgreSQL the session rows' HOT updates are counted
  (`pg_stat_user_tables`).
* fleet: one-tool agent runs queued on a DBOS queue and run by 1 and 2 `statewise worker`
  processes, next to a bare DBOS workflow with the same number of DBOS steps (trivial
  ones) on 1 and 2 worker processes of the same DBOS, and next to in-process runs. runs/s,
  PostgreSQL transactions per run (`pg_stat_database.xact_commit` of the bench database,
  read once every backend has reported its counts, less what the idle queue pollers and
  the bench's own polling commit), and the worker processes' CPU per run (less their idle
  polling). Each worker takes a few runs before it is measured, as the in-process agent
  does.
* pages: a one-tool agent run persisted to SQLite (WAL, synchronous=FULL): pages written to
  the WAL per run and ms per run, against the floor: the same number of bare
  `BEGIN IMMEDIATE; INSERT; UPDATE; COMMIT` on the same pragmas, timed in a process of its
  own, in rounds alternating with the runs. Pages per run are counted on one session (its
  rows always at the end of each table) and on 20 sessions with UUID ids taking runs in
  turn (rows inserted between other sessions' rows split pages there).
"""

from __future__ import annotations

import argparse
import itertools
import os
import resource
import secrets
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

POSTGRES_URL = os.environ.get(
    "STATEWISE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
HERE = Path(__file__).resolve()
WRITERS = (1, 4, 16)
FLEET_WORKERS = (1, 2)
BARE_QUEUE = "bare"
BARE_WORKFLOW = "bench.bare"
BARE_STEPS_ENV = "STATEWISE_BENCH_BARE_STEPS"
SECTIONS = ("hot", "fleet", "pages")
WARM_RUNS = 4  # per worker, before a queued cell is measured

Row = tuple[str, str, str, str]  # what, statewise, reference, ratio


def _admin(sql: str, *params: Any) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        cur = conn.execute(sql, params or None)
        return cur.fetchall() if cur.description else []


@contextmanager
def bench_database() -> Iterator[str]:
    """A PostgreSQL database of the bench's own, dropped afterwards."""
    name = f"sw_floor_{secrets.token_hex(4)}"
    base, _, _ = POSTGRES_URL.rpartition("/")
    _admin(f'CREATE DATABASE "{name}"')
    try:
        yield f"{base}/{name}"
    finally:
        _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# ---- hot vs spread writers ------------------------------------------------------------------


def _writers(agent: Any, sessions: list[str], duration: float) -> tuple[int, list[int]]:
    """len(sessions) threads, thread i incrementing `counter` on sessions[i] until the
    deadline; total increments, and each thread's."""
    counts = [0] * len(sessions)
    errors: list[BaseException] = []
    start = threading.Barrier(len(sessions) + 1)
    deadline = [0.0]

    def write(i: int) -> None:
        state = agent.state.for_session(sessions[i])
        start.wait()
        try:
            while time.perf_counter() < deadline[0]:
                state.increment("counter")
                counts[i] += 1
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(len(sessions))]
    for t in threads:
        t.start()
    deadline[0] = time.perf_counter() + duration
    start.wait()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return sum(counts), counts


def _pg_db(url: str, schema: str) -> Any:
    from statewise.db.postgres import PostgresDb

    return PostgresDb(url, schema=schema, pool_size=max(WRITERS) + 2)


def _hot_updates(url: str, schema: str) -> tuple[int, int]:
    import psycopg

    time.sleep(1.2)  # backends report their counts at most once a second
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
            "WHERE schemaname = %s AND relname = 'sessions'",
            (schema,),
        ).fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


def hot_section(quick: bool, work: Path, rows: list[Row], notes: list[str]) -> None:
    from statewise import Agent
    from statewise.db import SqliteDb

    duration = 1.0 if quick else 2.0
    rounds = 1 if quick else 3
    schema = f"floor_{secrets.token_hex(4)}"
    backends: dict[str, Any] = {"SQLite": SqliteDb(db_file=work / "hot.db")}
    try:
        backends["PostgreSQL"] = _pg_db(POSTGRES_URL, schema)
    except Exception as exc:  # shown in the notes
        notes.append(f"PostgreSQL skipped: {str(exc).splitlines()[0][:80]}")
    try:
        rates: dict[tuple[str, str, int], list[float]] = {}
        lost: dict[str, int] = {}
        for db in backends.values():  # warm-up: connections, caches, the first session
            _writers(Agent(name="hot", db=db), ["warm-a", "warm-b"], 0.3)
        for round_ in range(rounds):
            for name, db in backends.items():
                agent = Agent(name="hot", db=db)
                for n in WRITERS:
                    for layout in ("spread", "hot"):
                        tag = f"{layout}-{n}-{round_}"
                        sessions = [tag if layout == "hot" else f"{tag}-{i}" for i in range(n)]
                        total, _ = _writers(agent, sessions, duration)
                        rates.setdefault((name, layout, n), []).append(total / duration)
                        stored = sum(
                            agent.state.for_session(s).get("counter", 0) for s in set(sessions)
                        )
                        lost[name] = lost.get(name, 0) + (total - stored)
        most = max(WRITERS)
        for name in backends:
            med = {key[1:]: statistics.median(v) for key, v in rates.items() if key[0] == name}
            for n in WRITERS:
                hot, spread = med["hot", n], med["spread", n]
                rows.append(
                    (
                        f"{name} {n:>2} writers: one session vs own (commits/s)",
                        f"{hot:,.0f}",
                        f"{spread:,.0f}",
                        f"{hot / spread:.2f}x",
                    )
                )
            rows.append(
                (
                    f"{name} one session: {most} writers vs 1",
                    f"{med['hot', most]:,.0f}",
                    f"{med['hot', 1]:,.0f}",
                    f"{med['hot', most] / med['hot', 1]:.2f}x",
                )
            )
            rows.append((f"{name} lost updates (all cells)", str(lost[name]), "0", ""))
        if "PostgreSQL" in backends:
            upd, hot_upd = _hot_updates(POSTGRES_URL, schema)
            rows.append(
                (
                    "PostgreSQL session-row updates HOT",
                    f"{hot_upd:,} of {upd:,}",
                    "all",
                    f"{hot_upd / upd:.2f}" if upd else "-",
                )
            )
    finally:
        for db in backends.values():
            db.close()
        if "PostgreSQL" in backends:
            _admin(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


# ---- fleet vs bare DBOS vs in-process --------------------------------------------------------


def _xacts(url: str) -> int:
    import psycopg

    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = %s",
            (url.rpartition("/")[2],),
        ).fetchone()
    assert row is not None
    return int(row[0])


def _cpu(pids: list[int]) -> float:
    """CPU seconds (user + system) the processes used so far, all their threads."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


STATS_DELAY = 10.5
"""Seconds until every backend's counts are in `pg_stat_database`: a backend that goes
idle less than a second after it last reported keeps its counts for up to 10 s
(PostgreSQL's PGSTAT_IDLE_INTERVAL) unless it exits."""


def _backends(url: str) -> int:
    """Connections to the bench database (asked from another database, so the question
    is not counted as one of its transactions)."""
    rows = _admin(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", url.rpartition("/")[2]
    )
    return int(rows[0][0])


class Meter:
    """Transactions and worker CPU over a measured stretch, less the idle rate (queue
    pollers) measured just before it, and less the bench's own polling queries.

    The counts are read only when nothing can still be holding some back: after
    `STATS_DELAY` at the start, and at the end once the workers and the bench's own
    connections to the database are gone (a backend reports everything as it exits).
    """

    def __init__(self, url: str, pids: list[int]) -> None:
        self.url, self.pids = url, pids
        self.own = 0  # transactions the bench itself committed while measuring

    def idle(self, seconds: float = 4.0) -> None:
        time.sleep(STATS_DELAY)  # (the workers' start and warm-up reach the statistics)
        x0, c0, t0 = _xacts(self.url), _cpu(self.pids), time.perf_counter()
        time.sleep(seconds)
        x1, c1, t1 = _xacts(self.url), _cpu(self.pids), time.perf_counter()
        self.idle_xacts = (x1 - x0) / (t1 - t0)
        self.idle_cpu = (c1 - c0) / (t1 - t0)
        self.x0, self.c0, self.t0 = x1, c1, t1

    def cpu_done(self) -> None:
        """The measured stretch ends: the workers' CPU (read before they stop)."""
        self.c1, self.t1 = _cpu(self.pids), time.perf_counter()

    def done(self) -> tuple[float, float]:
        """(transactions, CPU seconds) since `idle`, less idle rates. Call it once the
        workers stopped (their pollers ran until then) and the bench closed its
        connections to the database."""
        stopped = time.perf_counter()
        deadline = time.monotonic() + 30
        while _backends(self.url) and time.monotonic() < deadline:
            time.sleep(0.05)
        x1 = _xacts(self.url)
        xacts = x1 - self.x0 - self.own - self.idle_xacts * (stopped - self.t0)
        cpu = self.c1 - self.c0 - self.idle_cpu * (self.t1 - self.t0)
        return xacts, cpu


def _wait_finished(url: str, ids: list[str], meter: Meter, timeout: float = 600) -> float:
    """Poll DBOS's workflow table until every run in `ids` finished; the last finish time
    (epoch seconds). Each poll is one transaction, counted as the bench's own."""
    import psycopg

    deadline = time.monotonic() + timeout
    with psycopg.connect(url, autocommit=True) as conn:
        meter.own += 0  # (connecting commits nothing)
        while True:
            meter.own += 1
            done, failed, last = conn.execute(
                "SELECT count(*) FILTER (WHERE status = 'SUCCESS'), "
                "count(*) FILTER (WHERE status IN ('ERROR', 'CANCELLED', "
                "'MAX_RECOVERY_ATTEMPTS_EXCEEDED')), max(updated_at) "
                "FROM dbos.workflow_status WHERE workflow_uuid = ANY(%s)",
                (ids,),
            ).fetchone()
            if failed:
                raise SystemExit(f"{failed} run(s) failed")
            if done == len(ids):
                return int(last) / 1000
            if time.monotonic() > deadline:
                raise SystemExit(f"runs not finished after {timeout} s ({done}/{len(ids)})")
            time.sleep(0.1)


def _bare_command(url: str, name: str, steps: int) -> list[str]:
    return [sys.executable, str(HERE), "--bare-worker", name, "--db", url, "--steps", str(steps)]


def bare_worker(url: str, name: str) -> None:
    """A DBOS worker process with nothing but a workflow of trivial steps (the number from
    the environment), configured as `statewise worker` configures DBOS."""
    import signal

    from dbos import DBOS, DBOSPortableJSONSerializer

    from statewise.fleet._names import DEFAULT_APP_NAME, DEFAULT_APP_VERSION, DEFAULT_SCHEMA

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    DBOS(
        config={
            "name": DEFAULT_APP_NAME,
            "system_database_url": url,
            "dbos_system_schema": DEFAULT_SCHEMA,
            "executor_id": name,
            "application_version": DEFAULT_APP_VERSION,
            "serializer": DBOSPortableJSONSerializer(),
            "log_level": "WARNING",
        }
    )
    DBOS.listen_queues([BARE_QUEUE])
    DBOS.launch()
    print(f"worker {name} serving", flush=True)
    while not stop.wait(0.2):
        pass
    DBOS.destroy(workflow_completion_timeout_sec=10)


def _register_bare_workflow() -> None:
    from dbos import DBOS, StepOptions, WorkflowSerializationFormat

    steps = int(os.environ.get(BARE_STEPS_ENV, "3"))

    def noop(i: int) -> int:
        return i

    @DBOS.workflow(name=BARE_WORKFLOW, serialization_type=WorkflowSerializationFormat.PORTABLE)
    def bare(request: dict[str, Any]) -> Any:
        for i in range(steps):
            DBOS.run_step(StepOptions(name=f"step {i}"), noop, i)
        return "ok"


def _queued_cell(
    url: str, workers: int, runs: int, logs: Path, *, bare_steps: int | None
) -> tuple[float, float, float, list[str]]:
    """runs/s, transactions per run, worker CPU ms per run, run ids."""
    from bench_fleet import build_agent, start_worker, stop_workers, wait_ready
    from dbos import DBOSClient, DBOSPortableJSONSerializer, EnqueueOptions
    from dbos import WorkflowSerializationFormat as Format

    from statewise.fleet import Fleet

    kind = "bare" if bare_steps is not None else "sw"
    names = [f"{kind}-{workers}-{k}-{secrets.token_hex(2)}" for k in range(workers)]
    procs = {
        name: start_worker(
            url,
            name,
            logs,
            command=_bare_command(url, name, bare_steps) if bare_steps is not None else None,
        )
        for name in names
    }
    agent = build_agent(url)
    stopped = False
    try:
        wait_ready(procs, logs)
        meter = Meter(url, [p.pid for p in procs.values()])
        with Fleet(url) as fleet:
            client = DBOSClient(system_database_url=url, serializer=DBOSPortableJSONSerializer())

            def enqueue(tag: str) -> str:
                if bare_steps is None:
                    handle = fleet.enqueue(
                        agent, tag, session_id=f"{kind}{workers}-{tag}", queue="bench"
                    )
                    return handle.run_id
                run_id = f"bare-{workers}-{tag}-{secrets.token_hex(4)}"
                options = EnqueueOptions(
                    workflow_name=BARE_WORKFLOW,
                    queue_name=BARE_QUEUE,
                    workflow_id=run_id,
                    app_version=fleet.app_version,
                    serialization_type=Format.PORTABLE,
                )
                client.enqueue(options, {"input": tag})
                return run_id

            # Each worker's first runs pay what a process pays once (connections, imports,
            # threads): warmed up as the in-process cell is, both kinds alike.
            warm = [enqueue(f"warm{i}") for i in range(WARM_RUNS * workers)]
            _wait_finished(url, warm, Meter(url, []))
            meter.idle()
            start = time.time()
            ids = [enqueue(f"item{i}") for i in range(runs)]
            finished = _wait_finished(url, ids, meter)
            meter.cpu_done()
            client.destroy()
        stop_workers(procs)
        stopped = True
        agent.db.close()
        xacts, cpu = meter.done()
        return runs / (finished - start), xacts / runs, cpu / runs * 1000, ids
    finally:
        if not stopped:
            stop_workers(procs)
            agent.db.close()


def _in_process_cell(url: str, runs: int) -> tuple[float, float, float]:
    from bench_fleet import build_agent

    agent = build_agent(url)
    agent.run("warm", session_id="inproc-warm")
    agent.db.close()  # (its backends report their counts as they end)
    agent = build_agent(url)
    time.sleep(1.1)
    x0 = _xacts(url)
    c0 = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    for i in range(runs):
        agent.run(f"item{i}", session_id=f"inproc-{i}")
    elapsed = time.perf_counter() - start
    c1 = resource.getrusage(resource.RUSAGE_SELF)
    agent.db.close()
    time.sleep(1.1)
    xacts = _xacts(url) - x0 - 1
    cpu = (c1.ru_utime + c1.ru_stime) - (c0.ru_utime + c0.ru_stime)
    return runs / elapsed, xacts / runs, cpu / runs * 1000


def _steps_of(url: str, run_id: str) -> int:
    from dbos import DBOSClient, DBOSPortableJSONSerializer

    client = DBOSClient(system_database_url=url, serializer=DBOSPortableJSONSerializer())
    try:
        return len(client.list_workflow_steps(run_id, load_output=False))
    finally:
        client.destroy()


def fleet_section(quick: bool, work: Path, rows: list[Row], notes: list[str]) -> None:
    from statewise.fleet import Fleet

    runs = 40 if quick else 150
    logs = work / "logs"
    logs.mkdir(exist_ok=True)
    with bench_database() as url:
        with Fleet(url) as fleet:
            fleet.queue("bench", polling_interval=0.05)
            fleet.queue(BARE_QUEUE, polling_interval=0.05)
        in_rate, in_xacts, in_cpu = _in_process_cell(url, runs)
        queued: dict[int, tuple[float, float, float]] = {}
        bare: dict[int, tuple[float, float, float]] = {}
        steps = 0
        for workers in FLEET_WORKERS:  # side by side: each bare cell right after its pair
            rate, xacts, cpu, ids = _queued_cell(url, workers, runs, logs, bare_steps=None)
            queued[workers] = (rate, xacts, cpu)
            steps = _steps_of(url, ids[-1])
            rate, xacts, cpu, _ = _queued_cell(url, workers, runs, logs, bare_steps=steps)
            bare[workers] = (rate, xacts, cpu)
    for workers in FLEET_WORKERS:
        (qr, qx, qc), (br, bx, bc) = queued[workers], bare[workers]
        label = f"fleet, {workers} worker{'s' if workers > 1 else ''}"
        rows.append((f"{label}: runs/s vs bare DBOS", f"{qr:.1f}", f"{br:.1f}", f"{qr / br:.2f}x"))
        rows.append((f"{label}: PG transactions/run", f"{qx:.1f}", f"{bx:.1f}", f"{qx / bx:.2f}x"))
        rows.append((f"{label}: worker CPU ms/run", f"{qc:.2f}", f"{bc:.2f}", f"{qc / bc:.2f}x"))
    rows.append(
        (
            "in-process: runs/s, xacts/run, CPU ms/run",
            f"{in_rate:.1f}, {in_xacts:.1f}, {in_cpu:.2f}",
            f"queued 1 worker: {queued[1][0]:.1f}",
            f"{queued[1][0] / in_rate:.2f}x",
        )
    )
    # What a queued run adds to a bare workflow, next to what the same run costs in-process:
    # the part of the fleet's cost that is the run itself.
    (_, qx, qc), (_, bx, bc) = queued[1], bare[1]
    rows.append(
        (
            "fleet 1 worker less bare DBOS: xacts, CPU ms",
            f"{qx - bx:.1f}, {qc - bc:.2f}",
            f"in-process: {in_xacts:.1f}, {in_cpu:.2f}",
            "",
        )
    )
    notes.append(
        f"fleet: {runs} one-tool runs per cell, each on its own session; bare DBOS workflow of "
        f"{steps} trivial steps (as many DBOS steps as a queued run records); queue polling 0.05 s"
    )


# ---- SQLite pages and the floor --------------------------------------------------------------


def _floor_process(conn: Connection, db_file: str, commits: int) -> None:
    """The floor in a process of its own: ms per run of `commits` bare commits, per chunk."""
    from bench_state import BareCommits, timed

    bare = BareCommits(Path(db_file), commits)
    while (chunk := conn.recv()) is not None:
        conn.send(timed(bare.run, chunk))


def pages_section(quick: bool, work: Path, rows: list[Row], notes: list[str]) -> None:
    import multiprocessing as mp

    from bench_state import (
        BareCommits,
        commits_per_run,
        make_agent,
        timed,
        wal_pages_by_tree,
        wal_pages_per_run,
    )

    agent = make_agent(work / "pages.db")
    agent.run("warm", session_id="s")
    commits = commits_per_run(agent, "s")
    chunk, rounds = (20, 5) if quick else (50, 15)
    ctx = mp.get_context("spawn")
    here, there = ctx.Pipe()
    proc = ctx.Process(target=_floor_process, args=(there, str(work / "floor-own.db"), commits))
    proc.start()
    try:
        run_ms, floor_ms = [], []
        for _ in range(rounds):
            here.send(chunk)
            floor_ms.append(here.recv())
            run_ms.append(timed(lambda: agent.run("go", session_id="s"), chunk))
    finally:
        here.send(None)
        proc.join()
    pages = wal_pages_per_run(work / "pages.db", lambda: agent.run("go", session_id="s"))
    trees = wal_pages_by_tree(work / "pages.db", lambda: agent.run("go", session_id="s"))
    floor = BareCommits(work / "floor-pages.db", commits)
    floor_pages = wal_pages_per_run(work / "floor-pages.db", floor.run)
    sessions = [str(uuid.uuid4()) for _ in range(20)]
    for _ in range(5):
        for session_id in sessions:
            agent.run("go", session_id=session_id)
    turn = itertools.cycle(sessions)
    # (40 runs: their pages stay under the WAL's autocheckpoint, which would reuse it)
    spread = statistics.mean(
        wal_pages_per_run(work / "pages.db", lambda: agent.run("go", session_id=next(turn)), 40)
        for _ in range(3)
    )
    agent.db.close()
    run, bare = statistics.median(run_ms), statistics.median(floor_ms)
    rows.append(
        (
            f"SQLite run vs {commits} bare commits (ms)",
            f"{run:.3f}",
            f"{bare:.3f}",
            f"{run / bare:.2f}x",
        )
    )
    rows.append(
        (
            "SQLite WAL pages per run",
            f"{pages:.1f}",
            f"{floor_pages:.1f}",
            f"{pages / floor_pages:.2f}x",
        )
    )
    rows.append(
        (
            "SQLite WAL pages per run, 20 sessions in turn",
            f"{spread:.1f}",
            f"{floor_pages:.1f}",
            f"{spread / floor_pages:.2f}x",
        )
    )
    if trees:
        notes.append(
            "WAL pages per run by table or index: "
            + ", ".join(f"{name} {count:.1f}" for name, count in trees.items())
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller counts, a smoke run")
    parser.add_argument("--only", help=f"comma-separated sections of: {', '.join(SECTIONS)}")
    parser.add_argument("--bare-worker", help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare_worker:
        bare_worker(args.db, args.bare_worker)
        return
    only = args.only.split(",") if args.only else list(SECTIONS)
    unknown = set(only) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown section(s) {', '.join(sorted(unknown))}; one of {SECTIONS}")
    sections: dict[str, Callable[[bool, Path, list[Row], list[str]], None]] = {
        "hot": hot_section,
        "fleet": fleet_section,
        "pages": pages_section,
    }
    rows: list[Row] = []
    notes: list[str] = []
    console = Console(width=110)
    with tempfile.TemporaryDirectory(prefix="swfloor-") as tmp:
        for name in SECTIONS:
            if name in only:
                sections[name](args.quick, Path(tmp), rows, notes)
                console.print(f"{name}: done", style="dim")
    table = Table(title=f"statewise at the engine's floor ({os.cpu_count()} CPUs)")
    for column in ("measure", "statewise", "reference", "ratio"):
        table.add_column(column, justify="left" if column == "measure" else "right")
    for row in rows:
        table.add_row(*row)
    console.print(table)
    for note in notes:
        console.print(note, style="dim")


sys.path.insert(0, str(HERE.parent))  # bench_fleet, bench_state
if os.environ.get(BARE_STEPS_ENV) or "--bare-worker" in sys.argv:
    if "--steps" in sys.argv:
        os.environ[BARE_STEPS_ENV] = sys.argv[sys.argv.index("--steps") + 1]
    _register_bare_workflow()

if __name__ == "__main__":
    main()
