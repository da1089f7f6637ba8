"""Storage-side hostile conditions: a corrupt session row, a database file deleted under
a running process, and paging events of one run (filtered before the page limit)."""

from __future__ import annotations

import logging
import os

import pytest

from statewise import Agent
from statewise.db import BaseDb, SqliteDb
from statewise.db.testing import Harness
from statewise.exceptions import CorruptRecordError, DatabaseUnavailableError
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo, ToolCall


def _model(messages: list[Message], info: RequestInfo) -> ModelResponse:
    last = messages[-1]
    if last.role == "user" and (last.content or "").startswith("add"):
        return ModelResponse(tool_calls=[ToolCall("add", {"item": last.content or ""}, "c1")])
    return ModelResponse(content="ok")


def add(session_state: dict[str, object], item: str) -> str:
    """Add an item.

    Args:
        item: The item.
    """
    session_state[item] = True
    return "added"


def _agent(db: BaseDb) -> Agent:
    return Agent(name="app", model=FunctionModel(_model), db=db, tools=[add], user_id="u")


def _corrupt_metadata(harness: Harness, session_id: str) -> None:
    db = harness.db
    if harness.name == "sqlite":
        import sqlite3

        assert isinstance(db, SqliteDb)
        conn = sqlite3.connect(db.db_file)
        with conn:
            conn.execute(
                f"UPDATE {db.table_prefix}sessions SET metadata = '{{broken' WHERE session_id = ?",
                (session_id,),
            )
        conn.close()
    elif harness.name == "postgres":
        import psycopg

        schema: str = harness.schema  # type: ignore[attr-defined]
        url: str = harness.url  # type: ignore[attr-defined]
        with psycopg.connect(url, autocommit=True) as pg:
            pg.execute(
                f'UPDATE "{schema}".sessions SET metadata = %s WHERE session_id = %s',
                ("{broken", session_id),
            )
    else:
        from statewise.db.redis import RedisDb

        assert isinstance(db, RedisDb)
        db.client.hset(db.keys.session(session_id), "metadata", "{broken")


def test_one_corrupt_session_row_does_not_hide_the_others(
    backend: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    agent = _agent(backend.db)
    for sid in ("s1", "s2", "s3"):
        agent.run("hi", session_id=sid)
    _corrupt_metadata(backend, "s2")
    with caplog.at_level(logging.WARNING, logger="statewise.db"):
        listed = backend.reopen().list_sessions()
    assert sorted(r.session_id for r in listed) == ["s1", "s3"]
    assert any("'s2'" in r.getMessage() for r in caplog.records), caplog.records
    assert sorted(r.session_id for r in backend.reopen().list_sessions(user_id="u")) == ["s1", "s3"]
    # the bad one itself reports what is wrong when it is read
    with pytest.raises(CorruptRecordError, match="s2"):
        backend.reopen().get_session("s2")


def test_events_of_one_run_are_filtered_before_the_page_limit(backend: Harness) -> None:
    agent = _agent(backend.db)
    for n in range(3):
        agent.run(f"add x{n}", session_id="s")
    wanted = agent.run("add last", session_id="s").run_id
    db = backend.reopen()
    everything = db.read_events("s")
    mine = [e.seq for e in everything if e.run_id == wanted]
    assert len(mine) >= 4 and len(everything) > 2 * len(mine)
    assert [e.seq for e in db.read_events("s", after=0, limit=4, run_id=wanted)] == mine[:4]
    assert [e.seq for e in db.read_events("s", limit=2, run_id=wanted)] == mine[-2:]
    assert [e.seq for e in db.read_events("s", after=mine[1], run_id=wanted)] == mine[2:]
    assert db.read_events("s", run_id="no-such-run") == []


def test_events_of_one_run_over_http(backend: Harness) -> None:
    from statewise.server import create_app
    from tests.server.conftest import start_server, stop_server

    agent = _agent(backend.db)
    for n in range(3):
        agent.run(f"add x{n}", session_id="s")
    wanted = agent.run("add last", session_id="s").run_id
    live = start_server(create_app([agent]))
    try:
        with live.client() as client:
            page = client.get("/v1/sessions/s/events", params={"run_id": wanted, "limit": 4}).json()
            assert len(page["events"]) == 4
            assert {e["run_id"] for e in page["events"]} == {wanted}
            rest = client.get(
                "/v1/sessions/s/events",
                params={"run_id": wanted, "limit": 4, "after": page["next_after"]},
            ).json()
            assert rest["events"] and {e["run_id"] for e in rest["events"]} == {wanted}
    finally:
        stop_server(live)


def test_writes_fail_loudly_when_the_sqlite_file_is_deleted(tmp_path: object) -> None:
    path = os.path.join(str(tmp_path), "state.db")
    db = SqliteDb(db_file=path)
    agent = _agent(db)
    agent.state.for_session("s").set("kept", 1)
    os.remove(path)
    with pytest.raises(DatabaseUnavailableError, match="deleted or replaced"):
        agent.state.for_session("s").set("lost", 2)
    with pytest.raises(DatabaseUnavailableError, match="deleted or replaced"):
        agent.run("add y", session_id="s")
    with pytest.raises(DatabaseUnavailableError, match="deleted or replaced"):
        agent.get_session_state("s")
    assert not os.path.exists(path)  # and no empty database was created in its place
    # a new file at the same path is another database: still refused, never mixed
    SqliteDb(db_file=path).close()
    with pytest.raises(DatabaseUnavailableError, match="deleted or replaced"):
        agent.state.for_session("s").set("lost", 3)
    db.close()
