"""Durable runs: a workflow process SIGKILLed in the middle of step 3 of 5 resumes after
its last completed step, runs steps 3-5 exactly once, and ends in the state an
uninterrupted run reaches."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from statewise.db import SqliteDb
from tests._env import subprocess_env

SCRIPT = Path(__file__).with_name("_durable_script.py")


def run_script(db: Path, side: Path, mode: str) -> dict[str, Any]:
    completed = subprocess.run(
        [sys.executable, str(SCRIPT), str(db), str(side), "s", mode],
        capture_output=True,
        text=True,
        timeout=120,
        env=subprocess_env(),
    )
    assert completed.returncode == 0, completed.stderr
    result: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
    return result


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.slow
def test_sigkill_in_step_3_then_resume_runs_steps_3_to_5_once(tmp_path: Path) -> None:
    reference = run_script(tmp_path / "ref.db", tmp_path / "ref.log", "run")
    assert lines(tmp_path / "ref.log") == [
        f"{w} {n}" for n in range(1, 6) for w in ("start", "done")
    ]

    db_file, side = tmp_path / "crash.db", tmp_path / "crash.log"
    process = subprocess.Popen(
        [sys.executable, str(SCRIPT), str(db_file), str(side), "s", "run"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=subprocess_env(CRASH_IN_STEP_3="1"),
    )
    deadline = time.monotonic() + 60
    while "crash-point" not in lines(side):
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        assert time.monotonic() < deadline, "the workflow never reached step 3"
        time.sleep(0.02)
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    if process.stderr:
        process.stderr.close()
    assert process.returncode == -signal.SIGKILL

    db = SqliteDb(db_file=str(db_file))
    try:
        [killed] = db.read_runs("s")
        assert killed.status == "running"
        # Steps 1 and 2 are committed; nothing of step 3 (its tool had already written).
        completed = [e.data["name"] for e in db.read_events("s", types=["step_completed"])]
        assert completed == ["step_1", "step_2"]
    finally:
        db.close()
    before_resume = len(lines(side))

    resumed = run_script(db_file, side, "resume")
    assert lines(side)[before_resume:] == [
        "start 3",
        "done 3",
        "start 4",
        "done 4",
        "start 5",
        "done 5",
    ]
    counts = {n: lines(side).count(f"done {n}") for n in range(1, 6)}
    assert counts == {1: 1, 2: 1, 3: 1, 4: 1, 5: 1}
    assert resumed["run_id"] == killed.run_id
    assert resumed["state"] == reference["state"]
    assert resumed["content"] == reference["content"] == "s5"
    assert reference["state"] == {
        "trail": [1, 2, "agent-3", 4, 5],
        "total": 15,
        "last": "s4->5",
    }
    db = SqliteDb(db_file=str(db_file))
    try:
        [run] = db.read_runs("s")
        assert run.status == "completed"
        names = [e.data["name"] for e in db.read_events("s", types=["step_completed"])]
        assert names == ["step_1", "step_2", "step_3", "step_4", "step_5"]
    finally:
        db.close()
