"""A shared event loop (a server, `arun` from user code) never blocks on a run's sync work:
sync tools and hooks run in a worker thread, SQLite waits (disk, locks, retries) on its
own thread. Under a sync call (`run`), whose loop nobody shares, they run inline."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path
from typing import Any

from statewise import Agent
from statewise.db import InMemoryDb, SqliteDb
from tests.run._models import call_tool


def test_a_blocking_sync_tool_leaves_the_shared_loop_free() -> None:
    loop_ran = threading.Event()
    threads: list[str] = []

    def wait_for_the_loop(session_state: dict[str, Any]) -> str:
        threads.append(threading.current_thread().name)
        session_state["waited"] = True
        # Inline on the loop's thread this would wait out its timeout: the loop could not
        # run the coroutine that sets the event.
        return "loop ran" if loop_ran.wait(timeout=10) else "loop was blocked"

    agent = Agent(model=call_tool("wait_for_the_loop"), tools=[wait_for_the_loop])

    async def main() -> str:
        run = asyncio.create_task(agent.arun("go", session_id="s"))
        while not threads:
            await asyncio.sleep(0.01)
        loop_ran.set()
        return (await run).content or ""

    assert asyncio.run(main()) == "loop ran"
    assert threads[0] != threading.main_thread().name
    assert agent.get_session_state("s") == {"waited": True}


def test_slow_sync_tools_do_not_take_the_threads_database_io_needs() -> None:
    """Tools run in threads of their own: with as many tools blocked at once as there are
    threads for database I/O (every run's commits go through those), the database still
    answers."""
    from statewise._workers import BLOCKING_THREADS
    from statewise._workers import USER_CODE_THREADS as TOOL_THREADS

    release = threading.Event()
    started = threading.Semaphore(0)
    threads: set[str] = set()

    def slow(session_state: dict[str, Any]) -> str:
        threads.add(threading.current_thread().name)
        started.release()
        release.wait(timeout=10)
        return "ok"

    db = InMemoryDb()
    agent = Agent(model=call_tool("slow"), tools=[slow], db=db)

    async def main() -> bool:
        runs = [
            asyncio.create_task(agent.arun("go", session_id=f"s{n}"))
            for n in range(BLOCKING_THREADS)
        ]
        try:
            for _ in range(TOOL_THREADS):
                await asyncio.to_thread(started.acquire)
            answered = await asyncio.wait_for(db.run_io(db.get_session, "s0"), timeout=5)
            return answered is not None
        finally:
            release.set()
            await asyncio.gather(*runs)

    assert asyncio.run(main())
    assert threads and all(name.startswith("statewise-tool") for name in threads), threads


def test_under_a_sync_run_tools_run_inline() -> None:
    threads: list[str] = []

    def where(session_state: dict[str, Any]) -> str:
        threads.append(threading.current_thread().name)
        return "ok"

    agent = Agent(model=call_tool("where"), tools=[where], db=InMemoryDb())
    agent.run("go")
    assert threads == [threading.main_thread().name]


def test_a_sync_hook_on_a_shared_loop_runs_off_the_loop_with_its_tool() -> None:
    threads: list[str] = []

    def tool(session_state: dict[str, Any]) -> str:
        threads.append("tool:" + threading.current_thread().name)
        return "ok"

    def hook(function_call: Any, arguments: dict[str, Any]) -> Any:
        threads.append("hook:" + threading.current_thread().name)
        return function_call(**arguments)

    agent = Agent(model=call_tool("tool"), tools=[tool], tool_hooks=[hook])
    asyncio.run(agent.arun("go", session_id="s"))
    main = threading.main_thread().name
    assert len(threads) == 2 and all(not t.endswith(":" + main) for t in threads)


def test_a_locked_sqlite_database_does_not_block_the_shared_loop(tmp_path: Path) -> None:
    db_file = tmp_path / "locked.db"
    db = SqliteDb(db_file=db_file, busy_timeout=10)
    agent = Agent(model=call_tool("nothing"), db=db)
    agent.run("create the session", session_id="s")
    other = sqlite3.connect(db_file, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:

        async def main() -> tuple[bool, int]:
            run = asyncio.create_task(agent.arun("go", session_id="s"))
            ticks = 0
            for _ in range(20):  # the loop keeps running while the commit waits
                await asyncio.sleep(0.01)
                ticks += 1
            still_waiting = not run.done()
            other.execute("COMMIT")
            await run
            return still_waiting, ticks

        still_waiting, ticks = asyncio.run(main())
    finally:
        if other.in_transaction:
            other.execute("ROLLBACK")
        other.close()
        db.close()
    assert still_waiting and ticks == 20
    with SqliteDb(db_file=db_file) as reopened:
        assert len(reopened.read_runs("s")) == 2
