"""SQLite's commit path: rows holding a large text (a big state write's delta and
snapshot, a big tool result) go through statements of their own (`sqlite._insert_rows`)
and must land exactly like small rows, in order, with nothing extra inserted; a commit id
that landed before applies nothing again; a `state_delta` event refers to its delta
instead of copying it; every commit id is stored in one place."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet

from statewise import Agent
from statewise.db import SqliteDb
from statewise.db.records import (
    Commit,
    DeltaSegment,
    NewEvent,
    ScopeKey,
    ScopeWrite,
    SessionRecord,
)
from statewise.db.sqlite import LARGE_VALUE
from statewise.db.sqlite._schema import KEY_SPAN
from statewise.db.store import SessionSpec, StateStore
from statewise.exceptions import StorageError
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo, ToolCall
from statewise.state.secrets import Cipher

BIG = "x" * (LARGE_VALUE + 1)


def add(session_state: dict[str, Any], item: str) -> str:
    """Append one item."""
    session_state["items"].append(item)
    return "ok"


def big_result() -> str:
    """Answer with more text than LARGE_VALUE."""
    return BIG


def script(messages: list[Message], info: RequestInfo) -> ModelResponse:
    if messages[-1].role == "tool":
        return ModelResponse(content="done")
    name = "big_result" if messages[-1].content == "big" else "add"
    arguments = {} if name == "big_result" else {"item": messages[-1].content}
    return ModelResponse(tool_calls=[ToolCall(name, arguments, "c")])


def make_agent(db_file: Path) -> Agent:
    return Agent(
        model=FunctionModel(script),
        tools=[add, big_result],
        db=SqliteDb(db_file=db_file),
        session_state={"items": []},
    )


def row_count(db_file: Path, table: str) -> int:
    with sqlite3.connect(db_file) as conn:
        return int(conn.execute(f"SELECT count(*) FROM statewise_{table}").fetchone()[0])


def test_a_large_state_write_between_small_runs_reads_back_whole(tmp_path: Path) -> None:
    db_file = tmp_path / "s.db"
    agent = make_agent(db_file)
    agent.run("a", session_id="s")
    big_items = [BIG, {"nested": BIG}]
    agent.state.for_session("s").set("items", big_items)
    agent.run("b", session_id="s")
    agent.run("c", session_id="s")

    expected = [*big_items, "b", "c"]
    assert agent.get_session_state("s")["items"] == expected
    fresh = make_agent(db_file)  # no cached tree: snapshot plus deltas from the file
    assert fresh.get_session_state("s")["items"] == expected
    db = SqliteDb(db_file=db_file)
    deltas = db.read_deltas(ScopeKey("session", "s"))
    assert [d.version for d in deltas] == list(range(1, len(deltas) + 1))
    written = [op for d in deltas for op in d.ops if op.get("value") == big_items]
    assert len(written) == 1
    events = db.read_events("s")
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert row_count(db_file, "events") == len(events)
    assert row_count(db_file, "deltas") == len(deltas)
    snapshot_version, snapshot = db.read_snapshot(ScopeKey("session", "s"), 10**6)
    assert snapshot_version >= 2 and snapshot["items"][:2] == big_items


def test_a_large_event_among_small_ones_keeps_its_place(tmp_path: Path) -> None:
    db_file = tmp_path / "s.db"
    agent = make_agent(db_file)
    agent.run("a", session_id="s")
    output = agent.run("big", session_id="s")
    agent.run("b", session_id="s")

    assert output.messages[2].content == BIG
    events = SqliteDb(db_file=db_file).read_events("s")
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    big_run = [e for e in events if e.run_id == output.run_id]
    types = [e.type for e in big_run]
    assert types == [
        "run_started",
        "user_input",
        "model_response",
        "tool_call",
        "model_response",
        "run_completed",
    ]
    assert big_run[3].data["result"] == BIG
    assert big_run[4].data["request"]["new_messages"][-1]["content"].startswith("x")
    assert row_count(db_file, "events") == len(events)
    assert agent.get_session_state("s")["items"] == ["a", "b"]


def test_a_commit_id_that_landed_applies_nothing_again(tmp_path: Path) -> None:
    """SQLite inserts a commit's id before its changes (one statement where a lookup and
    an insert were); an id that landed before makes the whole attempt roll back and
    answers with the stored result, for a new session and an existing one alike."""
    db = SqliteDb(db_file=tmp_path / "s.db")
    store = StateStore(db)
    spec = SessionSpec(session_id="s")
    with store.begin(spec) as txn:
        txn.state["n"] = 1
        created = txn.commit(events=[NewEvent(type="note")], commit_id="c-1")
    with store.begin(spec) as txn:
        txn.state["m"] = 1
        second = txn.commit(events=[NewEvent(type="note")], commit_id="c-2")
    events_before = db.read_events("s")
    for commit_id, landed in (("c-1", created), ("c-2", second)):
        with store.begin(spec) as txn:
            txn.state["n"] = 99
            again = txn.commit(events=[NewEvent(type="note")], commit_id=commit_id)
        assert again.already_landed and not landed.already_landed
        assert again.versions == landed.versions and again.last_seq == landed.last_seq
    assert store.read_state(spec) == ({"n": 1, "m": 1}, 2)
    assert db.read_events("s") == events_before
    record, _versions = db.probe("s", ())
    assert record is not None and record.last_seq == second.last_seq


def test_the_same_commit_sent_twice_lands_once(tmp_path: Path) -> None:
    """A retry after a lost reply sends the very same commit: creating the session or
    writing to it, the second delivery changes nothing and says so."""
    db = SqliteDb(db_file=tmp_path / "s.db")
    key = ScopeKey("session", "t")
    segment = DeltaSegment(source="api", ops=[{"op": "set", "path": ["n"], "value": 1}])
    create = Commit(
        session=SessionRecord(session_id="t"),
        commit_id="first",
        create_session=True,
        writes=[ScopeWrite(key=key, base_version=0, segments=[segment])],
        events=[NewEvent(type="note")],
    )
    update = Commit(
        session=SessionRecord(session_id="t"),
        commit_id="second",
        writes=[ScopeWrite(key=key, base_version=1, segments=[segment])],
        events=[NewEvent(type="note"), NewEvent(type="note")],
    )
    for commit in (create, update):
        landed = db.commit(commit)
        again = db.commit(commit)
        assert not landed.already_landed and again.already_landed
        assert (again.versions, again.first_seq, again.last_seq) == (
            landed.versions,
            landed.first_seq,
            landed.last_seq,
        )
    assert [e.seq for e in db.read_events("t")] == [1, 2, 3]
    assert [d.version for d in db.read_deltas(key)] == [1, 2]


def wal_header(db_file: Path) -> bytes:
    return Path(f"{db_file}-wal").read_bytes()[:32]


def test_a_write_that_fills_the_wal_starts_it_over_itself(tmp_path: Path) -> None:
    """A commit bigger than the WAL's checkpoint threshold copies the WAL into the database
    as it ends. Starting the WAL over (a new header, synced) is its cost too: the next
    small run finds the WAL started and appends to it, with the header left as it was."""
    db_file = tmp_path / "s.db"
    agent = make_agent(db_file)
    agent.run("a", session_id="s")
    before = wal_header(db_file)
    agent.state.for_session("s").set("items", ["x" * 5_000_000])
    after_write = wal_header(db_file)
    agent.run("b", session_id="s")
    agent.run("c", session_id="s")

    assert after_write != before  # the write started the WAL over...
    assert wal_header(db_file) == after_write  # ...so the runs after it did not
    assert make_agent(db_file).get_session_state("s")["items"] == ["x" * 5_000_000, "b", "c"]


def test_a_state_delta_event_refers_to_its_delta_instead_of_copying_it(tmp_path: Path) -> None:
    """A big state write is stored as its delta (and a snapshot), not a third time in its
    `state_delta` event: the event row refers to the delta, and reads back with the ops.
    An event showing less than its delta (a secret redacted) keeps its own copy."""
    db_file = tmp_path / "s.db"
    db = SqliteDb(db_file=db_file)
    store = StateStore(db, secret_keys=["token"], cipher=Cipher(Fernet.generate_key()))
    spec = SessionSpec(session_id="s")
    with store.begin(spec) as txn:
        txn.state["items"] = [BIG]
        txn.commit()
    with store.begin(spec) as txn:
        txn.state["token"] = "hunter2"
        txn.state["n"] = 1
        txn.commit()

    events = db.read_events("s")
    shown = [e.data for e in events if e.type == "state_delta" and e.data["scope"] == "session"]
    assert [[op for s in data["segments"] for op in s["ops"]] for data in shown] == [
        [{"op": "set", "path": ["items"], "value": [BIG]}],
        [
            {"op": "set", "path": ["token"], "value": "***"},
            {"op": "set", "path": ["n"], "value": 1},
        ],
    ]
    assert [data["version"] for data in shown] == [1, 2]
    with sqlite3.connect(db_file) as conn:
        stored = [row[0] for row in conn.execute("SELECT data FROM statewise_events ORDER BY seq")]
    assert max(len(text) for text in stored) < 1000  # the big write's ops are in its delta only
    assert "hunter2" not in "".join(stored) and any("***" in text for text in stored)
    fresh = SqliteDb(db_file=db_file)
    assert [e.to_dict() for e in fresh.read_events("s")] == [e.to_dict() for e in events]
    assert fresh.read_events("s", types=["state_delta"], limit=1)[0].data == events[-1].data


def test_the_commit_ids_callers_give_are_stored_in_commits_with_their_result(
    tmp_path: Path,
) -> None:
    """One place for commit ids: a row of `commits` per id a caller gave, holding the
    result a retry is answered with (its last sequence number first). A run's own commits
    carry none: SQLite always answers, so nobody could send them again."""
    db_file = tmp_path / "s.db"
    agent = make_agent(db_file)
    agent.run("a", session_id="s")
    agent.run("b", session_id="s")
    store = StateStore(SqliteDb(db_file=db_file))
    for commit_id in ("given-1", "given-2"):
        with store.begin(SessionSpec(session_id="s")) as txn:
            txn.state[commit_id] = 1
            txn.commit(events=[NewEvent(type="note")], commit_id=commit_id)
    with sqlite3.connect(db_file) as conn:
        stored = conn.execute(
            "SELECT commit_id, result FROM statewise_commits ORDER BY commit_id"
        ).fetchall()
        columns = [row[1] for row in conn.execute("PRAGMA table_info(statewise_events)")]
    assert [commit_id for commit_id, _result in stored] == ["given-1", "given-2"]
    assert "commit_id" not in columns
    last_seqs = [int(result.split("|")[0]) for _commit_id, result in stored]
    events = SqliteDb(db_file=db_file).read_events("s")
    assert last_seqs == sorted(last_seqs) and last_seqs[-1] == len(events)


def test_commit_ids_not_made_in_order_are_still_applied_once(tmp_path: Path) -> None:
    """An id not greater than the ids landed before it (ids chosen by a caller) is
    recognised on a retry like any other, however many commits landed after it."""
    db = SqliteDb(db_file=tmp_path / "s.db")
    store = StateStore(db)
    spec = SessionSpec(session_id="s")
    landed = {}
    for n, commit_id in enumerate(["m", "c", "x", "a", "y", "b", "z"]):
        with store.begin(spec) as txn:
            txn.state[commit_id] = n
            events = [NewEvent(type="note")] if commit_id != "a" else []
            landed[commit_id] = txn.commit(events=events, commit_id=commit_id)
        assert not landed[commit_id].already_landed
    for _ in range(20):  # many commits with ids of their own after them
        with store.begin(spec) as txn:
            txn.state["n"] = txn.state.get("n", 0) + 1
            txn.commit(events=[NewEvent(type="note")])
    events_before = db.read_events("s")
    for commit_id, first in landed.items():
        with store.begin(spec) as txn:
            txn.state[commit_id] = "again"
            again = txn.commit(events=[NewEvent(type="note")], commit_id=commit_id)
        assert again.already_landed, commit_id
        assert (again.versions, again.last_seq) == (first.versions, first.last_seq)
    assert db.read_events("s") == events_before
    state, _version = store.read_state(spec)
    assert {k: state[k] for k in landed} == {k: n for n, k in enumerate(landed)}
    assert (
        row_count(tmp_path / "s.db", "commits") == 7
    )  # (the 20 commits without an id of their own store none)


def test_a_scope_at_the_end_of_its_key_range_refuses_more_versions(tmp_path: Path) -> None:
    """A delta's rowid is its scope's key and its version: a commit that would write a
    version past the scope's range fails and writes nothing, instead of landing among the
    next scope's deltas."""
    db_file = tmp_path / "s.db"
    db = SqliteDb(db_file=db_file)
    store = StateStore(db)
    spec = SessionSpec(session_id="s")
    with store.begin(spec) as txn:
        txn.state["n"] = 1
        txn.commit(events=[NewEvent(type="note")])
    last = KEY_SPAN - 1
    with sqlite3.connect(db_file) as conn:
        conn.execute(f"UPDATE statewise_scopes SET version = {last}")
    before = (row_count(db_file, "deltas"), row_count(db_file, "events"))
    segment = DeltaSegment(source="api", ops=[{"op": "set", "path": ["n"], "value": 2}])
    write = ScopeWrite(key=ScopeKey("session", "s"), base_version=last, segments=[segment])
    commit = Commit(
        session=SessionRecord(session_id="s"), writes=[write], events=[NewEvent(type="note")]
    )
    with pytest.raises(StorageError, match="out of versions"):
        db.commit(commit)
    assert (row_count(db_file, "deltas"), row_count(db_file, "events")) == before
    assert db.probe("s", [ScopeKey("session", "s")])[1] == {ScopeKey("session", "s"): last}
