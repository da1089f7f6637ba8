"""A client that leaves ends its run: `POST /v1/{kind}/{name}/runs` (one JSON answer) is
cancelled when its client disconnects, like the streamed routes, and the run ends not
running (the model stops being called, the stored run is cancelled or failed)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from statewise import Agent
from statewise.db import SqliteDb
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo, ToolCall
from tests.server.conftest import LiveServer


class Endless:
    """A model that never finishes: it asks for a tool, forever."""

    def __init__(self) -> None:
        self.calls = 0
        self.lock = threading.Lock()

    def __call__(self, messages: list[Message], info: RequestInfo) -> ModelResponse:
        with self.lock:
            self.calls += 1
        time.sleep(0.01)
        return ModelResponse(tool_calls=[ToolCall("tick", {}, f"c{self.calls}")])


def tick() -> str:
    """Tick once."""
    return "tick"


def _runs(db: SqliteDb, sid: str) -> list[str]:
    return [r.status for r in db.read_runs(sid)]


@pytest.mark.parametrize("route", ["/v1/agents/endless/runs", "/v1/agents/endless/runs/stream"])
def test_a_run_whose_client_leaves_is_cancelled(route: str, make_live: Any, tmp_path: Path) -> None:
    model = Endless()
    db = SqliteDb(db_file=str(tmp_path / "gone.db"))
    agent = Agent(
        name="endless", model=FunctionModel(model), db=db, tools=[tick], max_steps=1_000_000
    )
    live: LiveServer = make_live(apps=[agent])
    with httpx.Client(base_url=live.url, timeout=1.0) as client:
        if route.endswith("/stream"):
            with client.stream("POST", route, json={"input": "go", "session_id": "gone"}) as r:
                lines = r.iter_lines()
                while "tool_call" not in next(lines):
                    pass  # the run is under way; leaving the block hangs up
        else:
            with pytest.raises(httpx.ReadTimeout):
                client.post(route, json={"input": "go", "session_id": "gone"})
    deadline = time.monotonic() + 15
    while _runs(db, "gone") == ["running"] and time.monotonic() < deadline:
        time.sleep(0.05)
    statuses = _runs(db, "gone")
    assert statuses and statuses[0] in ("cancelled", "failed"), statuses
    if not route.endswith("/stream"):
        assert "client disconnected" in (db.read_runs("gone")[0].error or "")
    calls = model.calls
    time.sleep(0.5)
    assert model.calls == calls, "the model is still being called after the client left"
