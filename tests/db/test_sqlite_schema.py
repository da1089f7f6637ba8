"""SQLite schema migrations: a database written by an older statewise keeps working.

`data/schema_v1.db` was written by statewise with schema version 1 (every table as it was
then: snapshots, deltas and events WITHOUT ROWID): an agent with one tool ran 13 times on
session s1 (user u1, app "fixture"), once on s2, wrote a 33 KB value (stored with a
snapshot) and set `app:flag`. `data/schema_v1.json` holds what it read back then.

`data/schema_v4.db` was written by statewise with schema version 4 (sessions indexed on
`updated_at`): agents of apps "a" and "b" ran on sessions s1-s5 of users u1, u2 and none,
a few milliseconds apart, s1 again last but one. `data/schema_v4.json` holds what that
code read back: the session listings (all, per user, per app, paged), runs, event counts
and states.

`data/schema_v6.db` was written by statewise with schema version 6 (commit ids in a
`commits` table of their own): an agent ran 7 times on s1 and once on s2 (user u1), and session s3 took commits "c-1" and
"c-2" (each with a `note` event) and "c-3" (none) through a session transaction.
`data/schema_v6.json` holds what that code read back: sessions, events, runs, states, the
history of s1 and each commit's result.

`data/schema_v9.db` was written by statewise with schema version 9 (most commit ids in
their last event's row, events indexed by (session_id, seq)): an agent ran 7 times on s1
and once on s2 (user u1), and session s3 took commits "c-1", "c-2" (each with a `note`
event), "c-3" (none) and "c-0" (an id not greater than the ones before) through a session
transaction. `data/schema_v9.json` holds what that code read back, each commit's result,
and the ids stored per session.

`data/schema_v10.db` was written by statewise with schema version 10 (every commit stamps
the session row): an agent ran 7 times on s1 and once on s2 (user u1), session s3 took
commits "c-1", "c-2" (each with a `note` event) and "c-3" (none) through a session
transaction, and the agent ran once more on s1. `data/schema_v10.json` holds what that
code read back, each commit's result, and the ids stored per session.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from statewise import Agent
from statewise.db import SqliteDb
from statewise.db.records import NewEvent
from statewise.db.sqlite import _schema as sqlite_module
from statewise.db.store import SessionSpec, StateStore
from statewise.exceptions import SchemaVersionError
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo, ToolCall

DATA = Path(__file__).parent / "data"
LATEST = len(sqlite_module._migrations(""))
LARGE_PAYLOAD_TABLES = ("snapshots", "deltas", "events")


def add(session_state: dict[str, Any], item: str) -> str:
    """Append one item."""
    session_state["items"].append(item)
    session_state["user:count"] = session_state.get("user:count", 0) + 1
    return "ok"


def model(messages: list[Message], info: RequestInfo) -> ModelResponse:
    if messages[-1].role == "tool":
        return ModelResponse(content="ok")
    return ModelResponse(tool_calls=[ToolCall("add", {"item": "new"}, "c")])


def table_sql(db_file: Path) -> dict[str, str]:
    with sqlite3.connect(db_file) as conn:
        rows = conn.execute("SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL").fetchall()
    return {name: sql for name, sql in rows}


@pytest.fixture
def old_db(tmp_path: Path) -> Path:
    target = tmp_path / "old.db"
    shutil.copy(DATA / "schema_v1.db", target)
    return target


def test_the_fixture_is_a_schema_1_database(old_db: Path) -> None:
    with sqlite3.connect(old_db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
    assert all("WITHOUT ROWID" in table_sql(old_db)[f"statewise_{t}"] for t in LARGE_PAYLOAD_TABLES)


def test_a_schema_1_database_migrates_and_keeps_everything(old_db: Path) -> None:
    expected = json.loads((DATA / "schema_v1.json").read_text())
    db = SqliteDb(db_file=old_db)
    try:
        sql = table_sql(old_db)
        for table in LARGE_PAYLOAD_TABLES:
            assert "WITHOUT ROWID" not in sql[f"statewise_{table}"], table
        assert "(session_key, seq)" in sql["statewise_events_by_key"]
        agent = Agent(model=FunctionModel(model), tools=[add], db=db, user_id="u1")
        assert agent.get_session_state("s1") == expected["s1"]
        assert agent.get_session_state("s2") == expected["s2"]
        assert len(db.read_events("s1")) == expected["s1_events"]
        assert len(db.read_runs("s1")) == expected["s1_runs"]
        history = agent.get_state_history("s1")
        assert [h["version"] for h in history] == list(range(1, len(history) + 1))
        # Replaying from the start (no snapshot) agrees with the snapshot + tail.
        assert agent.get_state_at("s1", at=history[-1]["version"]) == {
            k: v for k, v in expected["s1"].items() if ":" not in k
        }
        agent.run("go", session_id="s1")
        after = agent.get_session_state("s1")
        assert after["items"] == [*expected["s1"]["items"], "new"]
        assert after["user:count"] == expected["s1"]["user:count"] + 1
        assert len(db.read_events("s1")) > expected["s1_events"]
    finally:
        db.close()
    # Opening it again does not migrate twice, and the keys stay unique.
    with SqliteDb(db_file=old_db) as again:
        assert len(again.read_runs("s1")) == expected["s1_runs"] + 1
    with sqlite3.connect(old_db) as conn, pytest.raises(sqlite3.IntegrityError):
        conn.execute(
            "INSERT INTO statewise_events (session_key, session_id, seq, run_id, type, data, "
            "created_at) SELECT session_key, session_id, seq, run_id, type, data, created_at "
            "FROM statewise_events LIMIT 1"
        )


def test_a_new_database_keeps_large_payloads_in_rowid_tables(tmp_path: Path) -> None:
    with SqliteDb(db_file=tmp_path / "new.db", table_prefix="t_"):
        pass
    sql = table_sql(tmp_path / "new.db")
    for table in LARGE_PAYLOAD_TABLES:
        assert "WITHOUT ROWID" not in sql[f"t_{table}"]
    assert "UNIQUE INDEX" in sql["t_snapshots_by_key"]
    # Events are found by their session's integer key; deltas are keyed by their rowid
    # (their scope's key and their version): no second b-tree.
    assert (
        "UNIQUE INDEX" in sql["t_events_by_key"] and "(session_key, seq)" in sql["t_events_by_key"]
    )
    assert "delta_key INTEGER PRIMARY KEY" in sql["t_deltas"]
    assert not [name for name in sql if name.startswith("t_deltas_")]


def session_indexes(db_file: Path, prefix: str = "statewise_") -> dict[str, list[str]]:
    with sqlite3.connect(db_file) as conn:
        names = [
            row[1] for row in conn.execute(f"PRAGMA index_list('{prefix}sessions')").fetchall()
        ]
        return {
            name: [row[2] for row in conn.execute(f"PRAGMA index_info('{name}')").fetchall()]
            for name in names
        }


def fixture_at(tmp_path: Path, version: int) -> tuple[Path, dict[str, Any]]:
    """A copy of the database written by schema `version`'s code, and what it read back."""
    target = tmp_path / f"v{version}.db"
    shutil.copy(DATA / f"schema_v{version}.db", target)
    with sqlite3.connect(target) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == version
    return target, json.loads((DATA / f"schema_v{version}.json").read_text())


def test_a_schema_4_database_migrates_and_reads_the_same(tmp_path: Path) -> None:
    target, expected = fixture_at(tmp_path, 4)
    assert ["updated_at"] in session_indexes(target).values()

    db = SqliteDb(db_file=target)
    try:
        assert all("updated_at" not in columns for columns in session_indexes(target).values())
        assert [s.to_dict() for s in db.list_sessions()] == expected["all"]
        assert [s.session_id for s in db.list_sessions(user_id="u1")] == expected["u1"]
        page = db.list_sessions(user_id="u2", limit=1, offset=1)
        assert [s.session_id for s in page] == expected["u2_page"]
        assert [s.session_id for s in db.list_sessions(app_name="a")] == expected["app_a"]
        u1_b = db.list_sessions(user_id="u1", app_name="b")
        assert [s.session_id for s in u1_b] == expected["u1_b"]
        pages = [
            s.session_id for off in range(0, 5, 2) for s in db.list_sessions(limit=2, offset=off)
        ]
        assert pages == expected["pages"]
        for session in db.list_sessions():
            sid = session.session_id
            assert len(db.read_events(sid)) == expected["events"][sid]
            assert [r.to_dict() for r in db.read_runs(sid)] == expected["runs"][sid]
            agent = Agent(
                model=FunctionModel(model),
                tools=[add],
                db=db,
                user_id=session.user_id,
                app_name=session.app_name,
            )
            assert agent.get_session_state(sid) == expected["states"][sid]
        # A run stamps its session: it comes first again, overall and for its user.
        agent = Agent(model=FunctionModel(model), tools=[add], db=db, user_id="u1", app_name="b")
        agent.run("go", session_id="s3")
        assert db.list_sessions(limit=1)[0].session_id == "s3"
        assert [s.session_id for s in db.list_sessions(user_id="u1")] == ["s3", "s1"]
        assert db.prune_sessions(older_than=0, user_id="u2") == 2
        assert sorted(s.session_id for s in db.list_sessions()) == ["s1", "s3", "s4"]
    finally:
        db.close()
    with SqliteDb(db_file=target) as again:  # opening it again migrates nothing
        assert [s.session_id for s in again.list_sessions(limit=1)] == ["s3"]


def test_a_new_database_has_no_index_that_every_commit_moves(tmp_path: Path) -> None:
    with SqliteDb(db_file=tmp_path / "new.db", table_prefix="t_"):
        pass
    indexes = session_indexes(tmp_path / "new.db", "t_")
    assert all("updated_at" not in columns for columns in indexes.values())
    assert ["user_id", "listed_at", "session_id"] in indexes.values()
    assert ["listed_at", "session_id"] in indexes.values()


def test_a_schema_4_database_whose_indexes_were_dropped_by_hand_migrates(
    tmp_path: Path,
) -> None:
    """Migration 5 drops indexes a DBA may already have dropped (or renamed away): it
    must not fail on their absence."""
    target = tmp_path / "v4.db"
    shutil.copy(DATA / "schema_v4.db", target)
    with sqlite3.connect(target) as conn:
        conn.execute("DROP INDEX statewise_sessions_by_time")
    with SqliteDb(db_file=target) as db:
        assert len(db.list_sessions()) == 5
    with sqlite3.connect(target) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == LATEST
    assert ["user_id", "listed_at", "session_id"] in session_indexes(target).values()


def test_a_schema_6_database_migrates_and_reads_the_same(tmp_path: Path) -> None:
    """Schema 7 keeps a commit's id in its last event's row and the greatest id in the
    session row; a schema-6 database upgrades, reads back what it did, and every commit
    id stored before (in the `commits` table) is still recognised, before and after new
    commits land."""
    target, expected = fixture_at(tmp_path, 6)
    db = SqliteDb(db_file=target)
    try:
        with sqlite3.connect(target) as conn:
            assert conn.execute("PRAGMA user_version").fetchone()[0] == LATEST
        assert [s.to_dict() for s in db.list_sessions()] == expected["sessions"]
        agent = Agent(model=FunctionModel(model), tools=[add], db=db, user_id="u1")
        for sid in ("s1", "s2", "s3"):
            assert [e.to_dict() for e in db.read_events(sid)] == expected["events"][sid]
            assert [r.to_dict() for r in db.read_runs(sid)] == expected["runs"][sid]
            assert agent.get_session_state(sid) == expected["states"][sid]
        assert agent.get_state_history("s1") == expected["history"]

        store = StateStore(db)
        spec = SessionSpec(session_id="s3", user_id="u1")

        def retried(commit_id: str) -> None:
            with store.begin(spec) as txn:
                txn.state["n"] = 99
                again = txn.commit(events=[NewEvent(type="note")], commit_id=commit_id)
            stored = expected["commits"][commit_id]
            assert again.already_landed
            assert again.last_seq == stored["last_seq"]
            assert {f"{k.kind}:{k.id}": v for k, v in again.versions.items()} == stored["versions"]

        for commit_id in ("c-2", "c-1", "c-3"):
            retried(commit_id)
        with store.begin(spec) as txn:
            txn.state["n"] = 2
            new = txn.commit(events=[NewEvent(type="note")], commit_id="c-4")
        assert not new.already_landed
        agent.run("go", session_id="s3")
        for commit_id in ("c-1", "c-3"):
            retried(commit_id)
        assert agent.get_session_state("s3")["n"] == 2
        events = db.read_events("s3")
        assert [e.to_dict() for e in events[: len(expected["events"]["s3"])]] == expected["events"][
            "s3"
        ]
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
    finally:
        db.close()


def test_a_schema_7_database_is_refused_by_a_statewise_that_knows_schema_6(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A statewise of schema 6 looks commit ids up in `commits` only, so it would apply
    a retried commit of schema 7 twice: it must refuse the database instead."""
    with SqliteDb(db_file=tmp_path / "new.db"):
        pass
    six = sqlite_module._migrations("statewise_")[:6]
    monkeypatch.setattr(sqlite_module, "_migrations", lambda p: six)
    with pytest.raises(SchemaVersionError, match=f"schema version {LATEST}"):
        SqliteDb(db_file=tmp_path / "new.db")


def test_a_schema_9_database_migrates_and_reads_the_same(tmp_path: Path) -> None:
    """Schema 10 keeps every commit id in `commits` and each event under a key made of its
    session's key and its sequence number; a schema-9 database (ids in event rows) upgrades,
    reads back what it did, answers every id it stored as landed, and numbers new events on
    from where each session was."""
    target, expected = fixture_at(tmp_path, 9)
    db = SqliteDb(db_file=target)
    try:
        with sqlite3.connect(target) as conn:
            assert conn.execute("PRAGMA user_version").fetchone()[0] == LATEST
            ids = {
                sid: sorted(
                    row[0]
                    for row in conn.execute(
                        "SELECT commit_id FROM statewise_commits WHERE session_id = ?", (sid,)
                    )
                )
                for sid in expected["commit_ids"]
            }
            columns = [row[1] for row in conn.execute("PRAGMA table_info(statewise_events)")]
        assert ids == {sid: sorted(found) for sid, found in expected["commit_ids"].items()}
        assert "commit_id" not in columns
        assert [s.to_dict() for s in db.list_sessions()] == expected["sessions"]
        agent = Agent(model=FunctionModel(model), tools=[add], db=db, user_id="u1")
        for sid in ("s1", "s2", "s3"):
            assert [e.to_dict() for e in db.read_events(sid)] == expected["events"][sid]
            assert [r.to_dict() for r in db.read_runs(sid)] == expected["runs"][sid]
            assert agent.get_session_state(sid) == expected["states"][sid]
        assert agent.get_state_history("s1") == expected["history"]
        s1_events = expected["events"]["s1"]
        middle = s1_events[len(s1_events) // 2]["seq"]
        assert [e.seq for e in db.read_events("s1", after=middle, limit=2)] == [
            middle + 1,
            middle + 2,
        ]

        store = StateStore(db)
        spec = SessionSpec(session_id="s3", user_id="u1")
        for commit_id, stored in expected["commits"].items():
            with store.begin(spec) as txn:
                txn.state["n"] = 99
                again = txn.commit(events=[NewEvent(type="note")], commit_id=commit_id)
            assert again.already_landed, commit_id
            assert again.last_seq == stored["last_seq"]
            assert {f"{k.kind}:{k.id}": v for k, v in again.versions.items()} == stored["versions"]
        s1 = SessionSpec(session_id="s1", user_id="u1")
        for commit_id in expected["commit_ids"]["s1"]:  # the ids runs stored in event rows
            with store.begin(s1) as txn:
                txn.state["n"] = 99
                assert txn.commit(commit_id=commit_id).already_landed, commit_id
        agent.run("go", session_id="s1")
        agent.run("go", session_id="s3")
        for sid in ("s1", "s3"):
            events = db.read_events(sid)
            assert [e.seq for e in events] == list(range(1, len(events) + 1))
            assert len(events) > len(expected["events"][sid])
        assert agent.get_session_state("s3")["n"] == expected["states"]["s3"]["n"]
    finally:
        db.close()
    with SqliteDb(db_file=target) as reopened:  # opening it again migrates nothing
        assert [s.session_id for s in reopened.list_sessions(limit=1)] == ["s3"]


def test_a_schema_10_database_migrates_and_reads_the_same(tmp_path: Path) -> None:
    """Schema 11 leaves the session row alone on a commit whose events carry the session's
    last number and time; a schema-10 database (rows stamped by every commit) upgrades,
    reads back what it did, answers every id it stored as landed, and numbers new events
    on from where each session was."""
    target, expected = fixture_at(tmp_path, 10)
    db = SqliteDb(db_file=target)
    try:
        with sqlite3.connect(target) as conn:
            assert conn.execute("PRAGMA user_version").fetchone()[0] == LATEST
        assert [s.to_dict() for s in db.list_sessions()] == expected["sessions"]
        for stored in expected["sessions"]:
            session = db.get_session(stored["session_id"])
            assert session is not None and session.to_dict() == stored
        agent = Agent(model=FunctionModel(model), tools=[add], db=db, user_id="u1")
        for sid in ("s1", "s2", "s3"):
            assert [e.to_dict() for e in db.read_events(sid)] == expected["events"][sid]
            assert [r.to_dict() for r in db.read_runs(sid)] == expected["runs"][sid]
            assert agent.get_session_state(sid) == expected["states"][sid]
        assert agent.get_state_history("s1") == expected["history"]

        store = StateStore(db)
        spec = SessionSpec(session_id="s3", user_id="u1")
        for commit_id, stored in expected["commits"].items():
            with store.begin(spec) as txn:
                txn.state["n"] = 99
                again = txn.commit(events=[NewEvent(type="note")], commit_id=commit_id)
            assert again.already_landed, commit_id
            assert again.last_seq == stored["last_seq"]
            assert {f"{k.kind}:{k.id}": v for k, v in again.versions.items()} == stored["versions"]
        for sid in ("s1", "s2", "s3"):
            agent.run("go", session_id=sid)
            events = db.read_events(sid)
            assert [e.seq for e in events] == list(range(1, len(events) + 1))
            assert len(events) > len(expected["events"][sid])
            session = db.get_session(sid)
            assert session is not None
            assert (session.last_seq, session.updated_at) == (events[-1].seq, events[-1].created_at)
        assert [s.session_id for s in db.list_sessions()][:1] == ["s3"]
    finally:
        db.close()
    with SqliteDb(db_file=target) as reopened:  # opening it again migrates nothing
        assert [s.session_id for s in reopened.list_sessions(limit=1)] == ["s3"]


def test_a_schema_11_database_is_refused_by_a_statewise_that_knows_schema_10(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A statewise of schema 10 numbers a session's events from its row alone, which a
    commit of schema 11 leaves behind: it would number two events alike, so it must
    refuse the database instead."""
    with SqliteDb(db_file=tmp_path / "new.db"):
        pass
    ten = sqlite_module._migrations("statewise_")[:10]
    monkeypatch.setattr(sqlite_module, "_migrations", lambda p: ten)
    with pytest.raises(SchemaVersionError, match=f"schema version {LATEST}"):
        SqliteDb(db_file=tmp_path / "new.db")
