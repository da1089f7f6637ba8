"""`Workflow.advance`, the unit a durable engine drives: a step whose commit landed is
never applied again, however often the engine re-executes it (no DBOS needed)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from statewise import Step, Workflow
from statewise.db import SqliteDb
from statewise.exceptions import ConfigurationError
from statewise.run.context import RunContext
from statewise.workflow import StepInput


def _flow(db: SqliteDb, calls: list[int]) -> Workflow:
    def make(index: int) -> Callable[..., str]:
        def step(step_input: StepInput, run_context: RunContext) -> str:
            calls.append(index)
            run_context.session_state.setdefault("log", []).append(index)
            return f"{step_input.input}:{index}"

        return step

    return Workflow(
        name="three", steps=[Step(name=f"s{i}", executor=make(i)) for i in range(3)], db=db
    )


def test_re_executed_steps_apply_their_state_once(tmp_path: Path) -> None:
    db = SqliteDb(db_file=str(tmp_path / "a.db"))
    calls: list[int] = []
    flow = _flow(db, calls)
    try:
        for _ in range(2):  # every unit twice, as after a crash between commit and record
            assert flow.advance("r1", session_id="s", input="go", until=0) is None
        assert db.get_run("s", "r1") is not None
        for until in (1, 1, 2, 2, 3, 3):
            assert flow.advance("r1", session_id="s", input="go", until=until) is None
        assert calls == [0, 1, 2]
        assert flow.get_session_state("s") == {"log": [0, 1, 2]}
        record = db.get_run("s", "r1")
        assert record is not None and record.status == "running"

        output = flow.advance("r1", session_id="s", input="go")
        assert output is not None and output.content == "go:2"
        assert flow.advance("r1", session_id="s", input="go") is None  # already completed
        record = db.get_run("s", "r1")
        assert record is not None and record.status == "completed" and record.content == "go:2"

        events = db.read_events("s")
        steps = Counter(e.data["index"] for e in events if e.type == "step_completed")
        assert steps == Counter({0: 1, 1: 1, 2: 1})
        assert [e.type for e in events].count("run_started") == 1
        assert [e.type for e in events].count("run_resumed") == 0
        assert [e.type for e in events].count("run_completed") == 1
    finally:
        db.close()


def test_advance_skips_to_the_step_asked_for_and_needs_input_to_start(tmp_path: Path) -> None:
    db = SqliteDb(db_file=str(tmp_path / "b.db"))
    calls: list[int] = []
    flow = _flow(db, calls)
    try:
        with pytest.raises(ConfigurationError, match="input"):
            flow.advance("r2", session_id="s")
        assert db.get_run("s", "r2") is None
        flow.advance("r2", session_id="s", input="x", until=2)  # start + steps 0 and 1
        assert calls == [0, 1]
        flow.advance("r2", session_id="s")  # the rest; the input is the stored one
        assert calls == [0, 1, 2]
        assert flow.get_session_state("s") == {"log": [0, 1, 2]}
    finally:
        db.close()


def test_a_failed_step_fails_the_run(tmp_path: Path) -> None:
    db = SqliteDb(db_file=str(tmp_path / "c.db"))

    def bad(step_input: StepInput) -> str:
        raise RuntimeError("nope")

    flow = Workflow(name="bad", steps=[Step(name="bad", executor=bad)], db=db)
    try:
        flow.advance("r3", session_id="s", input="x", until=0)
        with pytest.raises(RuntimeError, match="nope"):
            flow.advance("r3", session_id="s", until=1)
        record = db.get_run("s", "r3")
        assert record is not None and record.status == "failed"
        assert record.error == "RuntimeError: nope"
    finally:
        db.close()


def test_two_executions_of_one_step_at_once_apply_it_once(tmp_path: Path) -> None:
    """What a take-over of an executor that was not really dead looks like: two processes
    run the same step at the same time. The step's commit carries the id run + step, so
    the second commit is recognised and applies nothing."""
    db = SqliteDb(db_file=str(tmp_path / "d.db"))
    barrier = threading.Barrier(2, timeout=10)
    calls: list[int] = []

    def step(run_context: RunContext) -> str:
        calls.append(0)
        barrier.wait()  # both executions are inside the step before either commits
        run_context.session_state.setdefault("log", []).append("once")
        return "ok"

    flow = Workflow(name="one", steps=[Step(name="only", executor=step)], db=db)
    try:
        flow.advance("r4", session_id="s", input="x", until=0)
        errors: list[BaseException] = []

        def execute() -> None:
            try:
                flow.advance("r4", session_id="s", until=1)
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=execute) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert errors == []
        assert calls == [0, 0]
        assert flow.get_session_state("s") == {"log": ["once"]}
        completed = [e for e in db.read_events("s") if e.type == "step_completed"]
        assert len(completed) == 1
    finally:
        db.close()
