"""Real processes (spawned) writing through StateStore: no lost update, no blocking."""

from __future__ import annotations

import pytest

from statewise.db.testing.store_cases import append_items, stored_state
from tests.db._mp_worker import append_worker, open_backend, run_workers

pytestmark = pytest.mark.slow
PROCESSES, COMMITS = 4, 100


def _run(spec: tuple[str, ...], sessions: list[str]) -> list[float]:
    return run_workers(
        append_worker, [(spec, sessions[n], f"p{n}", COMMITS) for n in range(PROCESSES)]
    )


def test_four_processes_appending_to_one_session_keep_all_400_items(
    mp_spec: tuple[str, ...],
) -> None:
    db = open_backend(mp_spec)
    try:
        append_items(db, "shared", ["seed"])
        _run(mp_spec, ["shared"] * PROCESSES)
        items = stored_state(db, "shared")["items"]
        assert len(items) == PROCESSES * COMMITS + 1
        expected = {"seed"} | {f"p{n}-{i}" for n in range(PROCESSES) for i in range(COMMITS)}
        assert set(items) == expected
        for n in range(PROCESSES):
            assert [x for x in items if x.startswith(f"p{n}-")] == [
                f"p{n}-{i}" for i in range(COMMITS)
            ]
    finally:
        db.close()


def test_four_processes_on_distinct_sessions_all_finish(mp_spec: tuple[str, ...]) -> None:
    sessions = [f"own-{n}" for n in range(PROCESSES)]
    durations = _run(mp_spec, sessions)
    db = open_backend(mp_spec)
    try:
        for n, sid in enumerate(sessions):
            assert stored_state(db, sid)["items"] == [f"p{n}-{i}" for i in range(COMMITS)]
    finally:
        db.close()
    assert max(durations) < 60, durations
