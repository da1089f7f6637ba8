"""Runs per second through the HTTP API: 16 concurrent clients, SQLite and PostgreSQL.

    python bench/bench_server.py [--seconds 5] [--clients 16] [--pg URL]

The server runs in its own process (uvicorn, one worker) with an offline agent whose every
run calls one tool that appends to state, so each run makes its three commits (run start,
the tool step, run end). Two loads: every client on its own session, and all clients on
one shared session (every commit races the others and is rebased). PostgreSQL is measured
when `statewise.db.postgres` exists and the server answers; otherwise the row says why not.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
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


def build_app(db_url: str) -> Any:
    from statewise import Agent
    from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo, ToolCall
    from statewise.server import create_app

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

    agent = Agent(
        name="bench",
        model=FunctionModel(model, id="bench"),
        db=db_url,
        session_state={"items": []},
        tools=[add_item],
    )
    return create_app([agent])


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
    stop_at = time.perf_counter() + seconds

    async def client(n: int) -> None:
        nonlocal errors
        session_id = f"{tag}-shared" if shared else f"{tag}-{n}"
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            while time.perf_counter() < stop_at:
                started = time.perf_counter()
                r = await http.post(
                    "/v1/agents/bench/runs", json={"input": "add x", "session_id": session_id}
                )
                if r.status_code == 200:
                    latencies.append(time.perf_counter() - started)
                else:
                    errors += 1

    began = time.perf_counter()
    await asyncio.gather(*(client(n) for n in range(clients)))
    elapsed = time.perf_counter() - began
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
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--pg", default=os.environ.get("STATEWISE_BENCH_PG", PG_URL))
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.port)
        return

    rows: list[tuple[str, str, dict[str, Any] | str]] = []
    notes: list[tuple[str, str, dict[str, Any] | str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        backends = [("SQLite", f"sqlite:///{tmp}/bench.db")]
        if importlib.util.find_spec("statewise.db.postgres") is None:
            notes.append(("PostgreSQL", "-", "skipped: statewise.db.postgres is not merged yet"))
        elif not reachable("127.0.0.1", 5432):
            notes.append(("PostgreSQL", "-", "skipped: no server at 127.0.0.1:5432"))
        else:
            backends.append(("PostgreSQL", args.pg))
        for name, url in backends:
            server = Server(url)
            try:
                tag = f"b{int(time.time())}"
                asyncio.run(load(server.url, args.clients, 1.0, False, tag + "w"))  # warm up
                for shared in (False, True):
                    result = asyncio.run(load(server.url, args.clients, args.seconds, shared, tag))
                    label = "1 shared session" if shared else f"{args.clients} sessions"
                    rows.append((name, label, result))
            finally:
                server.stop()

    print(f"\nstatewise HTTP API: {args.clients} concurrent clients, {args.seconds:g}s per row,")
    print("each run = 1 model step with 1 tool call writing state (3 commits)\n")
    head = f"{'backend':<11} {'load':<17} {'runs':>6} {'runs/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'errors':>6} {'lost':>5}"
    print(head)
    print("-" * len(head))
    for name, label, result in rows + notes:
        if isinstance(result, str):
            print(f"{name:<11} {result}")
            continue
        print(
            f"{name:<11} {label:<17} {result['runs']:>6} {result['rps']:>8.1f} "
            f"{result['p50']:>8.1f} {result['p99']:>8.1f} {result['errors']:>6} {result['lost']:>5}"
        )


if __name__ == "__main__":
    main()
