"""SQLite's session row is not written by a commit whose events carry the session's last
number and time (schema 11): what readers see of the session is the same as when every
commit stamped the row, and a compaction that removes the last events keeps both."""

from __future__ import annotations

import sqlite3
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from statewise.db import SqliteDb
from statewise.db.listing import LISTED_EVERY
from statewise.db.records import Commit, NewEvent, SessionRecord
from statewise.db.retention import Retention
from statewise.db.store import SessionSpec, StateStore


def stored_row(db_file: Path, session_id: str) -> tuple[int, float, int]:
    """The session row as stored: last_seq, updated_at, listed_at."""
    with sqlite3.connect(db_file) as conn:
        row = conn.execute(
            "SELECT last_seq, updated_at, listed_at FROM statewise_sessions WHERE session_id = ?",
            (session_id,),
        ).fetchone()
    return row[0], row[1], row[2]


def commit(store: StateStore, n: int, notes: int, session_id: str = "s") -> float:
    """One commit setting `n` with `notes` events of its own (the store adds the state's
    delta); when it landed (its last event's time)."""
    with store.begin(SessionSpec(session_id=session_id)) as txn:
        txn.state["n"] = n
        txn.commit(events=[NewEvent(type="note") for _ in range(notes)])
    return store.db.read_events(session_id, limit=1)[-1].created_at


def test_a_commit_with_events_leaves_the_session_row_unless_it_changes_bucket(
    tmp_path: Path,
) -> None:
    db_file = tmp_path / "s.db"
    with SqliteDb(db_file=db_file) as db:
        store = StateStore(db)
        commit(store, 1, 2)
        before = stored_row(db_file, "s")
        landed = commit(store, 2, 3)
        session = db.get_session("s")
        assert session is not None
        assert (session.last_seq, session.updated_at) == (7, landed)
        assert [e.seq for e in db.read_events("s")] == list(range(1, 8))
        if int(landed / LISTED_EVERY) * LISTED_EVERY == before[2]:
            assert stored_row(db_file, "s") == before
        else:  # (the commit crossed into the next listing bucket, which the row keeps)
            assert stored_row(db_file, "s")[:2] == (7, landed)
        assert [s.session_id for s in db.list_sessions()] == ["s"]
        assert db.list_sessions()[0].to_dict() == session.to_dict()


def test_a_commit_without_events_stamps_the_session_row(tmp_path: Path) -> None:
    db_file = tmp_path / "s.db"
    with SqliteDb(db_file=db_file) as db:
        store = StateStore(db)
        commit(store, 1, 2)
        started = time.time()
        db.commit(Commit(session=SessionRecord(session_id="s")))  # (no writes, no events)
        last_seq, updated_at, _ = stored_row(db_file, "s")
        assert last_seq == 3 and started <= updated_at <= time.time()
        session = db.get_session("s")
        assert session is not None and (session.last_seq, session.updated_at) == (3, updated_at)


def test_a_session_is_listed_and_pruned_by_its_last_commit(tmp_path: Path) -> None:
    with SqliteDb(db_file=tmp_path / "s.db") as db:
        store = StateStore(db)
        commit(store, 1, 1, "a")
        commit(store, 1, 1, "b")
        landed = commit(store, 2, 1, "a")
        listed = db.list_sessions()
        assert [s.session_id for s in listed] == ["a", "b"]
        assert listed[0].updated_at == landed
        # b, not a: a's last commit is not older than the cutoff (a datetime rounds to
        # the microsecond, up as often as down: one microsecond less stays below `landed`)
        cutoff = datetime.fromtimestamp(landed, UTC) - timedelta(microseconds=1)
        assert db.prune_sessions(older_than=cutoff) == 1
        assert [s.session_id for s in db.list_sessions()] == ["a"]


def test_a_compaction_that_removes_the_last_events_keeps_the_sessions_number_and_time(
    tmp_path: Path,
) -> None:
    db_file = tmp_path / "s.db"
    with SqliteDb(db_file=db_file) as db:
        store = StateStore(db)
        for n in range(1, 6):
            landed = commit(store, n, 2)
        before = db.get_session("s")
        assert before is not None and (before.last_seq, before.updated_at) == (15, landed)
        done = db.compact_session("s", Retention(keep_days=1), now=time.time() + 3 * 86400)
        assert done is not None and done.events == 15
        assert db.read_events("s") == []
        after = db.get_session("s")
        assert after is not None and after.to_dict() == before.to_dict()
        commit(store, 6, 1)
        assert [e.seq for e in db.read_events("s")] == [16, 17]
