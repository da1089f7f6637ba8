"""InMemoryDb's own promises, beyond the conformance suite: it refuses what the durable
backends could not store, whole, and what it hands back never aliases what it keeps."""

from __future__ import annotations

import dataclasses

import pytest

from statewise.db import InMemoryDb
from statewise.db.records import Commit, NewEvent, RunRecord, SessionRecord


def commit(db: InMemoryDb, *events: NewEvent, run: RunRecord | None = None) -> None:
    record = db.get_session("s")
    db.commit(
        Commit(
            session=record or SessionRecord(session_id="s"),
            create_session=record is None,
            events=list(events),
            run=run,
        )
    )


def test_a_commit_with_one_unstorable_event_writes_nothing() -> None:
    db = InMemoryDb()
    commit(db, NewEvent(type="a", data={"n": 1}))
    with pytest.raises(TypeError, match="not JSON serializable"):
        commit(db, NewEvent(type="b", data={"n": 2}), NewEvent(type="c", data={"x": object()}))
    with pytest.raises(ValueError, match="not JSON compliant"):
        commit(db, NewEvent(type="b", data={"n": float("nan")}))
    record = db.get_session("s")
    assert record is not None and record.last_seq == 1
    assert [(e.seq, e.type, e.data) for e in db.read_events("s")] == [(1, "a", {"n": 1})]


def test_a_run_record_that_cannot_be_stored_fails_its_commit() -> None:
    db = InMemoryDb()
    run = RunRecord(session_id="s", run_id="r", messages=[{"content": {1, 2}}])
    with pytest.raises(TypeError):
        commit(db, NewEvent(type="a"), run=run)
    assert db.get_session("s") is None and db.read_events("s") == []
    assert db.read_runs("s") == []


def test_events_read_back_are_copies_each_time() -> None:
    db = InMemoryDb()
    payload = {"items": [1, 2]}
    commit(db, NewEvent(type="a", data=payload), NewEvent(type="b", data=payload))
    payload["items"].append(3)  # the caller's object, changed after the commit
    first, second = db.read_events("s")
    assert first.data == second.data == {"items": [1, 2]}
    assert first.data is not second.data
    first.data["items"].append(99)
    assert [e.data for e in db.read_events("s")] == [{"items": [1, 2]}, {"items": [1, 2]}]
    assert [e.type for e in db.read_events("s", types=["b"])] == ["b"]
    assert [e.seq for e in db.read_events("s", after=1)] == [2]


def test_a_stored_run_never_shares_objects_with_its_writer_or_readers() -> None:
    db = InMemoryDb()
    arguments = {"item": "milk"}
    messages = [{"role": "assistant", "tool_calls": [{"name": "add", "arguments": arguments}]}]
    metrics = {"tool_calls": 1}
    run = RunRecord(session_id="s", run_id="r", messages=messages, metrics=metrics)
    commit(db, NewEvent(type="a"), run=run)
    arguments["item"] = "changed by the writer"  # e.g. a ToolCall the caller still holds
    messages.append({"role": "user"})
    metrics["tool_calls"] = 2
    (stored,) = db.read_runs("s")
    assert stored.messages == [
        {"role": "assistant", "tool_calls": [{"name": "add", "arguments": {"item": "milk"}}]}
    ]
    assert stored.metrics == {"tool_calls": 1}
    stored.messages.clear()
    stored.metrics.clear()
    again = db.get_run("s", "r")
    assert again is not None and len(again.messages) == 1 and again.metrics == {"tool_calls": 1}
    later = RunRecord(session_id="s", run_id="r", status="completed", agent_name="other")
    commit(db, run=later)  # an upsert keeps the run's origin, and takes its new body
    final = db.get_run("s", "r")
    assert final is not None and final.status == "completed" and final.messages == []
    assert final.agent_name is None and final.created_at == again.created_at


def test_every_field_of_a_run_record_is_stored() -> None:
    """A stored run keeps every field its writer set (the copy it keeps is written out by
    hand; a field added to RunRecord and missed there fails here)."""
    db = InMemoryDb()
    values: dict[str, object] = {
        "session_id": "s",
        "run_id": "r",
        "status": "failed",
        "messages": [{"role": "user", "content": "hi"}],
        "metrics": {"tool_calls": 1},
        "created_at": 5.0,
    }
    for f in dataclasses.fields(RunRecord):
        if f.name not in values:
            values[f.name] = 7.0 if f.type in ("float", float) else f"{f.name}-value"
    run = RunRecord(**values)  # type: ignore[arg-type]
    commit(db, run=run)
    (stored,) = db.read_runs("s")
    assert {f.name for f in dataclasses.fields(RunRecord)} - {"updated_at"} <= {
        name for name in values if getattr(stored, name) == values[name]
    }


def test_a_probed_session_record_copies_every_field_and_owns_its_metadata() -> None:
    """`probe` writes its copy out field by field (cheaper than a dict round trip): none
    may be missed, and the copy's metadata is not the stored record's."""
    from statewise.db.memory import _copy_session

    values: dict[str, object] = {}
    for f in dataclasses.fields(SessionRecord):
        if f.name == "metadata":
            values[f.name] = {"k": "v"}
        elif f.type in ("float", float):
            values[f.name] = 7.5
        elif f.type in ("int", int):
            values[f.name] = 3
        else:
            values[f.name] = f"{f.name}-value"
    record = SessionRecord(**values)  # type: ignore[arg-type]
    copy = _copy_session(record)
    assert copy == record and copy is not record
    assert copy.metadata is not record.metadata
    db = InMemoryDb()
    commit(db, NewEvent(type="note"))
    probed, _versions = db.probe("s", ())
    assert probed is not None and probed == db.get_session("s")


def test_a_long_session_keeps_its_history_out_of_the_collectors_way() -> None:
    """Each kept event and run is a row of strings and numbers, which the garbage
    collector stops tracking once it has seen it: a long in-memory session must not make
    every full collection walk its whole history (it added ~18 tracked objects a run)."""
    import gc

    db = InMemoryDb()
    commit(db, NewEvent(type="start"))

    def one_run(i: int) -> None:
        run = RunRecord(
            session_id="s",
            run_id=f"r{i}",
            input="go",
            messages=[{"role": "user", "content": "go"}],
            metrics={"tool_calls": 1},
        )
        commit(db, NewEvent(type="run_started", data={"n": i}), NewEvent(type="b"), run=run)

    one_run(0)
    gc.collect()
    before = len(gc.get_objects())
    for i in range(1, 1001):
        one_run(i)
    gc.collect()
    assert len(gc.get_objects()) - before < 100  # not one per run
    assert len(db.read_events("s")) == 1 + 2 * 1001 and len(db.read_runs("s")) == 1001
    last = db.get_run("s", "r1000")
    assert last is not None and last.messages == [{"role": "user", "content": "go"}]
