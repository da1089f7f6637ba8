"""AG-UI state sync: what a run sends to the frontend, by state size.

    python bench/bench_agui.py [--sizes 100,10000,100000] [--runs 5]

A session holds a list of N items; each AG-UI run appends one item through a tool. The
table shows the run-start STATE_SNAPSHOT (the protocol sends one per run), the bytes of
all STATE_DELTA events of the run (JSON Patch made from the recorded ops), what resending
a snapshot at each of the run's commit points would cost instead, and the median time
of one AG-UI run over real HTTP (SQLite, one uvicorn worker in a thread). The frontend
sends its whole state back with every run, so large states need a larger max_body_bytes
(the bench uses 64 MiB).
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import uvicorn


def build_app(db_file: str) -> Any:
    from statewise import Agent
    from statewise.db import SqliteDb
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
        return ModelResponse(tool_calls=[ToolCall("add_item", {"item": "new"}, "c1")])

    agent = Agent(
        name="lister", model=FunctionModel(model), db=SqliteDb(db_file=db_file), tools=[add_item]
    )
    return agent, create_app([agent], max_body_bytes=64 * 1024 * 1024)


def serve(app: Any) -> tuple[str, uvicorn.Server, threading.Thread]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    return f"http://127.0.0.1:{sock.getsockname()[1]}", server, thread


def one_run(client: httpx.Client, thread: str, state: Any) -> tuple[list[dict[str, Any]], float]:
    body = {
        "threadId": thread,
        "runId": uuid.uuid4().hex,
        "messages": [{"id": uuid.uuid4().hex, "role": "user", "content": "add"}],
        "state": state,
    }
    started = time.perf_counter()
    r = client.post("/v1/agents/lister/agui", json=body)
    elapsed = time.perf_counter() - started
    r.raise_for_status()
    events = [json.loads(b[len("data: ") :]) for b in r.text.strip().split("\n\n")]
    return events, elapsed


def measure(size: int, runs: int) -> dict[str, Any]:
    import jsonpatch

    with tempfile.TemporaryDirectory() as tmp:
        agent, app = build_app(str(Path(tmp) / "agui.db"))
        agent.update_session_state({"items": [f"item-{i}" for i in range(size)]}, "t")
        url, server, thread = serve(app)
        try:
            with httpx.Client(base_url=url, timeout=120) as client:
                state: Any = {}
                times, snap_bytes, delta_bytes, deltas = [], [], [], []
                for _ in range(runs):
                    events, elapsed = one_run(client, "t", state)
                    times.append(elapsed)
                    for event in events:
                        if event["type"] == "STATE_SNAPSHOT":
                            state = event["snapshot"]
                            snap_bytes.append(len(json.dumps(event)))
                    run_deltas = [e for e in events if e["type"] == "STATE_DELTA"]
                    deltas.append(len(run_deltas))
                    delta_bytes.append(sum(len(json.dumps(e)) for e in run_deltas))
                    for event in run_deltas:
                        state = jsonpatch.apply_patch(state, event["delta"])
                stored = client.get("/v1/sessions/t/state").json()["state"]
                assert state == stored, "the frontend's copy drifted from the stored state"
        finally:
            server.should_exit = True
            thread.join(timeout=10)
    return {
        "size": size,
        "snapshot": statistics.median(snap_bytes),
        "delta": statistics.median(delta_bytes),
        "commits": statistics.median(deltas),
        "resend": statistics.median(snap_bytes) * statistics.median(deltas),
        "ms": statistics.median(times) * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,10000,100000")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    rows = [measure(int(n), args.runs) for n in args.sizes.split(",")]
    print(
        f"{'items':>8} {'snapshot B':>11} {'deltas/run':>10} {'delta B/run':>11} "
        f"{'resend B/run':>12} {'run ms':>8}"
    )
    for r in rows:
        print(
            f"{r['size']:>8} {r['snapshot']:>11.0f} {r['commits']:>10.0f} {r['delta']:>11.0f} "
            f"{r['resend']:>12.0f} {r['ms']:>8.1f}"
        )


if __name__ == "__main__":
    main()
