"""Workflow runs have an owner: resuming claims the run's lease (a compare-and-swap on
the run record), so of two processes resuming one run, one runs the remaining steps and
the other gets a clear error; a killed run resumes once its lease expired."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from statewise import StepInput, Workflow
from statewise.db import SqliteDb
from statewise.exceptions import RunError


class Steps:
    """Four function steps; step 2 fails while `broken`; every execution is counted."""

    def __init__(self) -> None:
        self.broken = True
        self.executed: list[tuple[str, int]] = []
        self.lock = threading.Lock()

    def step(self, n: int) -> Any:
        def fn(step_input: StepInput, session_state: dict[str, Any]) -> str:
            with self.lock:
                self.executed.append((session_state["round"], n))
            if n == 2 and self.broken:
                raise RuntimeError("step 2 is down")
            time.sleep(0.05)  # a step takes a moment: the other resumer arrives meanwhile
            session_state["trail"].append(n)
            return f"s{n}"

        fn.__name__ = f"step_{n}"
        return fn

    def workflow(self, db_file: Path, lease: float = 30.0) -> Workflow:
        return Workflow(
            name="leased",
            db=SqliteDb(db_file=str(db_file)),
            steps=[self.step(n) for n in (1, 2, 3, 4)],
            session_state={"trail": []},
            run_lease_seconds=lease,
        )


def test_two_racing_resumers_never_run_a_step_twice(tmp_path: Path) -> None:
    steps = Steps()
    first, second = steps.workflow(tmp_path / "w.db"), steps.workflow(tmp_path / "w.db")
    twice, both_ran, unclear, applied_twice = 0, 0, 0, 0
    for r in range(15):
        sid = f"round-{r}"
        steps.broken = True
        with pytest.raises(RuntimeError, match="step 2 is down"):
            first.run("go", session_id=sid, session_state={"round": sid})
        run_id = first.db.read_runs(sid)[-1].run_id
        steps.broken = False
        barrier = threading.Barrier(2)
        results: list[Any] = [None, None]

        def resume(
            i: int,
            wf: Workflow,
            run_id: str = run_id,
            sid: str = sid,
            barrier: threading.Barrier = barrier,
            results: list[Any] = results,
        ) -> None:
            barrier.wait()
            try:
                results[i] = wf.resume(run_id, session_id=sid)
            except Exception as exc:
                results[i] = exc

        threads = [
            threading.Thread(target=resume, args=(i, wf)) for i, wf in enumerate((first, second))
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        counts = [sum(1 for s, n in steps.executed if s == sid and n == k) for k in (3, 4)]
        twice += any(c > 1 for c in counts)
        errors = [x for x in results if isinstance(x, Exception)]
        both_ran += not errors
        unclear += any(not isinstance(e, RunError) for e in errors)
        applied_twice += first.get_session_state(sid)["trail"] != [1, 2, 3, 4]
    first.db.close()
    second.db.close()
    assert (twice, applied_twice, both_ran, unclear) == (0, 0, 0, 0), (
        f"of 15 double resumes, {twice} ran a step twice, {applied_twice} applied steps "
        f"twice to the state, {both_ran} both 'succeeded', {unclear} failed unclearly"
    )


def test_a_run_held_by_a_live_process_is_refused_then_resumes_after_its_lease(
    tmp_path: Path,
) -> None:
    steps = Steps()
    wf = steps.workflow(tmp_path / "w.db", lease=0.5)
    steps.broken = True
    with pytest.raises(RuntimeError):
        wf.run("go", session_id="s", session_state={"round": "s"})
    run_id = wf.db.read_runs("s")[-1].run_id
    # A process that took the lease and died without releasing it:
    assert wf.db.claim_run("s", run_id, "dead-process", 0.5)
    steps.broken = False
    with pytest.raises(RunError, match="another process"):
        wf.resume(run_id, session_id="s")
    time.sleep(0.6)
    out = wf.resume(run_id, session_id="s")
    assert out.content == "s4"
    wf.db.close()
