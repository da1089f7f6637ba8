"""SQLite commits from a shared event loop (a server, `arun` in user code): each is
built on the loop and written by the database's writer thread. The loop must never wait
for another writer, and a commit that fails must leave the database writable."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from statewise import Agent
from statewise.db import SqliteDb
from statewise.db.store import SessionSpec, StateStore
from statewise.exceptions import DatabaseUnavailableError, StaleStateVersionError
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo, ToolCall


def add(session_state: dict[str, Any], item: str) -> str:
    """Append one item."""
    session_state.setdefault("items", []).append(item)
    return "ok"


def script(messages: list[Message], info: RequestInfo) -> ModelResponse:
    if messages[-1].role == "tool":
        return ModelResponse(content="done")
    return ModelResponse(tool_calls=[ToolCall("add", {"item": messages[-1].content}, "c")])


async def _commit_item(store: StateStore, session_id: str, item: str) -> None:
    async with await store.abegin(SessionSpec(session_id=session_id)) as txn:
        txn.state.setdefault("items", []).append(item)
        await txn.commit(source="test")


def test_a_writer_thread_holding_the_lock_does_not_block_the_loop(tmp_path: Path) -> None:
    db = SqliteDb(db_file=tmp_path / "s.db")
    store = StateStore(db)
    holding, release = threading.Event(), threading.Event()

    def hold(conn: sqlite3.Connection) -> None:
        holding.set()
        release.wait(10)

    other = threading.Thread(target=db._write, args=(hold,))

    async def main() -> tuple[bool, int]:
        await _commit_item(store, "s", "a")
        other.start()
        holding.wait(10)
        commit = asyncio.create_task(_commit_item(store, "s", "b"))
        ticks = 0
        for _ in range(20):  # the loop runs on while the commit waits for the writer
            await asyncio.sleep(0.01)
            ticks += 1
        waited = not commit.done()
        release.set()
        await commit
        return waited, ticks

    waited, ticks = asyncio.run(main())
    other.join(10)
    assert waited and ticks == 20
    assert StateStore(db).read_state(SessionSpec(session_id="s"))[0] == {"items": ["a", "b"]}
    db.close()


def test_a_commit_that_fails_on_the_loop_leaves_the_database_writable(tmp_path: Path) -> None:
    db = SqliteDb(db_file=tmp_path / "s.db")
    store = StateStore(db)

    async def main() -> None:
        await _commit_item(store, "s", "a")
        stale = await store.abegin(SessionSpec(session_id="s"), expected_version=1)
        await _commit_item(store, "s", "b")  # someone else lands first
        stale.state["items"].append("lost")
        with pytest.raises(StaleStateVersionError):
            await stale.commit(source="test")
        stale.close(keep=False)
        await _commit_item(store, "s", "c")

    asyncio.run(main())
    # A thread's write gets the lock (a failed loop commit left no transaction open).
    finished = threading.Event()

    def write_from_a_thread() -> None:
        with store.begin(SessionSpec(session_id="s")) as txn:
            txn.state["items"].append("d")
            txn.commit(source="thread")
        finished.set()

    threading.Thread(target=write_from_a_thread, daemon=True).start()
    assert finished.wait(10)
    assert store.read_state(SessionSpec(session_id="s"))[0] == {"items": ["a", "b", "c", "d"]}
    db.close()


def test_a_loop_commit_to_a_deleted_file_fails_and_writes_nothing(tmp_path: Path) -> None:
    db_file = tmp_path / "s.db"
    db = SqliteDb(db_file=db_file)
    store = StateStore(db)

    async def main() -> None:
        await _commit_item(store, "s", "a")
        for suffix in ("", "-wal", "-shm"):  # (the WAL holds the first commit)
            os.rename(f"{db_file}{suffix}", tmp_path / f"moved.db{suffix}")
        with pytest.raises(DatabaseUnavailableError, match="deleted or replaced"):
            await _commit_item(store, "s", "b")

    asyncio.run(main())
    db.close()
    with SqliteDb(db_file=tmp_path / "moved.db") as moved:
        assert StateStore(moved).read_state(SessionSpec(session_id="s"))[0] == {"items": ["a"]}


def test_concurrent_runs_on_one_loop_and_a_shared_session_lose_nothing(tmp_path: Path) -> None:
    """16 runs at once on one loop: each on its own session and each on one shared
    session, whose lost races rebase in the writer thread while the loop keeps writing."""
    agent = Agent(model=FunctionModel(script), tools=[add], db=SqliteDb(db_file=tmp_path / "s.db"))

    async def main() -> None:
        await asyncio.gather(
            *(agent.arun(f"own{n}", session_id=f"own-{n}") for n in range(16)),
            *(agent.arun(f"shared{n}", session_id="shared") for n in range(16)),
        )

    asyncio.run(main())
    for n in range(16):
        assert agent.get_session_state(f"own-{n}")["items"] == [f"own{n}"]
    assert sorted(agent.get_session_state("shared")["items"]) == sorted(
        f"shared{n}" for n in range(16)
    )
    events = agent.db.read_events("shared")
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    agent.db.close()


def test_a_commit_whose_caller_is_cancelled_mid_write_is_still_recorded(tmp_path: Path) -> None:
    """The write goes on after its caller is cancelled (a thread cannot be stopped): what
    landed must still be recorded in the working state, or the transaction's next commit
    would find itself behind and rebase onto its own write (applying it twice)."""
    db = SqliteDb(db_file=tmp_path / "s.db")
    store = StateStore(db)
    writing = threading.Event()
    real_commit = db.commit  # (what a commit from a shared loop runs, on the writer thread)

    def slow_commit(commit: Any) -> Any:
        writing.set()
        threading.Event().wait(0.3)
        return real_commit(commit)

    async def main() -> None:
        txn = await store.abegin(SessionSpec(session_id="s"))
        txn.state["items"] = []
        await txn.commit(source="start")
        txn.state["items"].append("a")
        db.commit = slow_commit  # type: ignore[method-assign]
        first = asyncio.create_task(txn.commit(source="first"))
        while not writing.is_set():
            await asyncio.sleep(0.005)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        db.commit = real_commit  # type: ignore[method-assign]
        await asyncio.sleep(0.6)  # the cancelled write lands meanwhile
        txn.state["items"].append("b")
        await txn.commit(source="second")
        txn.close()

    asyncio.run(main())
    assert store.read_state(SessionSpec(session_id="s"))[0] == {"items": ["a", "b"]}
    db.close()
