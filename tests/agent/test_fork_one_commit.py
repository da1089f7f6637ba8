"""A fork writes the new session (its state, its `forked` event and every run it copies)
in one transaction, however many runs the source has: counted as the write transactions
the SQLite writer connection starts (it was one per copied run), and what lands is what a fork
promises on every backend."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statewise import Agent, Sessions
from statewise.db import InMemoryDb, SqliteDb
from statewise.exceptions import SessionExistsError
from tests.agent.test_state_engine import shopping

RUNS = 12


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    from cryptography.fernet import Fernet

    monkeypatch.setenv("STATEWISE_ENCRYPTION_KEY", Fernet.generate_key().decode())


def _filled(db: Any) -> Agent:
    agent = shopping(db, session_state={"items": []}, secret_keys=["token"])
    for n in range(RUNS):
        agent.run(f"i{n}", session_id="src", user_id="ann")
    agent.state.for_session("src").set("token", "hush")
    return agent


def test_a_fork_of_many_runs_is_one_sqlite_transaction(tmp_path: Path) -> None:
    db = SqliteDb(db_file=tmp_path / "f.db")
    agent = _filled(db)
    writer = db._writing_conn()
    writes: list[str] = []

    def seen(sql: str) -> None:
        # A write transaction: the statement path's BEGIN IMMEDIATE, or a commit sent as
        # one statement (its own transaction). Reads take plain BEGIN ... COMMIT.
        if sql.strip().upper().startswith(("BEGIN IMMEDIATE", "INSERT INTO STATEWISE_COMMIT_IN")):
            writes.append(sql[:40])

    writer.set_trace_callback(seen)
    try:
        assert agent.fork_session("src", new_session_id="copy") == "copy"
    finally:
        writer.set_trace_callback(None)
    assert len(writes) == 1, writes  # (RUNS + 1 before)
    _check_fork(agent, db)
    with pytest.raises(SessionExistsError):
        agent.fork_session("src", new_session_id="copy")
    db.close()


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_a_fork_in_one_commit_reads_back_like_the_source(backend: str, tmp_path: Path) -> None:
    db = InMemoryDb() if backend == "memory" else SqliteDb(db_file=tmp_path / "g.db")
    agent = _filled(db)
    with Sessions(db) as sessions:
        assert sessions.fork_session("src", at=3, new_session_id="early") == "early"
        assert sessions.state("early").state == {"items": ["i0", "i1"]}
        assert [r.input for r in sessions.runs("early")] == ["i0", "i1"]
    agent.fork_session("src", new_session_id="copy")
    _check_fork(agent, db)


def _check_fork(agent: Agent, db: Any) -> None:
    source, copy = db.get_session("src"), db.get_session("copy")
    assert (copy.user_id, copy.app_name, copy.kind) == (source.user_id, source.app_name, "agent")
    assert agent.get_session_state("copy") == agent.get_session_state("src")
    assert [r.input for r in db.read_runs("copy")] == [f"i{n}" for n in range(RUNS)]
    assert [r.session_id for r in db.read_runs("copy")] == ["copy"] * RUNS
    events = db.read_events("copy")
    assert [(e.seq, e.type) for e in events] == [(1, "forked"), (2, "state_delta")]
    assert events[0].data["from_session"] == "src" and copy.last_seq == 2
    assert "hush" not in str(events[1].data) and "hush" not in str(agent.get_state_history("copy"))
    agent.run("more", session_id="copy", user_id="ann")  # the fork goes on like any session
    assert agent.get_session_state("copy")["items"][-1] == "more"
    assert agent.get_session_state("src")["items"][-1] == f"i{RUNS - 1}"
