"""The HTTP API under load, against the same agent run in-process, on every backend.

    python bench/bench_server.py [--seconds 5] [--clients 16] [--rounds 2]
                                 [--pg URL] [--redis URL] [--only BACKEND]

The server runs in its own process (uvicorn, one worker) with an offline agent whose every
run calls one tool that appends to state, so each run makes its three commits (run start,
the tool step, run end). For each backend (SQLite; PostgreSQL and Redis when their
servers answer, each in its own schema / key prefix, removed afterwards) and in rounds
that alternate, one invocation measures:

* in-process runs/s: the same agent on the same database, driven from this process, both
  as 16 concurrent `arun` tasks on one event loop and as one sync `run` loop (the better
  of the two is the reference; both are printed under the table);
* HTTP runs/s: 16 clients, each on its own session, and the p99 of a
  `GET /v1/sessions/{id}/state` made every 20 ms during that load by a reader in its own
  process (in the load generator's process it would time that process's own queue);
* the same HTTP load on one shared session (every commit races the others), with a
  lost-update check.

The load generator shares the machine's cores with the server, so it is a lean HTTP/1.1
client (`Http`: one keep-alive connection per client, the request bytes written by hand,
the response read by its Content-Length) rather than httpx, which spent 1.6 ms of CPU per
request here, a third of what the server spent. The server sees the same requests either
way; only the client's own cost changed.

Goals: HTTP runs/s >= 50% of in-process, and the state GET's p99 <= 20 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
REDIS_URL = "redis://127.0.0.1:6379/0"


def build_agent(db_url: str) -> Any:
    from statewise import Agent
    from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo, ToolCall

    def add_item(session_state: dict[str, Any], item: str) -> str:
        """Add an item.

        Args:
            item: The item.
        """
        session_state.setdefault("items", []).append(item)
        return "ok"

    def model(messages: list[Message], info: RequestInfo) -> ModelResponse:
        if messages[-1].role == "tool":
            return ModelResponse(content="done")
        return ModelResponse(tool_calls=[ToolCall("add_item", {"item": "x"}, "c1")])

    return Agent(
        name="bench",
        model=FunctionModel(model, id="bench"),
        db=db_url,
        session_state={"items": []},
        tools=[add_item],
    )


def build_app(db_url: str) -> Any:
    from statewise.server import create_app

    return create_app([build_agent(db_url)])


def serve(db_url: str, port: int) -> None:
    import logging

    import uvicorn

    logging.getLogger("statewise").setLevel(logging.ERROR)
    uvicorn.run(build_app(db_url), host="127.0.0.1", port=port, log_level="error", access_log=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


class Http:
    """A minimal HTTP/1.1 client on one keep-alive connection (see the module docstring)."""

    def __init__(self, url: str) -> None:
        host, _, port = url.removeprefix("http://").partition(":")
        self.host, self.port = host, int(port)
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        self.writer.write(head.encode() + body)
        status_line, _, headers = (await self.reader.readuntil(b"\r\n\r\n")).partition(b"\r\n")
        length = 0
        for line in headers.split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return int(status_line.split()[1]), await self.reader.readexactly(length)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            await self.writer.wait_closed()


class Server:
    def __init__(self, db_url: str) -> None:
        self.port = free_port()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--serve", db_url, "--port", str(self.port)],
            env=env,
        )
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{self.url}/healthz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.stop()
                raise RuntimeError(f"the bench server did not start on {db_url}")
            time.sleep(0.1)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


async def load(url: str, clients: int, seconds: float, shared: bool, tag: str) -> dict[str, Any]:
    latencies: list[float] = []
    errors = 0
    probed = f"{tag}-shared" if shared else f"{tag}-0"
    # The state reader is its own process: in this one, its requests would queue behind
    # the load generator's own work and the figure would be the client's, not the server's.
    start_at = time.time() + 1.5  # the reader's interpreter starts meanwhile
    reader = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        "--probe",
        f"{url}/v1/sessions/{probed}/state",
        "--start-at",
        str(start_at),
        "--seconds",
        str(seconds),
        stdout=asyncio.subprocess.PIPE,
    )
    await asyncio.sleep(max(0.0, start_at - time.time()))
    stop_at = time.perf_counter() + seconds

    async def client(n: int) -> None:
        nonlocal errors
        session_id = f"{tag}-shared" if shared else f"{tag}-{n}"
        body = json.dumps({"input": "add x", "session_id": session_id}).encode()
        http = Http(url)
        try:
            while time.perf_counter() < stop_at:
                started = time.perf_counter()
                status, _ = await http.request("POST", "/v1/agents/bench/runs", body)
                if status == 200:
                    latencies.append(time.perf_counter() - started)
                else:
                    errors += 1
        finally:
            await http.close()

    began = time.perf_counter()
    await asyncio.gather(*(client(n) for n in range(clients)))
    elapsed = time.perf_counter() - began
    out, _ = await reader.communicate()
    state_gets = [float(x) for x in out.split()]
    # No lost update: every completed run appended one item.
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        ids = [f"{tag}-shared"] if shared else [f"{tag}-{n}" for n in range(clients)]
        items = 0
        for sid in ids:
            r = await http.get(f"/v1/sessions/{sid}/state")
            items += len(r.json()["state"]["items"]) if r.status_code == 200 else 0
    lat = sorted(latencies)
    return {
        "runs": len(lat),
        "seconds": elapsed,
        "rps": len(lat) / elapsed,
        "p50": statistics.median(lat) * 1000 if lat else float("nan"),
        "p99": lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000 if lat else float("nan"),
        "errors": errors,
        "lost": len(lat) - items,
        "get_p99": percentile(state_gets, 0.99) * 1000,
    }


def probe(url: str, start_at: float, seconds: float) -> None:
    """The state reader: GET `url` every 20 ms for `seconds` from `start_at` (wall clock);
    prints each answered GET's latency in seconds."""

    async def read() -> None:
        base, _, path = url.removeprefix("http://").partition("/")
        http = Http(f"http://{base}")
        try:
            await asyncio.sleep(max(0.0, start_at - time.time()))
            stop_at = time.perf_counter() + seconds
            while time.perf_counter() < stop_at:
                started = time.perf_counter()
                status, _ = await http.request("GET", "/" + path)
                if status in (200, 404):
                    print(time.perf_counter() - started)
                await asyncio.sleep(0.02)
        finally:
            await http.close()

    asyncio.run(read())


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else float("nan")


def in_process(db_url: str, clients: int, seconds: float, tag: str) -> tuple[float, float]:
    """Runs/s of the server's agent driven from this process: `clients` concurrent `arun`
    tasks on one loop, and one sync `run` loop (the reference is the better of the two)."""
    agent = build_agent(db_url)
    try:
        runs = 0

        async def worker(n: int, stop_at: float) -> None:
            nonlocal runs
            while time.perf_counter() < stop_at:
                await agent.arun("add x", session_id=f"{tag}-a{n}")
                runs += 1

        async def concurrent() -> float:
            began = time.perf_counter()
            await asyncio.gather(*(worker(n, began + seconds) for n in range(clients)))
            return runs / (time.perf_counter() - began)

        async_rps = asyncio.run(concurrent())
        began, done = time.perf_counter(), 0
        while time.perf_counter() - began < seconds:
            agent.run("add x", session_id=f"{tag}-sync")
            done += 1
        return async_rps, done / (time.perf_counter() - began)
    finally:
        agent.db.close()


class Cleanup:
    """Removes this invocation's PostgreSQL schema or Redis keys (never anything else)."""

    def __init__(self, kind: str, url: str, name: str) -> None:
        self.kind, self.url, self.name = kind, url, name

    def close(self) -> None:
        if self.kind == "postgres":
            import psycopg

            with psycopg.connect(self.url, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{self.name}" CASCADE')
        else:
            import redis

            client = redis.Redis.from_url(self.url)
            try:
                keys = list(client.scan_iter(match="{" + self.name + "}*", count=1000))
                for i in range(0, len(keys), 500):
                    client.delete(*keys[i : i + 500])
            finally:
                client.close()


def backends(args: argparse.Namespace, tmp: str) -> tuple[list[tuple[str, str, Any]], list[str]]:
    """(name, URL, cleanup) for each backend that can run here, and notes on the rest."""
    found: list[tuple[str, str, Any]] = [("SQLite", f"sqlite:///{tmp}/bench.db", None)]
    notes = []
    suffix = secrets.token_hex(4)
    if not reachable("127.0.0.1", 5432):
        notes.append("PostgreSQL skipped: no server at 127.0.0.1:5432")
    else:
        schema = f"bench_{suffix}"
        found.append(
            ("PostgreSQL", f"{args.pg}?schema={schema}", Cleanup("postgres", args.pg, schema))
        )
    if not reachable("127.0.0.1", 6379):
        notes.append("Redis skipped: no server at 127.0.0.1:6379")
    else:
        prefix = f"bench-{suffix}"
        found.append(
            ("Redis", f"{args.redis}?prefix={prefix}", Cleanup("redis", args.redis, prefix))
        )
    return found, notes


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--pg", default=os.environ.get("STATEWISE_BENCH_PG", PG_URL))
    parser.add_argument("--redis", default=os.environ.get("STATEWISE_BENCH_REDIS", REDIS_URL))
    parser.add_argument(
        "--only", choices=["sqlite", "postgresql", "redis"], help="measure this backend only"
    )
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--probe", help=argparse.SUPPRESS)
    parser.add_argument("--start-at", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe:
        probe(args.probe, args.start_at, args.seconds)
        return
    if args.serve:
        serve(args.serve, args.port)
        return

    rows: list[tuple[str, float, dict[str, Any], dict[str, Any]]] = []
    notes_in_process: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        found, notes = backends(args, tmp)
        if args.only:
            found = [b for b in found if b[0].lower() == args.only]
        for name, url, cleanup in found:
            server = Server(url)
            try:
                tag = f"b{int(time.time())}"
                asyncio.run(load(server.url, args.clients, 1.0, False, tag + "w"))  # warm up
                local, http, shared = [], [], []
                for r in range(args.rounds):
                    local.append(in_process(url, args.clients, args.seconds, f"{tag}-{r}"))
                    http.append(
                        asyncio.run(
                            load(server.url, args.clients, args.seconds, False, f"{tag}-{r}")
                        )
                    )
                shared.append(
                    asyncio.run(load(server.url, args.clients, args.seconds, True, f"{tag}-s"))
                )
                async_rps = statistics.median(a for a, _ in local)
                sync_rps = statistics.median(b for _, b in local)
                rows.append((name, max(async_rps, sync_rps), _median_row(http), shared[0]))
                notes_in_process.append(
                    f"{name} in-process: {args.clients} concurrent arun {async_rps:.1f} r/s, "
                    f"one sync run loop {sync_rps:.1f} r/s"
                )
            finally:
                server.stop()
                if cleanup is not None:
                    cleanup.close()

    print(f"\nstatewise HTTP API vs in-process: {args.clients} concurrent clients, ")
    print(f"{args.seconds:g}s per measure, {args.rounds} alternating rounds (medians);")
    print("each run = 1 model step with 1 tool call writing state (3 commits);")
    print(f"uvicorn serves with {uvicorn_stack()}\n")
    head = (
        f"{'backend':<11} {'in-proc r/s':>11} {'HTTP r/s':>9} {'HTTP/in':>8} {'p50 ms':>7} "
        f"{'p99 ms':>7} {'GET p99':>8} {'shared r/s':>10} {'errors':>6} {'lost':>5}"
    )
    print(head)
    print("-" * len(head))
    for name, local_rps, http_row, shared_row in rows:
        print(
            f"{name:<11} {local_rps:>11.1f} {http_row['rps']:>9.1f} "
            f"{http_row['rps'] / local_rps * 100:>7.0f}% {http_row['p50']:>7.1f} "
            f"{http_row['p99']:>7.1f} {http_row['get_p99']:>8.1f} {shared_row['rps']:>10.1f} "
            f"{http_row['errors'] + shared_row['errors']:>6} "
            f"{http_row['lost'] + shared_row['lost']:>5}"
        )
    for note in notes_in_process + notes:
        print(note)
    print("\ngoals: HTTP r/s >= 50% of in-process; GET p99 (state read during the load) <= 20 ms")


def uvicorn_stack() -> str:
    """The HTTP parser and event loop uvicorn picks in the server (same interpreter)."""
    import importlib.util

    http = "httptools" if importlib.util.find_spec("httptools") else "h11 (pure Python)"
    loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    return f"{http} and {loop}"


def _median_row(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Per field, the median over rounds."""
    return {key: statistics.median(r[key] for r in results) for key in results[0]}


if __name__ == "__main__":
    main()
