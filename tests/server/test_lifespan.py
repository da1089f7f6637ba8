"""The server's lifespan: in a process that lets statewise manage its collector (as
`statewise serve` does), the objects alive at startup are kept out of the garbage
collector's full collections while it serves, and given back when it stops; an app
mounted in someone else's process leaves the collector alone."""

from __future__ import annotations

import gc
import socket
import threading
import time
import weakref
from pathlib import Path

import httpx
import uvicorn

from statewise import tune_collector
from statewise.db import SqliteDb
from statewise.server import create_app
from tests.server.conftest import make_agent


class Cycle:
    def __init__(self) -> None:
        self.me = self


def _serve_one_run(tmp_path: Path) -> int:
    """Serve one run; the freeze count seen while serving."""
    db = SqliteDb(db_file=tmp_path / "s.db")
    app = create_app([make_agent(db)])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", ws="none"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
            time.sleep(0.01)
        frozen = gc.get_freeze_count()
        r = httpx.post(
            f"http://127.0.0.1:{port}/v1/agents/lister/runs",
            json={"input": "add x", "session_id": "s1"},
            timeout=30,
        )
        assert r.status_code == 200, r.text
        assert r.json()["session_state"]["items"] == ["x"]
        # garbage made while serving is collected as before
        cycle = Cycle()
        gone = weakref.ref(cycle)
        del cycle
        gc.collect()
        assert gone() is None
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        db.close()
    assert not thread.is_alive()
    assert gc.get_freeze_count() == 0
    return frozen


def test_startup_objects_are_frozen_while_serving_and_given_back_at_shutdown(
    tmp_path: Path,
) -> None:
    assert gc.get_freeze_count() == 0
    tune_collector()
    try:
        # everything alive at startup (this test's own objects too) was out of sight
        assert _serve_one_run(tmp_path) > 10_000
    finally:
        tune_collector(False)


def test_a_mounted_app_leaves_the_collector_alone(tmp_path: Path) -> None:
    assert gc.get_freeze_count() == 0
    assert _serve_one_run(tmp_path) == 0
