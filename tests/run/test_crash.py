"""A process killed with SIGKILL mid-run leaves a consistent database (DESIGN §3)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

from statewise import Agent
from statewise.db import SqliteDb
from statewise.models import FunctionModel, ModelResponse
from tests._env import subprocess_env

CRASHING_RUN = """
import os, signal, sys
from statewise import Agent
from statewise.db import SqliteDb
from statewise.models import FunctionModel, ModelResponse, ToolCall

def add(session_state, item: str) -> str:
    session_state["items"].append(item)
    return "ok"

def model(messages, info):
    steps = sum(1 for m in messages if m.role == "assistant")
    if steps == 2:
        # Step 3 is in flight: its tool wrote nothing yet, steps 1-2 are committed.
        os.kill(os.getpid(), signal.SIGKILL)
    return ModelResponse(tool_calls=[ToolCall("add", {"item": f"step{steps + 1}"}, f"c{steps}")])

agent = Agent(model=FunctionModel(model), tools=[add], db=SqliteDb(db_file=sys.argv[1]),
              session_state={"items": []}, session_id="crashy")
agent.run("go")
"""


def test_sigkill_mid_run_keeps_committed_steps_and_the_session_works(tmp_path: Path) -> None:
    db_file = tmp_path / "crash.db"
    proc = subprocess.run(
        [sys.executable, "-c", CRASHING_RUN, str(db_file)],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == -9, proc.stderr
    with sqlite3.connect(db_file) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        statuses = conn.execute("SELECT status FROM statewise_runs").fetchall()
    assert statuses == [("running",)], "the killed run is visibly unfinished"
    agent = Agent(
        model=FunctionModel(lambda messages, info: ModelResponse(content="back")),
        db=SqliteDb(db_file=db_file),
    )
    assert agent.get_session_state("crashy") == {"items": ["step1", "step2"]}
    events = [e.type for e in agent.db.read_events("crashy")]
    assert events.count("model_response") == 2 and "run_completed" not in events
    seqs = [e.seq for e in agent.db.read_events("crashy")]
    assert seqs == list(range(1, len(seqs) + 1)), "no gap, nothing half-written"
    out = agent.run("after the crash", session_id="crashy")
    assert out.content == "back"
    assert agent.get_session_state("crashy") == {"items": ["step1", "step2"]}
    assert agent.db.read_runs("crashy")[-1].status == "completed"
