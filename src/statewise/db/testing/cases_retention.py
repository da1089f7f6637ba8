"""Conformance cases on retention: a compaction keeps the current state, the retained
history and the event sequence exact; reads below the horizon are clear errors; running
and paused runs stay; commit ids outlive their window and are then refused; and a
session's storage stays bounded under a policy, however many commits it takes."""

from __future__ import annotations

import time
from typing import Any

from statewise.db.base import BaseDb
from statewise.db.records import (
    Commit,
    CommitResult,
    DeltaSegment,
    NewEvent,
    RunRecord,
    ScopeWrite,
    SessionRecord,
)
from statewise.db.retention import Retention, check_commit_id, require_retained
from statewise.db.testing.base import Harness
from statewise.db.testing.cases import CASES, S, case, setop, state
from statewise.exceptions import CommitIdExpiredError, HistoryCompactedError

__all__ = ["CASES"]

HOURS_LATER = 3 * 3600.0
"""How far `now` is moved for a compaction that must find every commit id out of its
window (the window is an hour at the least)."""


def _commit(
    db: BaseDb,
    sid: str,
    base: int,
    i: int,
    *,
    commit_id: str = "",
    run: RunRecord | None = None,
    events: int = 2,
) -> Commit:
    """The i-th commit of a history: sets `n` to i and appends i to `items`."""
    return Commit(
        session=SessionRecord(session_id=sid, user_id="u1", app_name="app"),
        create_session=base == 0,
        commit_id=commit_id or f"c-{sid}-{i:06d}",
        writes=[
            ScopeWrite(
                key=S(sid),
                base_version=base,
                segments=[
                    DeltaSegment(
                        source=f"test:{i}",
                        ops=[setop("n", i), {"op": "append", "path": ["items"], "value": i}]
                        if base
                        else [setop("n", i), setop("items", [i])],
                    )
                ],
                delta_bytes=40,
            )
        ],
        events=[
            NewEvent(type="note", data={"i": i, "k": k}, run_id=run.run_id if run else None)
            for k in range(events)
        ],
        run=run,
        run_id=run.run_id if run else None,
    )


def _history(db: BaseDb, sid: str, commits: int, *, first: int = 1) -> list[CommitResult]:
    """`commits` commits to a session, each with a finished run `r<i>` and two events."""
    results = []
    base = db.probe(sid, [S(sid)])[1][S(sid)]
    for i in range(first, first + commits):
        run = RunRecord(session_id=sid, run_id=f"r{i}", status="completed", content=str(i))
        results.append(db.commit(_commit(db, sid, base, i, run=run)))
        base += 1
    return results


def _state_at(db: BaseDb, sid: str, version: int) -> dict[str, Any]:
    from statewise.db.store import StateStore

    return StateStore(db).scope_at(S(sid), version)


@case
def compaction_keeps_state_history_and_sequence_exact(h: Harness) -> None:
    db = h.db
    _history(db, "s1", 30)
    current = state(db, S("s1"))
    events_before = {e.seq: e.to_dict() for e in db.read_events("s1")}
    kept_deltas = [d.to_dict() for d in db.read_deltas(S("s1"), after_version=20)]
    at = {v: _state_at(db, "s1", v) for v in (20, 25)}

    out = db.compact_session("s1", Retention(keep_versions=10))
    assert out is not None and out.horizon.version == 20, out
    assert (out.deltas, out.events, out.runs) == (20, 40, 20), out
    assert state(db, S("s1")) == current == {"n": 30, "items": list(range(1, 31))}
    record, versions = db.probe("s1", [S("s1")])
    assert record is not None and record.last_seq == 60 and versions[S("s1")] == 30
    assert [d.to_dict() for d in db.read_deltas(S("s1"))] == kept_deltas
    assert db.read_snapshot(S("s1"), 20) == (20, at[20])
    assert _state_at(db, "s1", 25) == at[25] and _state_at(db, "s1", 20) == at[20]
    events = db.read_events("s1")
    assert [e.seq for e in events] == list(range(41, 61)), "no renumbering"
    assert all(e.to_dict() == events_before[e.seq] for e in events)
    assert [r.run_id for r in db.read_runs("s1")] == [f"r{i}" for i in range(21, 31)]
    again = db.compact_session("s1", Retention(keep_versions=10))
    assert again is None or again.removed == 0, again
    other = h.reopen()  # what another process sees
    assert other.read_horizon("s1").version == 20 and state(other, S("s1")) == current
    # The session goes on exactly where it was: the next commit takes seq 61, version 31.
    landed = db.commit(_commit(db, "s1", 30, 31))
    assert (landed.first_seq, landed.versions[S("s1")]) == (61, 31)
    assert state(db, S("s1"))["items"] == list(range(1, 32))


@case
def reads_below_the_horizon_raise(h: Harness) -> None:
    db = h.db
    _history(db, "s1", 12)
    db.compact_session("s1", Retention(keep_versions=4))
    try:
        _state_at(db, "s1", 3)
    except HistoryCompactedError as exc:
        assert (exc.session_id, exc.version, exc.oldest) == ("s1", 3, 8)
        assert "'s1'" in str(exc) and "version 3" in str(exc) and "version 8" in str(exc)
    else:
        raise AssertionError("a state below the horizon was answered")
    assert _state_at(db, "s1", 8) == {"n": 8, "items": list(range(1, 9))}
    assert _state_at(db, "s1", 0) == {}, "the empty state is always there"
    require_retained(db, "s1", 8)
    try:
        require_retained(db, "s1", 7)
    except HistoryCompactedError:
        pass
    else:
        raise AssertionError("require_retained let version 7 through")
    db.delete_session("s1")  # a new session of the same id starts with a whole history
    _history(db, "s1", 2)
    assert db.read_horizon("s1").version == 0 and _state_at(db, "s1", 1) == {"n": 1, "items": [1]}


@case
def compaction_keeps_running_and_paused_runs(h: Harness) -> None:
    db = h.db
    live = RunRecord(session_id="s1", run_id="live", status="running")
    held = RunRecord(session_id="s1", run_id="held", status="paused")
    first = _commit(db, "s1", 0, 1, commit_id="live:step:1", run=live)
    db.commit(first)
    db.commit(_commit(db, "s1", 1, 2, commit_id="held:step:1", run=held))
    _history(db, "s1", 20, first=3)
    out = db.compact_session("s1", Retention(keep_versions=3), now=time.time() + HOURS_LATER)
    assert out is not None and out.horizon.version == 19
    kept = {r.run_id: r.status for r in db.read_runs("s1")}
    finished = dict.fromkeys(("r20", "r21", "r22"), "completed")  # (after the horizon)
    assert kept == {"live": "running", "held": "paused", **finished}, kept
    assert len(db.read_events("s1", run_id="live")) == 2
    assert len(db.read_events("s1", run_id="held")) == 2
    again = db.commit(first)  # a live run's commit ids are never forgotten
    assert again.already_landed and again.last_seq == 2
    check_commit_id(db, "s1", "live:step:1")


def _old_id(hours: float) -> str:
    """An id as statewise makes them (time in nanoseconds, then 64 bits), `hours` ago."""
    return f"{int((time.time() - hours * 3600) * 1e9):016x}{'5' * 16}"


@case
def commit_ids_outlive_their_window_then_are_refused(h: Harness) -> None:
    db = h.db
    old_id = _old_id(0.5)  # made half an hour ago (a slow commit)
    first = _commit(db, "s1", 0, 1, commit_id=old_id)
    db.commit(first)
    _history(db, "s1", 20, first=2)
    policy = Retention(keep_versions=5)
    out = db.compact_session("s1", policy)
    assert out is not None and out.horizon.version == 16
    # Its events are gone, its id is not: it was made within the last hour.
    assert db.read_events("s1", before=3) == []
    again = db.commit(first)
    assert again.already_landed and again.last_seq == 2, again
    check_commit_id(db, "s1", old_id)  # (still known: not refused)
    ids_before = h.stored_rows("s1")["commit_ids"]
    later = db.compact_session("s1", policy, now=time.time() + HOURS_LATER)
    assert later is not None and later.commit_ids > 0 and later.horizon.version == 16
    assert h.stored_rows("s1")["commit_ids"] == ids_before - later.commit_ids
    try:
        check_commit_id(db, "s1", old_id, now=time.time() + HOURS_LATER)
    except CommitIdExpiredError as exc:
        assert "'s1'" in str(exc) and old_id in str(exc)
    else:
        raise AssertionError("a forgotten commit id was let through")
    check_commit_id(db, "s1", _old_id(0))  # a new id is never refused
    assert state(db, S("s1"))["items"] == list(range(1, 22)), "nothing applied twice"


@case
def storage_stays_bounded_under_a_policy(h: Harness) -> None:
    db = h.db
    policy = Retention(keep_versions=100)
    every = policy.every
    peak: dict[str, int] = {}
    for i in range(1, 2001):
        run = RunRecord(session_id="s1", run_id=f"r{i}", status="completed")
        landed = db.commit(_commit(db, "s1", i - 1, i, run=run, events=1))
        if policy.due(landed.versions[S("s1")], landed.last_seq, 1):
            db.compact_session("s1", policy)
            if i % (4 * every) == 0:
                rows = h.stored_rows("s1")
                peak = {name: max(peak.get(name, 0), n) for name, n in rows.items()}
    bound = 100 + every
    assert peak["deltas"] <= bound and peak["events"] <= bound and peak["runs"] <= bound, peak
    assert peak["snapshots"] <= 2, peak
    assert state(db, S("s1")) == {"n": 2000, "items": list(range(1, 2001))}
    assert [e.seq for e in db.read_events("s1", limit=2)] == [1999, 2000]
    # Commit ids are kept for their window (an hour), then go with the history.
    db.compact_session("s1", policy, now=time.time() + HOURS_LATER)
    rows = h.stored_rows("s1")
    assert rows["commit_ids"] <= bound and rows["deltas"] <= bound, rows


@case
def commits_compact_after_themselves_under_a_policy(h: Harness) -> None:
    from statewise.db.testing.store_cases import append_items, stored_state

    db = h.db
    db.retention = Retention(keep_versions=5, slack=2)
    append_items(db, "s1", [f"i{i}" for i in range(20)])
    horizon = db.read_horizon("s1")
    assert 0 < horizon.version <= 15, horizon
    assert stored_state(db, "s1")["items"] == [f"i{i}" for i in range(20)]
    assert len(db.read_deltas(S("s1"))) <= 7
