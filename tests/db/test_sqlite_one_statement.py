"""SQLite commits on the writer thread (a server, `arun` on a shared loop) go as one
statement when they can: the rows they leave must be exactly those of the statement-by-
statement path, every commit that cannot go that way must still land (or fail) as that
path decides, and nothing may be half written either way."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from statewise import Agent
from statewise.db import SqliteDb
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
from statewise.db.sqlite import LARGE_VALUE
from statewise.exceptions import DatabaseUnavailableError, VersionConflict
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo, ToolCall

SESSION = ScopeKey(kind="session", id="s1")
USER = ScopeKey(kind="user", id="u1")
TIMESTAMPS = {"created_at", "updated_at"}


def write(key: ScopeKey, base: int, item: Any, **extra: Any) -> ScopeWrite:
    ops = [{"op": "append", "path": ["items"], "value": item}]
    return ScopeWrite(
        key=key, base_version=base, segments=[DeltaSegment(source="tool", ops=ops)], **extra
    )


def commits() -> list[Commit]:
    """A session's commits covering each kind of row and each way out of the one statement:
    a new session, a new scope, a snapshot, a commit id with no event, none at all, a run
    started and finished, a text too long for it, a state_delta event stored as a reference,
    an event without a run, and a commit id not newer than the last one."""
    session = SessionRecord(session_id="s1", user_id="u1")
    run = RunRecord(session_id="s1", run_id="r1", agent_name="a", input="go")
    delta = write(SESSION, 1, "a", delta_bytes=40)
    shown = {"scope": "session", "scope_id": "s1", "version": 2, "segments": []}
    shown["segments"] = [{"source": s.source, "ops": s.ops} for s in delta.segments]
    finished = RunRecord(
        session_id="s1", run_id="r1", agent_name="a", input="go", status="completed",
        content="done", messages=[{"role": "assistant", "content": "done"}],
        metrics={"steps": 1}, created_at=5.0,
    )  # fmt: skip
    return [
        Commit(
            session=session,
            commit_id="c01",
            create_session=True,
            writes=[write(SESSION, 0, "first", snapshot={"items": ["first"]})],
            events=[NewEvent(type="session_created", data={"by": "test"})],
        ),
        Commit(
            session=session,
            commit_id="c02",
            run=run,
            run_id="r1",
            step=0,
            events=[
                NewEvent(type="run_started", data={}, run_id="r1"),
                NewEvent(type="message", data={"m": 1}, run_id="r1"),
            ],
        ),
        Commit(
            session=session,
            commit_id="c03",
            run_id="r1",
            step=1,
            writes=[delta, write(USER, 0, "u", conflicts=[{"path": ["x"], "kept": "theirs"}])],
            events=[
                NewEvent(type="state_delta", data=shown, run_id="r1"),
                NewEvent(type="tool", data={"ok": 1}, run_id="r1"),
            ],
        ),
        Commit(session=session, commit_id="c04", writes=[write(USER, 1, "no events")]),
        Commit(session=session, writes=[write(SESSION, 2, "no id")]),
        Commit(
            session=session,
            commit_id="c06",
            writes=[write(SESSION, 3, "snap", snapshot={"items": ["first", "a", "snap"]})],
            events=[NewEvent(type="note", data={"without": "a run"})],
        ),
        Commit(
            session=session,
            commit_id="c07",
            events=[NewEvent(type="big", data={"x": "y" * LARGE_VALUE})],
        ),
        Commit(
            session=session,
            commit_id="c08",
            run=finished,
            run_id="r1",
            step=2,
            events=[NewEvent(type="run_completed", data={"content": "done"}, run_id="r1")],
        ),
        Commit(
            session=session, commit_id="c05", events=[NewEvent(type="late", data={"id": "older"})]
        ),
    ]


def rows(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every statewise table's rows, timestamps left out (each commit stamps its own)."""
    conn = sqlite3.connect(path)
    try:
        tables = [
            name
            for (name,) in conn.execute(
                "SELECT name FROM sqlite_schema WHERE type = 'table' AND name LIKE 'statewise_%'"
            )
        ]
        found = {}
        for table in sorted(tables):
            names = [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]
            kept = [name for name in names if name not in TIMESTAMPS]
            found[table] = sorted(conn.execute(f"SELECT {', '.join(kept)} FROM {table}"))
        return found
    finally:
        conn.close()


def without_time(result: CommitResult) -> tuple[Any, ...]:
    return (result.versions, result.first_seq, result.last_seq, result.replayed)


def test_the_one_statement_leaves_the_rows_the_statements_leave(tmp_path: Path) -> None:
    by_statements = SqliteDb(db_file=tmp_path / "statements.db")
    by_one = SqliteDb(db_file=tmp_path / "one.db")
    for commit in commits():
        expected = without_time(by_statements.commit(commit))
        assert without_time(by_one._commit_on_writer_thread(commit)) == expected, commit
    assert rows(tmp_path / "one.db") == rows(tmp_path / "statements.db")
    by_statements.close()
    by_one.close()


def test_only_the_commits_it_can_take_go_as_one_statement(tmp_path: Path) -> None:
    db = SqliteDb(db_file=tmp_path / "s.db")
    taken = [db._commit_in_one_statement(commit) is not None for commit in commits()]
    # the new session, a text over LARGE_VALUE and an old id take the other path (and
    # write nothing here: their turn comes in the test above)
    assert taken == [False, False, False, False, False, False, False, False, False]
    db.commit(commits()[0])
    taken = [db._commit_in_one_statement(commit) is not None for commit in commits()[1:]]
    assert taken == [True, True, True, True, True, False, True, False]
    db.close()


def test_a_landed_id_is_answered_not_applied_again(tmp_path: Path) -> None:
    db = SqliteDb(db_file=tmp_path / "s.db")
    first, second, third = commits()[:3]
    db.commit(first)
    landed = db._commit_on_writer_thread(second)
    before = rows(tmp_path / "s.db")
    again = db._commit_on_writer_thread(second)
    assert again.replayed and without_time(again)[:3] == without_time(landed)[:3]
    assert rows(tmp_path / "s.db") == before
    db._commit_on_writer_thread(third)
    db.close()


def test_a_moved_version_is_a_conflict_and_writes_nothing(tmp_path: Path) -> None:
    db = SqliteDb(db_file=tmp_path / "s.db")
    db.commit(commits()[0])
    before = rows(tmp_path / "s.db")
    stale = Commit(
        session=SessionRecord(session_id="s1"),
        commit_id="c09",
        writes=[write(SESSION, 0, "stale")],
        events=[NewEvent(type="tool", data={})],
    )
    with pytest.raises(VersionConflict) as caught:
        db._commit_on_writer_thread(stale)
    assert (caught.value.expected, caught.value.actual) == (0, 1)
    assert rows(tmp_path / "s.db") == before
    db.close()


def test_a_writer_between_two_commits_is_found_and_the_numbers_stay_right(
    tmp_path: Path,
) -> None:
    """The database expects the session where its own last commit left it; when another
    writer (another process) committed meanwhile, the statement aborts on that and is sent
    again without the expectation, and the events get the numbers after the other's."""
    mine = SqliteDb(db_file=tmp_path / "s.db")
    other = SqliteDb(db_file=tmp_path / "s.db")
    first, second, third = commits()[:3]
    mine.commit(first)
    other.commit(second)  # seq 2-3, which `mine` has not seen
    landed = mine._commit_in_one_statement(third)
    assert landed is not None  # (sent again as one statement, not handed over)
    assert (landed.first_seq, landed.last_seq, landed.replayed) == (4, 5, False)
    seqs = sorted(
        seq
        for (seq,) in sqlite3.connect(tmp_path / "s.db").execute("SELECT seq FROM statewise_events")
    )
    assert seqs == [1, 2, 3, 4, 5]
    note = Commit(
        session=SessionRecord(session_id="s1"),
        commit_id="c99",
        events=[NewEvent(type="note", data={})],
    )
    assert mine._commit_on_writer_thread(note).last_seq == 6  # (expected right this time)
    mine.close()
    other.close()


def test_a_busy_database_is_unavailable_and_then_writable(tmp_path: Path) -> None:
    db = SqliteDb(db_file=tmp_path / "s.db", busy_timeout=0.2)
    db.commit(commits()[0])
    before = rows(tmp_path / "s.db")
    holder = sqlite3.connect(tmp_path / "s.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(DatabaseUnavailableError, match="busy"):
            db._commit_on_writer_thread(commits()[1])
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert rows(tmp_path / "s.db") == before
    assert db._commit_on_writer_thread(commits()[1]).last_seq == 3
    db.close()


def test_a_deleted_file_is_named_and_nothing_is_written(tmp_path: Path) -> None:
    db = SqliteDb(db_file=tmp_path / "s.db")
    db.commit(commits()[0])
    for suffix in ("", "-wal", "-shm"):
        (tmp_path / f"s.db{suffix}").unlink(missing_ok=True)
    with pytest.raises(DatabaseUnavailableError, match="deleted or replaced"):
        db._commit_on_writer_thread(commits()[1])
    db.close()


def add(session_state: dict[str, Any], item: str) -> str:
    """Append one item."""
    session_state["items"].append(item)
    return "ok"


def script(messages: list[Message], info: RequestInfo) -> ModelResponse:
    if messages[-1].role == "tool":
        return ModelResponse(content="done")
    return ModelResponse(tool_calls=[ToolCall("add", {"item": messages[-1].content}, "c")])


def test_runs_from_a_shared_loop_commit_as_one_statement_each(tmp_path: Path) -> None:
    """What the writer thread's connection runs for a run after the session's first: the
    read that opens the run, and for each commit the one INSERT; no BEGIN, no COMMIT, no
    statement of its own per table, and no read of the sequence number it reached (the
    database knows it from its previous commit to the session)."""
    db = SqliteDb(db_file=tmp_path / "s.db")
    agent = Agent(model=FunctionModel(script), tools=[add], db=db, session_state={"items": []})
    seen: list[str] = []

    async def main() -> None:
        await agent.arun("a", session_id="s1")  # creates the session
        await db._writer_thread().run(lambda: db._conn.set_trace_callback(seen.append))
        for item in "bcd":
            await agent.arun(item, session_id="s1")

    asyncio.run(main())
    statements = {sql.split("(")[0].strip() for sql in seen if not sql.startswith("--")}
    statements -= {sql for sql in statements if sql.startswith("SELECT s.session_id")}
    assert statements == {"INSERT INTO statewise_commit_in VALUES"}, statements
    assert agent.get_session_state("s1")["items"] == ["a", "b", "c", "d"]
    db.close()
