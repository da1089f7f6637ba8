"""Walk one persisted `agent.run()` from the call to the SQL and back, and count it.

    python bench/walk_run.py

The run is the benchmark's shape: one tool call (the tool appends an item) on SQLite on
disk, an offline model, a session that already exists (the steady state). Printed:

* statewise files the run enters (a function of theirs is called) and their list;
* Python calls per run: calls of functions defined in statewise, and of any function;
* frames from `Agent.run` to the first INSERT, counting every Python frame on the stack
  (statewise's, asyncio's, the standard library's) and statewise's alone.

Reproducible (no timing): the figures a reader of the code pays, not the machine.
"""

from __future__ import annotations

import sqlite3
import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any

from bench_state import add, model  # (the benchmark's run: one tool call appending an item)

import statewise
from statewise import Agent
from statewise.db import SqliteDb
from statewise.models import FunctionModel

SRC = str(Path(statewise.__file__).parent)


class Walk:
    """Counts calls while `on` and remembers the stack at the first INSERT."""

    def __init__(self) -> None:
        self.on = False
        self.files: set[str] = set()
        self.calls = 0
        self.own_calls = 0
        self.insert_stack: list[str] | None = None

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if not self.on or event != "call" or frame.f_code.co_filename == __file__:
            return
        self.calls += 1
        name = frame.f_code.co_filename
        if name.startswith(SRC):
            self.own_calls += 1
            self.files.add(name[len(SRC) + 1 :])

    def trace_sql(self, statement: str) -> None:
        if not self.on or self.insert_stack is not None:
            return
        if statement.lstrip().upper().startswith("INSERT"):
            frames = []
            frame: FrameType | None = sys._getframe(1)  # (not inspect.stack: no calls)
            while frame is not None:
                frames.append(f"{frame.f_code.co_filename}:{frame.f_code.co_name}")
                frame = frame.f_back
            # From the caller's `Agent.run` frame up to the frame that ran the INSERT.
            run_at = max(i for i, f in enumerate(frames) if f.endswith("agent.py:run"))
            self.insert_stack = list(reversed(frames[: run_at + 1]))


def main() -> None:
    walk = Walk()
    connect = sqlite3.connect

    def traced_connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = connect(*args, **kwargs)
        conn.set_trace_callback(walk.trace_sql)
        return conn

    sqlite3.connect = traced_connect  # type: ignore[assignment]
    with tempfile.TemporaryDirectory() as tmp:
        agent = Agent(
            model=FunctionModel(model),
            tools=[add],
            db=SqliteDb(db_file=Path(tmp) / "walk.db"),
            session_state={"items": []},
        )
        for _ in range(3):  # the session exists, caches are warm
            agent.run("add", session_id="s")
        sys.setprofile(walk.profile)
        walk.on = True
        agent.run("add", session_id="s")
        walk.on = False
        sys.setprofile(None)
    stack = walk.insert_stack or []
    own = [f for f in stack if f.startswith(SRC)]
    print(f"statewise files entered: {len(walk.files)}")
    print(f"Python calls per run: {walk.own_calls} in statewise, {walk.calls} in all")
    print(f"frames from Agent.run to the first INSERT: {len(stack)} ({len(own)} statewise)")
    print("\nfiles:")
    for name in sorted(walk.files):
        print(f"  {name}")
    print("\nstack at the first INSERT (statewise frames):")
    for frame in own:
        print(f"  {frame[len(SRC) + 1 :]}")


if __name__ == "__main__":
    main()
