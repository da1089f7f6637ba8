"""An agent run's commit points are DBOS steps: a worker SIGKILLed inside the run's second
tool call, then recovered (restarted, or taken over by another worker), goes on after the
last completed commit point. The model is not asked again for completed steps, completed
tool calls do not run again, and every tool's state effect lands exactly once."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.fleet.conftest import FleetLab

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

WAIT = 60.0


@pytest.mark.timeout(180)
@pytest.mark.parametrize("recovery", ["restart", "takeover"])
def test_a_killed_agent_run_continues_after_its_last_commit_point(
    lab: FleetLab, fleet: Any, app: Any, recovery: str
) -> None:
    from dbos import DBOSClient, DBOSPortableJSONSerializer

    _, _, _, marker = app
    hold = Path(str(lab.side) + ".hold")
    hold.touch()
    fleet.queue("statewise", polling_interval=0.1)
    victim = lab.start_worker("w1")
    handle = fleet.enqueue(marker, "go", session_id="m1", user_id="ann")
    run_id = handle.run_id

    def ours(step: str, what: str) -> list[Any]:
        return [
            x for x in lab.side_lines() if x.run_id == run_id and (x.step, x.what) == (step, what)
        ]

    deadline = time.monotonic() + WAIT
    while not ours("mark-b", "start"):
        assert time.monotonic() < deadline, "the run never reached mark('b')"
        time.sleep(0.05)
    lab.kill("w1")
    # Killed inside mark("b"): only mark("a")'s step was committed.
    assert [x.pid for x in ours("mark-b", "start")] == [victim]
    assert marker.get_session_state("m1") == {"marks": ["a"], "mark_count": 1}

    hold.unlink()
    if recovery == "restart":
        lab.start_worker("w1", log="w1-restarted")
    else:
        lab.start_worker("w2", "--recover", "w1")
    assert handle.result(timeout=WAIT) == "marked a b c"
    assert handle.status().executor == ("w1" if recovery == "restart" else "w2")

    side = lab.side_lines()
    asked = Counter(x.step for x in side if x.run_id == run_id and x.what == "model")
    started = Counter(x.step for x in side if x.run_id == run_id and x.what == "start")
    ended = Counter(x.step for x in side if x.run_id == run_id and x.what == "end")
    # The first model request and mark("a") were completed: not again. The step cut off
    # (the model's second answer and mark("b")) ran again; the rest ran once.
    assert asked == Counter({"ask0": 1, "ask1": 2, "ask2": 1, "ask3": 1})
    assert started == Counter({"mark-a": 1, "mark-b": 2, "mark-c": 1})
    assert ended == Counter({"mark-a": 1, "mark-b": 1, "mark-c": 1})

    # Each tool's state effect exactly once, in the order of the run.
    assert marker.get_session_state("m1") == {"marks": ["a", "b", "c"], "mark_count": 3}
    calls = marker.db.read_events("m1", types=["tool_call"])
    assert Counter(e.data["arguments"]["tag"] for e in calls) == Counter("abc")
    assert {e.run_id for e in calls} == {run_id}
    runs = marker.db.read_runs("m1")
    assert [(r.run_id, r.status) for r in runs] == [(run_id, "completed")]
    assert [m["content"] for m in runs[0].messages if m["role"] == "tool"] == [
        "marked a",
        "marked b",
        "marked c",
    ]

    # DBOS recorded one step per commit point: the start, and each model step.
    client = DBOSClient(
        system_database_url=lab.url,
        dbos_system_schema="dbos",
        serializer=DBOSPortableJSONSerializer(),
    )
    try:
        steps = [s["function_name"] for s in client.list_workflow_steps(run_id, load_output=False)]
    finally:
        client.destroy()
    assert steps == [f"commit point {n}" for n in range(5)]
