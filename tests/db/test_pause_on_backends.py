"""A paused run is stored and continued exactly once on every backend: the claim is a
compare-and-swap on the session's version, so it holds on SQLite, PostgreSQL and Redis."""

from __future__ import annotations

import threading

from statewise.db.testing import Harness
from statewise.exceptions import RunNotPausedError
from tests.run.test_pause import bank


def test_pause_and_racing_continues_on_every_backend(harness: Harness) -> None:
    agent = bank(harness.db)
    for round_ in range(3):
        sid = f"pay{round_}"
        out = agent.run("pay bob", session_id=sid, user_id="u")
        assert out.status == "paused"
        other = bank(harness.reopen())
        assert [r.run.run_id for r in other.get_paused_runs(sid)] == [out.run_id]
        outcomes: list[str] = []
        barrier = threading.Barrier(2)
        args = (out.run_id, sid, barrier, outcomes)
        threads = [threading.Thread(target=_racer, args=(a, *args)) for a in (agent, other)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert sorted(outcomes) == ["completed", "not paused"], outcomes
        state = other.get_session_state(sid)
        assert state["transfers"] == [{"amount": 5, "to": "bob"}]
        assert other.get_paused_runs(sid) == []
        history = other.get_state_history(sid)
        assert history, "the session's history still reads"


def _racer(
    agent: object, run_id: str, sid: str, barrier: threading.Barrier, outcomes: list[str]
) -> None:
    from statewise import Agent

    assert isinstance(agent, Agent)
    barrier.wait()
    try:
        outcomes.append(agent.continue_run(run_id, session_id=sid, approvals={"t1": True}).status)
    except RunNotPausedError:
        outcomes.append("not paused")
