"""Conformance cases on reading history and managing sessions: events and runs paging,
listing, delete, prune, export/import, corrupt records, awkward ids and values."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from statewise.db.base import split_records
from statewise.db.records import Commit, NewEvent, RunRecord, ScopeKey
from statewise.db.testing.base import Harness
from statewise.db.testing.cases import CASES, S, case, setop, state, write
from statewise.exceptions import CorruptRecordError, InvalidIdError, StorageError

__all__ = ["CASES"]


@case
def events_paging(h: Harness) -> None:
    db = h.db
    write(db, "s1", events=10)
    write(db, "other", events=2)

    def seqs(**kw: Any) -> list[int]:
        return [e.seq for e in db.read_events("s1", **kw)]

    assert seqs() == list(range(1, 11))
    assert seqs(after=3) == list(range(4, 11))
    assert seqs(before=5) == [1, 2, 3, 4]
    assert seqs(limit=3) == [8, 9, 10]
    assert seqs(after=3, limit=2) == [4, 5]
    assert seqs(before=8, limit=3) == [5, 6, 7]
    assert seqs(after=2, before=6) == [3, 4, 5]
    assert seqs(after=2, before=6, limit=2) == [3, 4]
    assert seqs(limit=0) == [] and seqs(after=10) == []
    db.commit(
        Commit(
            session=db.get_session("s1"),  # type: ignore[arg-type]
            events=[NewEvent(type="a"), NewEvent(type="b"), NewEvent(type="a")],
        )
    )
    assert seqs(types=["a"]) == [11, 13] and seqs(types=["a", "note"], limit=2) == [11, 13]
    assert seqs(types=["a"], limit=1) == [13] and seqs(types=["nope"]) == []
    assert [e.data for e in db.read_events("s1", after=9, limit=1)] == [{"i": 9}]


@case
def runs_upsert_order_and_filters(h: Harness) -> None:
    db = h.db
    write(db, "s1", run=RunRecord(session_id="s1", run_id="r1", agent_name="bot", input="hi"))
    first = db.get_run("s1", "r1")
    assert first is not None and first.status == "running" and first.input == "hi"
    write(
        db,
        "s1",
        run=RunRecord(
            session_id="s1",
            run_id="r1",
            status="completed",
            content="done",
            messages=[{"role": "user"}],
            metrics={"t": 1.5},
        ),
    )
    done = db.get_run("s1", "r1")
    assert done is not None
    assert (done.status, done.content, done.messages, done.metrics) == (
        "completed",
        "done",
        [{"role": "user"}],
        {"t": 1.5},
    )
    assert done.created_at == first.created_at and done.updated_at >= first.updated_at
    assert (done.agent_name, done.input) == ("bot", "hi")
    tie = time.time() + 100  # two runs created at the same instant keep insertion order
    for run_id, status in (("r3", "failed"), ("r2", "completed")):
        write(
            db,
            "s1",
            run=RunRecord(
                session_id="s1",
                run_id=run_id,
                status=status,  # type: ignore[arg-type]
                created_at=tie,
                error="boom" if status == "failed" else None,
            ),
        )
    assert [r.run_id for r in db.read_runs("s1")] == ["r1", "r3", "r2"]
    assert [r.run_id for r in db.read_runs("s1", limit=2)] == ["r3", "r2"]
    assert [r.run_id for r in db.read_runs("s1", status="completed")] == ["r1", "r2"]
    assert [r.run_id for r in db.read_runs("s1", status="completed", limit=1)] == ["r2"]
    assert db.read_runs("s1", limit=0) == []
    failed = db.get_run("s1", "r3")
    assert failed is not None and failed.error == "boom" and failed.created_at == tie
    assert db.get_run("s1", "nope") is None and db.get_run("other", "r1") is None


@case
def list_sessions_paging_and_filters(h: Harness) -> None:
    db = h.db
    for i in range(7):
        write(db, f"s{i}", user_id="alice" if i % 2 else "bob", app_name="a" if i < 4 else "b")
        time.sleep(0.002)
    write(db, "s0", setop("x", 1))  # s0 is now the most recently updated
    everyone = [s.session_id for s in db.list_sessions()]
    assert everyone == ["s0", "s6", "s5", "s4", "s3", "s2", "s1"]
    pages = [s.session_id for off in range(0, 7, 3) for s in db.list_sessions(limit=3, offset=off)]
    assert pages == everyone
    assert [s.session_id for s in db.list_sessions(user_id="alice")] == ["s5", "s3", "s1"]
    assert [s.session_id for s in db.list_sessions(user_id="bob", limit=2, offset=1)] == [
        "s6",
        "s4",
    ]
    assert [s.session_id for s in db.list_sessions(app_name="a")] == ["s0", "s3", "s2", "s1"]
    assert [s.session_id for s in db.list_sessions(user_id="alice", app_name="b")] == ["s5"]
    assert db.list_sessions(user_id="nobody") == [] and db.list_sessions(offset=7) == []
    assert db.list_sessions(limit=1)[0].last_seq == 2


@case
def delete_session_removes_everything_it_owns(h: Harness) -> None:
    db, uk = h.db, ScopeKey("user", "u1")
    write(db, "s1", setop("a", 1), run=RunRecord(session_id="s1", run_id="r1"))
    write(db, "s1", setop("b", 1), snapshot={"a": 1, "b": 1})
    write(db, "s1", setop("u", 1), key=uk)
    write(db, "s2", setop("a", 2))
    assert db.delete_session("s1") is True
    assert db.get_session("s1") is None and db.read_events("s1") == []
    assert db.read_runs("s1") == [] and db.read_deltas(S("s1")) == []
    assert db.read_snapshot(S("s1"), 99) == (0, {})
    assert db.load_scopes([S("s1")])[S("s1")].version == 0
    assert state(db, uk) == {"u": 1}, "user: state is shared and outlives a session"
    assert state(db, S("s2")) == {"a": 2} and db.delete_session("s1") is False
    assert [s.session_id for s in db.list_sessions()] == ["s2"]
    assert db.list_sessions(user_id="u1")[0].session_id == "s2"
    try:
        db.delete_session("")
    except InvalidIdError:
        pass
    else:
        raise AssertionError("delete_session('') must raise InvalidIdError")
    write(db, "s1", setop("fresh", True))  # the id can be used again, from scratch
    assert state(db, S("s1")) == {"fresh": True}


@case
def prune_sessions_by_age_and_user(h: Harness) -> None:
    db = h.db
    write(db, "old-a", user_id="a")
    write(db, "old-b", user_id="b")
    write(db, "old-a2", user_id="a")
    time.sleep(0.05)
    cutoff = datetime.fromtimestamp(time.time())
    time.sleep(0.01)
    write(db, "new-a", user_id="a")
    assert db.prune_sessions(older_than=cutoff, user_id="a") == 2
    assert sorted(s.session_id for s in db.list_sessions()) == ["new-a", "old-b"]
    assert db.prune_sessions(older_than=timedelta(days=1)) == 0
    assert db.prune_sessions(older_than=cutoff) == 1
    assert db.read_events("old-b") == [] and db.prune_sessions(older_than=0) == 1


@case
def export_then_import_roundtrip(h: Harness) -> None:
    db, k = h.db, S("s1")
    write(db, "s1", setop("a", [1, {"b": None}]), run=RunRecord(session_id="s1", run_id="r1"))
    write(
        db,
        "s1",
        {"op": "append", "path": ["a"], "value": "x"},
        events=2,
        run=RunRecord(session_id="s1", run_id="r1", status="completed", content="ok"),
    )
    write(db, "s1", setop("c", "é\u0000"), snapshot={"a": [1, {"b": None}, "x"], "c": "é\u0000"})
    write(db, "s2", setop("other", 1))
    lines = list(db.export_session("s1"))
    assert [line["type"] for line in lines][:4] == ["session", "delta", "delta", "delta"]
    other = h.new_db()
    for session, deltas, events, runs in split_records(lines):
        other.import_records(session, deltas, events, runs)
    assert list(other.export_session("s1")) == lines
    assert state(other, k) == state(db, k) == {"a": [1, {"b": None}, "x"], "c": "é\u0000"}
    assert other.get_session("s2") is None
    assert [s.session_id for s in other.list_sessions(user_id="u1")] == ["s1"]
    # An imported session takes new commits like any other.
    write(other, "s1", setop("after", 1))
    assert other.read_events("s1")[-1].seq == db.get_session("s1").last_seq + 1  # type: ignore[union-attr]
    try:
        other.import_records(*next(split_records(lines)))
    except StorageError as exc:
        assert "s1" in str(exc)
    else:
        raise AssertionError("importing over an existing session must raise")


@case
def corrupt_records_fail_loudly_and_alone(h: Harness) -> None:
    db, k = h.db, S("bad")
    write(db, "bad", setop("a", 1), run=RunRecord(session_id="bad", run_id="r1"))
    write(db, "bad", setop("b", 1), snapshot={"a": 1, "b": 1})
    write(db, "bad", setop("c", 1))
    write(db, "good", setop("a", 1), run=RunRecord(session_id="good", run_id="r1"))

    def fails(fn: Callable[[], object], *needles: str) -> None:
        try:
            fn()
        except CorruptRecordError as exc:
            for needle in needles:
                assert needle in str(exc), f"{needle!r} not in {exc}"
        else:
            raise AssertionError("reading a corrupt record must raise CorruptRecordError")

    h.corrupt("delta", key=k, at=3)
    fails(lambda: db.load_scopes([k]), "'bad'", "3")
    fails(lambda: db.read_deltas(k), "'bad'")
    assert [d.version for d in db.read_deltas(k, upto_version=2)] == [1, 2]
    h.corrupt("snapshot", key=k, at=2)
    fails(lambda: db.load_scopes([k]), "'bad'")
    fails(lambda: db.read_snapshot(k, 2), "'bad'")
    h.corrupt("event", session_id="bad", at=2)
    fails(lambda: db.read_events("bad"), "'bad'")
    assert [e.seq for e in db.read_events("bad", limit=1)] == [3]
    try:
        h.corrupt("run", session_id="bad", at="r1")
    except NotImplementedError:
        pass
    else:
        fails(lambda: db.read_runs("bad"), "'bad'")
    assert state(db, S("good")) == {"a": 1} and len(db.read_events("good")) == 1
    assert [r.run_id for r in db.read_runs("good")] == ["r1"]


@case
def awkward_ids_and_json_values(h: Harness) -> None:
    db = h.db
    value = {
        "z": 1,
        "a": [{}, [], None, True, 1.5, -0.25, 2**60, "\u0000\n\"'{}"],
        "é": {"b": 1, "a": 2},
    }
    for sid in ("s:1{x}", "ünïcode 'q' \"dq\"", "a/b\\c%s?*[]"):
        uk = ScopeKey("user", f"{sid}:user")
        write(db, sid, setop("v", value), user_id=uk.id, app_name=f"{sid}:app")
        write(db, sid, setop("u", value), key=uk, user_id=uk.id, snapshot={"u": value})
        loaded = db.load_scopes([S(sid), uk])
        assert loaded[S(sid)].data == {"v": value} and loaded[uk].data == {"u": value}
        assert list(loaded[S(sid)].data["v"]) == ["z", "a", "é"], "key order must survive"
        assert list(loaded[uk].data["u"]["é"]) == ["b", "a"]
        assert db.read_snapshot(uk, 9) == (1, {"u": value})
        assert [s.session_id for s in db.list_sessions(user_id=uk.id)] == [sid]
        assert [s.session_id for s in db.list_sessions(app_name=f"{sid}:app")] == [sid]
    assert db.delete_session("s:1{x}") and db.get_session("ünïcode 'q' \"dq\"") is not None
