"""Fleets on real PostgreSQL with real `statewise worker` processes.

Sizes: 30 five-step runs on 3 workers with one SIGKILLed mid-step (restart and take-over
variants); a queue of concurrency 2 across 3 workers; enqueue and result() in different
processes; a failing step; a one-tool agent run. Each test bounds its waits.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from typing import Any

import pytest

from statewise.exceptions import RunError
from tests.fleet.conftest import APP, FleetLab

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

RUNS = 30
RESULT_TIMEOUT = 120.0


def _reference_state(five: Any, input: str) -> dict[str, Any]:
    """The state an uninterrupted in-process run of `five` leaves in a new session."""
    five.run(input, session_id=f"reference-{input}")
    state: dict[str, Any] = five.get_session_state(f"reference-{input}")
    return state


def _step_commits(five: Any, session_id: str) -> Counter[tuple[str | None, int]]:
    return Counter(
        (e.run_id, int(e.data["index"]))
        for e in five.db.read_events(session_id, types=["step_completed"])
    )


@pytest.mark.timeout(240)
@pytest.mark.parametrize("recovery", ["restart", "takeover"])
def test_thirty_runs_survive_a_worker_killed_mid_step(
    lab: FleetLab, fleet: Any, app: Any, recovery: str
) -> None:
    lab.sleep = 0.15
    fleet.queue("statewise", polling_interval=0.1)
    # Each worker holds at most 4 runs, so the first worker to poll cannot take all 30
    # and leave w1 idle.
    pids = lab.start_workers(["w1", "w2", "w3"], "--concurrency", "4")
    five, _, _, _ = app
    handles = [fleet.enqueue(five, f"job{i}", session_id=f"s{i}") for i in range(RUNS)]

    # SIGKILL w1 while it is inside steps (a step started and not ended).
    victim = pids["w1"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        lines = [line for line in lab.side_lines() if line.pid == victim]
        started = {(x.run_id, x.step) for x in lines if x.what == "start"}
        ended = {(x.run_id, x.step) for x in lines if x.what == "end"}
        if len(started) >= 6 and started - ended:
            break
        time.sleep(0.02)
    lab.kill("w1")
    lines = [line for line in lab.side_lines() if line.pid == victim]
    cut_off = {(x.run_id, x.step) for x in lines if x.what == "start"} - {
        (x.run_id, x.step) for x in lines if x.what == "end"
    }
    assert cut_off, "w1 was not inside a step when it was killed"

    if recovery == "restart":
        lab.start_worker("w1", log="w1-restarted")
    else:
        lab.start_worker("w4", "--recover", "w1")

    outputs = [h.result(timeout=RESULT_TIMEOUT) for h in handles]
    assert outputs == [f"job{i} after step 4" for i in range(RUNS)]
    infos = [h.status() for h in handles]
    assert {i.status for i in infos} == {"completed"}
    # Taken over, the runs w1 was inside of finished on another worker. (Restarted, DBOS
    # puts w1's runs back on the queue too, so any worker may have finished them.)
    if recovery == "takeover":
        recovered = {run_id for run_id, _ in cut_off}
        assert all(i.executor != "w1" for i in infos if i.run_id in recovered)

    # The steps w1 was inside of ran again (at least once execution) ...
    side = lab.side_lines()
    starts = Counter((x.run_id, x.step) for x in side if x.what == "start")
    assert all(starts[key] >= 2 for key in cut_off)
    # ... and yet every step's state effect landed exactly once: one commit per step of
    # each run, each log entry once, and each session equals an uninterrupted run's.
    reference = _reference_state(five, "job0")
    assert reference == {"log": [f"job0:{k}" for k in range(5)], "count": 5}
    for i, handle in enumerate(handles):
        assert five.get_session_state(f"s{i}") == {
            "log": [f"job{i}:{k}" for k in range(5)],
            "count": 5,
        }
        assert _step_commits(five, f"s{i}") == Counter({(handle.run_id, k): 1 for k in range(5)})


@pytest.mark.timeout(180)
def test_a_queue_of_concurrency_two_never_has_more_than_two_in_flight(
    lab: FleetLab, fleet: Any, app: Any
) -> None:
    lab.sleep = 0.4
    fleet.queue("pair", concurrency=2, polling_interval=0.05)
    lab.start_workers(["w1", "w2", "w3"], "--queue", "pair")
    _, timed, _, _ = app
    handles = [
        timed.enqueue("tick", session_id=f"t{i}", queue="pair", fleet=fleet) for i in range(9)
    ]
    for handle in handles:
        assert handle.result(timeout=RESULT_TIMEOUT) == "done"

    edges = sorted(
        (x.at, 1 if x.what == "start" else -1) for x in lab.side_lines() if x.step == "only"
    )
    assert len(edges) == 18
    assert _peak(edges) == 2
    assert len({h.status().executor for h in handles}) >= 2


def _peak(edges: list[tuple[float, int]]) -> int:
    in_flight = peak = 0
    for _, delta in sorted(edges):  # at one instant, an end (-1) before a start (+1)
        in_flight += delta
        peak = max(peak, in_flight)
    return peak


@pytest.mark.timeout(120)
def test_concurrency_is_a_limit_on_each_worker_stored_with_the_queue(
    lab: FleetLab, fleet: Any, app: Any
) -> None:
    """`--concurrency 1` on two workers: each runs one run at a time, both work at once.
    DBOS keeps the value in the queue's row (every worker re-reads it at each poll), so
    it is one per-worker limit for the whole queue, not a limit per process."""
    from dbos import DBOSClient, DBOSPortableJSONSerializer

    lab.sleep = 0.6  # long enough that both workers are busy at once
    fleet.queue("solo", polling_interval=0.05)
    pids = lab.start_workers(["w1", "w2"], "--queue", "solo", "--concurrency", "1")
    _, timed, _, _ = app
    handles = [
        timed.enqueue("tick", session_id=f"c{i}", queue="solo", fleet=fleet) for i in range(6)
    ]
    for handle in handles:
        assert handle.result(timeout=RESULT_TIMEOUT) == "done"
    lines = [x for x in lab.side_lines() if x.step == "only"]
    assert len(lines) == 12
    for pid in pids.values():
        mine = [(x.at, 1 if x.what == "start" else -1) for x in lines if x.pid == pid]
        assert mine, "each worker ran some of the runs"
        assert _peak(mine) == 1
    assert _peak([(x.at, 1 if x.what == "start" else -1) for x in lines]) == 2
    client = DBOSClient(
        system_database_url=lab.url,
        dbos_system_schema="dbos",
        serializer=DBOSPortableJSONSerializer(),
    )
    try:
        queue = client.retrieve_queue("solo")
        assert queue is not None and queue.worker_concurrency == 1
    finally:
        client.destroy()


@pytest.mark.timeout(180)
def test_enqueue_in_one_process_result_in_another_and_a_failing_step(
    lab: FleetLab, fleet: Any, app: Any
) -> None:
    lab.sleep = 0.05
    fleet.queue("statewise", polling_interval=0.1)
    lab.start_workers(["w1", "w2"], "--concurrency", "4")
    five, _, _, _ = app
    # The failing run is enqueued by another process (the CLI); the others here.
    done = lab.cli("enqueue", f"{APP}:five", "boom", "--session", "bad", "--db", lab.url, "--json")
    assert done.returncode == 0, done.stderr
    run_ids = {"bad": json.loads(done.stdout)["run_id"]}
    for session, text in (("ok1", "alpha"), ("ok2", "beta")):
        run_ids[session] = fleet.enqueue(five, text, session_id=session).run_id

    assert fleet.run(run_ids["ok1"]).result(timeout=RESULT_TIMEOUT) == "alpha after step 4"
    assert fleet.run(run_ids["ok2"]).result(timeout=RESULT_TIMEOUT) == "beta after step 4"
    with pytest.raises(RunError, match="step 2 exploded"):
        fleet.run(run_ids["bad"]).result(timeout=RESULT_TIMEOUT)
    failed = fleet.info(run_ids["bad"])
    assert failed.status == "failed"
    assert failed.error == "RuntimeError: step 2 exploded"

    assert five.get_session_state("bad") == {"log": ["boom:0", "boom:1"], "count": 2}
    assert five.get_session_state("ok2")["count"] == 5

    shown = lab.cli("runs", "show", run_ids["bad"], "--db", lab.url, "--json")
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert data["status"] == "failed" and data["executor"] in ("w1", "w2")
    assert data["error"] == "RuntimeError: step 2 exploded"

    listed = lab.cli("runs", "list", "--db", lab.url, "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {row["run_id"]: row for row in json.loads(listed.stdout)}
    assert {rows[r]["status"] for r in run_ids.values()} == {"completed", "failed"}
    assert all(rows[r]["executor"] in ("w1", "w2") for r in run_ids.values())
    table = lab.cli("runs", "list", "--db", lab.url)
    assert table.returncode == 0, table.stderr
    assert "failed" in table.stdout and "completed" in table.stdout
    assert "step 2 exploded" in lab.log_of("w1") + lab.log_of("w2")
    per_run = re.findall(
        r"(?:INFO|WARNING) run (\S+) five (?:completed in|failed after) ",
        lab.log_of("w1") + lab.log_of("w2"),
    )
    assert sorted(per_run) == sorted(run_ids.values())


@pytest.mark.timeout(120)
def test_an_agent_run_on_the_queue(lab: FleetLab, fleet: Any, app: Any) -> None:
    fleet.queue("statewise", polling_interval=0.1)
    lab.start_worker("w1")
    from statewise import fleet as fleet_module

    _, _, helper, _ = app
    configured = fleet_module.configure(lab.url)
    try:
        handle = helper.enqueue("add milk", session_id="agent1", user_id="ann")
        assert handle.status().status in ("queued", "running", "completed")
        content = handle.result(timeout=RESULT_TIMEOUT)
    finally:
        configured.close()
    assert "added" in content
    assert len(helper.get_session_state("agent1")["items"]) == 1
    runs = helper.db.read_runs("agent1")
    assert [r.run_id for r in runs] == [handle.run_id]
    assert runs[0].status == "completed"
