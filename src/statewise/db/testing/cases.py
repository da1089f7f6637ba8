"""Conformance cases on the storage primitives. Each takes a Harness and asserts.

The in-memory backend is the reference; SqliteDb defines the exact semantics (ordering,
errors) every other backend must reproduce.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from statewise.db.base import BaseDb
from statewise.db.records import (
    Commit,
    CommitResult,
    DeltaSegment,
    NewEvent,
    RunRecord,
    ScopeKey,
    ScopeWrite,
    SessionRecord,
)
from statewise.db.testing.base import Harness
from statewise.exceptions import (
    VersionConflict,
)

CASES: list[Callable[[Harness], None]] = []


def case(fn: Callable[[Harness], None]) -> Callable[[Harness], None]:
    CASES.append(fn)
    return fn


def S(sid: str) -> ScopeKey:
    return ScopeKey("session", sid)


def setop(path: str, value: Any) -> dict[str, Any]:
    return {"op": "set", "path": [path], "value": value}


def write(
    db: BaseDb,
    sid: str,
    *ops: dict[str, Any],
    key: ScopeKey | None = None,
    user_id: str | None = "u1",
    app_name: str = "app",
    events: int = 1,
    run: RunRecord | None = None,
    snapshot: dict[str, Any] | None = None,
) -> CommitResult:
    """Commit `ops` to one scope (the session's by default) at its current version."""
    key = key or S(sid)
    record, versions = db.probe(sid, [key])
    return db.commit(
        Commit(
            session=record or SessionRecord(session_id=sid, user_id=user_id, app_name=app_name),
            create_session=record is None,
            writes=[
                ScopeWrite(
                    key=key,
                    base_version=versions[key],
                    segments=[DeltaSegment(source="test", ops=list(ops))],
                    snapshot=snapshot,
                    delta_bytes=10,
                )
            ]
            if ops
            else [],
            events=[NewEvent(type="note", data={"i": i}) for i in range(events)],
            run=run,
            run_id=run.run_id if run else None,
        )
    )


def state(db: BaseDb, key: ScopeKey) -> dict[str, Any]:
    return db.load_scopes([key])[key].data


def everything(db: BaseDb, sid: str, keys: Sequence[ScopeKey]) -> Any:
    """All a session holds, to compare before/after a failed commit."""
    record, versions = db.probe(sid, keys)
    return (
        record.to_dict() if record else None,
        versions,
        [e.to_dict() for e in db.read_events(sid)],
        [r.to_dict() for r in db.read_runs(sid)],
        {k: [d.to_dict() for d in db.read_deltas(k)] for k in keys},
        {k: db.read_snapshot(k, 1 << 40) for k in keys},
    )


@case
def probe_and_load_new_session(h: Harness) -> None:
    keys = [S("nobody"), ScopeKey("user", "u"), ScopeKey("app", "a")]
    record, versions = h.db.probe("nobody", keys)
    assert record is None and versions == dict.fromkeys(keys, 0)
    loaded = h.db.load_scopes(keys)
    assert [(s.version, s.data, s.snapshot_version) for s in loaded.values()] == [(0, {}, 0)] * 3
    assert h.db.get_session("nobody") is None
    assert h.db.read_events("nobody") == [] and h.db.read_runs("nobody") == []
    assert h.db.get_run("nobody", "r") is None and h.db.read_deltas(S("nobody")) == []


@case
def commit_and_load_roundtrip(h: Harness) -> None:
    db = h.db
    sk, uk, ak = S("s1"), ScopeKey("user", "u1"), ScopeKey("app", "app")
    t0 = time.time()
    result = db.commit(
        Commit(
            session=SessionRecord(
                session_id="s1", user_id="u1", app_name="app", kind="team", metadata={"m": [1, "x"]}
            ),
            create_session=True,
            writes=[
                ScopeWrite(
                    key=k,
                    base_version=0,
                    segments=[DeltaSegment(source="tool:a", ops=[setop("k", k.kind)])],
                )
                for k in (sk, uk, ak)
            ],
            events=[
                NewEvent(type="run_started", data={"a": 1}, run_id="r1"),
                NewEvent(type="state_delta", data={"b": [1, 2]}, run_id="r1"),
            ],
            run=RunRecord(session_id="s1", run_id="r1", agent_name="bot", input="hi"),
            run_id="r1",
            step=3,
        )
    )
    assert result.versions == {sk: 1, uk: 1, ak: 1}
    assert (result.first_seq, result.last_seq) == (1, 2) and result.committed_at >= t0
    record, versions = db.probe("s1", [sk, uk, ak])
    assert record is not None and versions == {sk: 1, uk: 1, ak: 1}
    assert (record.user_id, record.app_name, record.kind, record.metadata, record.last_seq) == (
        "u1",
        "app",
        "team",
        {"m": [1, "x"]},
        2,
    )
    assert record.created_at == record.updated_at == result.committed_at
    assert {k: s.data for k, s in db.load_scopes([sk, uk, ak]).items()} == {
        sk: {"k": "session"},
        uk: {"k": "user"},
        ak: {"k": "app"},
    }
    [delta] = db.read_deltas(sk)
    assert (delta.version, delta.session_id, delta.run_id, delta.step) == (1, "s1", "r1", 3)
    assert delta.segments[0].source == "tool:a" and delta.ops == [setop("k", "session")]
    assert db.read_deltas(uk)[0].session_id == "s1"
    events = db.read_events("s1")
    assert [(e.seq, e.type, e.data, e.run_id) for e in events] == [
        (1, "run_started", {"a": 1}, "r1"),
        (2, "state_delta", {"b": [1, 2]}, "r1"),
    ]
    second = write(db, "s1", setop("k", 2), events=3)
    assert second.versions == {sk: 2} and (second.first_seq, second.last_seq) == (3, 5)
    again = db.get_session("s1")
    assert again is not None and again.created_at == record.created_at
    assert again.updated_at == second.committed_at and again.last_seq == 5
    assert state(db, sk) == {"k": 2}
    empty = write(db, "s1", events=0)
    assert (empty.first_seq, empty.last_seq, empty.versions) == (6, 5, {})
    assert asyncio.run(db.aprobe("s1", [sk]))[1] == {sk: 2}


@case
def cas_conflict_raises_and_writes_nothing(h: Harness) -> None:
    db = h.db
    sk, uk = S("s1"), ScopeKey("user", "u1")
    write(db, "s1", setop("a", 1), run=RunRecord(session_id="s1", run_id="r1"))
    write(db, "s1", setop("a", 2), key=uk)
    before = everything(db, "s1", [sk, uk])
    record = db.get_session("s1")
    assert record is not None
    # The session scope is current, the user scope is stale: nothing may land.
    stale = Commit(
        session=record,
        writes=[
            ScopeWrite(
                key=sk,
                base_version=1,
                segments=[DeltaSegment(source="x", ops=[setop("a", 9)])],
                snapshot={"a": 9},
            ),
            ScopeWrite(
                key=uk, base_version=0, segments=[DeltaSegment(source="x", ops=[setop("b", 9)])]
            ),
        ],
        events=[NewEvent(type="lost")],
        run=RunRecord(session_id="s1", run_id="r2", status="completed"),
        run_id="r2",
    )
    try:
        db.commit(stale)
    except VersionConflict as exc:
        assert (exc.expected, exc.actual) == (0, 1) and "u1" in exc.scope, exc
    else:
        raise AssertionError("a commit on a stale version must raise VersionConflict")
    assert everything(db, "s1", [sk, uk]) == before
    # The commit for a session that does not exist conflicts too, and writes nothing.
    ghost = SessionRecord(session_id="ghost", user_id="u1")
    try:
        db.commit(Commit(session=ghost, writes=[], events=[NewEvent(type="x")]))
    except VersionConflict as exc:
        assert "ghost" in str(exc)
    else:
        raise AssertionError("commit to a missing session without create_session must conflict")
    assert db.get_session("ghost") is None and db.read_events("ghost") == []


def _race_create(
    db: BaseDb, n: int, sid: str, barrier: threading.Barrier, outcomes: list[str]
) -> None:
    commit = Commit(
        session=SessionRecord(session_id=sid, user_id=f"u{n}"),
        create_session=True,
        writes=[
            ScopeWrite(
                key=S(sid),
                base_version=0,
                segments=[DeltaSegment(source="t", ops=[setop("who", n)])],
            )
        ],
        events=[NewEvent(type="created", data={"n": n})],
    )
    barrier.wait()
    try:
        db.commit(commit)
        outcomes.append(f"won {n}")
    except VersionConflict:
        outcomes.append("lost")


@case
def create_session_race_has_one_winner(h: Harness) -> None:
    handles = [h.db, h.reopen()]
    for round_ in range(5):
        sid = f"race-{round_}"
        barrier = threading.Barrier(len(handles))
        outcomes: list[str] = []

        threads = [
            threading.Thread(target=_race_create, args=(db, n, sid, barrier, outcomes))
            for n, db in enumerate(handles)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(outcomes)[0] == "lost" and len(outcomes) == 2, outcomes
        winner = int(next(o for o in outcomes if o.startswith("won")).split()[1])
        assert state(h.db, S(sid)) == {"who": winner}
        assert [e.data for e in h.db.read_events(sid)] == [{"n": winner}]
        assert [d.version for d in h.db.read_deltas(S(sid))] == [1]


@case
def snapshot_then_deltas_rebuild(h: Harness) -> None:
    db, k = h.db, S("s1")
    write(db, "s1", setop("a", 1))
    write(db, "s1", setop("b", 2), snapshot={"a": 1, "b": 2})
    write(db, "s1", {"op": "append", "path": ["c"], "value": 3})
    write(db, "s1", {"op": "increment", "path": ["a"], "value": 5})
    loaded = db.load_scopes([k])[k]
    assert loaded.data == {"a": 6, "b": 2, "c": [3]} and loaded.version == 4
    assert loaded.snapshot_version == 2 and loaded.snapshot_bytes == len('{"a":1,"b":2}')
    assert loaded.tail_bytes == 20
    assert db.read_snapshot(k, 1) == (0, {})
    assert db.read_snapshot(k, 2) == (2, {"a": 1, "b": 2}) == db.read_snapshot(k, 99)
    assert [d.version for d in db.read_deltas(k)] == [1, 2, 3, 4]
    assert [d.version for d in db.read_deltas(k, after_version=1, upto_version=3)] == [2, 3]
    assert [d.version for d in db.read_deltas(k, after_version=1, limit=2)] == [2, 3]
    write(db, "s1", setop("z", None), snapshot={"only": "this"})
    assert state(db, k) == {"only": "this"}
    assert db.read_snapshot(k, 4) == (2, {"a": 1, "b": 2})


@case
def large_snapshot_roundtrip(h: Harness) -> None:
    db, k = h.db, S("big")
    big = {f"k{i}": "x" * 1000 + str(i) for i in range(3000)}  # ~3 MB
    write(db, "big", setop("base", 0), snapshot={"base": 0, **big})
    assert state(db, k) == {"base": 0, **big}


@case
def concurrent_cas_writers_lose_nothing(h: Harness) -> None:
    """Threads on separate handles race on one scope; each retries its lost CAS."""
    write(h.db, "hot", setop("n", 0))
    handles = [h.db, h.reopen(), h.reopen()]
    per_thread, errors = 15, []

    def work(db: BaseDb, n: int) -> None:
        try:
            for i in range(per_thread):
                while True:
                    record, versions = db.probe("hot", [S("hot")])
                    assert record is not None
                    try:
                        db.commit(
                            Commit(
                                session=record,
                                writes=[
                                    ScopeWrite(
                                        key=S("hot"),
                                        base_version=versions[S("hot")],
                                        segments=[
                                            DeltaSegment(
                                                source=f"t{n}",
                                                ops=[
                                                    {
                                                        "op": "append",
                                                        "path": ["items"],
                                                        "value": f"{n}-{i}",
                                                    }
                                                ],
                                            )
                                        ],
                                    )
                                ],
                                events=[NewEvent(type="tick")],
                            )
                        )
                        break
                    except VersionConflict:
                        continue
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(db, n)) for n, db in enumerate(handles)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    total = per_thread * len(handles)
    loaded = h.db.load_scopes([S("hot")])[S("hot")]
    assert loaded.version == total + 1 and sorted(loaded.data["items"]) == sorted(
        f"{n}-{i}" for n in range(len(handles)) for i in range(per_thread)
    )
    assert [e.seq for e in h.db.read_events("hot")] == list(range(1, total + 2))
