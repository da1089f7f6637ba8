"""Every failure is final (DESIGN §3): a run whose commit fails for any reason ends
`failed` with the reason, even when storage also refuses the failure's own first record;
nothing is left `running` by an error.

The storage failures are real: triggers in the real SQLite file and PostgreSQL schema
refuse chosen rows, as a backend refuses a value it cannot store."""

from __future__ import annotations

import asyncio
import secrets
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statewise import Agent, StepInput, Workflow
from statewise.db import SqliteDb
from statewise.db.base import BaseDb
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo, ToolCall


def tool_then_answer(messages: list[Message], info: RequestInfo) -> ModelResponse:
    if messages[-1].role == "tool":
        return ModelResponse(content="the answer")
    return ModelResponse(tool_calls=[ToolCall("note", {"text": "x"}, "n1")])


def note(session_state: dict[str, Any], text: str) -> str:
    """Note a text.

    Args:
        text: The text.
    """
    session_state.setdefault("notes", []).append(text)
    return "noted"


class Refusing:
    """A real database plus a way to make it refuse rows (`refuse_event`, `refuse_run`)."""

    def __init__(self, kind: str, db: BaseDb, execute: Any) -> None:
        self.kind, self.db, self.execute = kind, db, execute

    def refuse_event(self, event_type: str) -> None:
        if self.kind == "sqlite":
            self.execute(
                f"CREATE TRIGGER refuse_{event_type} BEFORE INSERT ON statewise_events "
                f"WHEN NEW.type = '{event_type}' "
                f"BEGIN SELECT RAISE(ABORT, 'storage refuses {event_type}'); END"
            )
        else:
            self.execute(
                f"CREATE TRIGGER refuse_{event_type} BEFORE INSERT ON {{s}}.events FOR EACH ROW "
                f"WHEN (NEW.type = '{event_type}') EXECUTE FUNCTION {{s}}.refuse()"
            )

    def refuse_failed_runs_with_content(self) -> None:
        """Refuse the first record of a failure (it still holds the run's answer)."""
        if self.kind == "sqlite":
            for verb in ("INSERT", "UPDATE"):
                self.execute(
                    f"CREATE TRIGGER refuse_failed_{verb} BEFORE {verb} ON statewise_runs "
                    "WHEN NEW.status = 'failed' AND NEW.content IS NOT NULL "
                    "BEGIN SELECT RAISE(ABORT, 'storage refuses this run record'); END"
                )
        else:
            self.execute(
                "CREATE TRIGGER refuse_failed BEFORE INSERT OR UPDATE ON {s}.runs FOR EACH ROW "
                "WHEN (NEW.status = 'failed' AND NEW.content IS NOT NULL) "
                "EXECUTE FUNCTION {s}.refuse()"
            )


@pytest.fixture(params=["sqlite", "postgres"])
def refusing(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Refusing]:
    if request.param == "sqlite":
        path = tmp_path / "r.db"
        db = SqliteDb(db_file=str(path))
        db.list_sessions()  # (the schema exists from here on)

        def execute(sql: str) -> None:
            with sqlite3.connect(path) as conn:
                conn.execute(sql)

        yield Refusing("sqlite", db, execute)
        db.close()
        return
    import psycopg

    from statewise.db.postgres import PostgresDb

    url = request.getfixturevalue("pg_url")
    schema = f"sw_fail_{secrets.token_hex(4)}"
    pg = PostgresDb(url, schema=schema, pool_size=2)
    s = f'"{schema}"'

    def run_sql(sql: str) -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.replace("{s}", s))

    run_sql(
        "CREATE FUNCTION {s}.refuse() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION 'storage refuses this row'; END $$"
    )
    yield Refusing("postgres", pg, run_sql)
    pg.close()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {s} CASCADE")


def _only_run(db: BaseDb, sid: str) -> Any:
    [record] = db.read_runs(sid)
    return record


def test_a_step_commit_storage_refuses_ends_the_run_failed_with_the_reason(
    refusing: Refusing,
) -> None:
    agent = Agent(name="a", model=FunctionModel(tool_then_answer), tools=[note], db=refusing.db)
    agent.run("warm up", session_id="s")  # the session exists
    refusing.refuse_event("tool_call")
    with pytest.raises(Exception, match="storage refuses"):
        agent.run("go", session_id="s")
    failed = agent.db.read_runs("s")[-1]
    assert failed.status == "failed"
    assert "storage refuses" in (failed.error or "")
    assert [r.status for r in agent.db.read_runs("s")] == ["completed", "failed"]


@pytest.mark.parametrize("kind", ["agent", "workflow"])
def test_when_storage_also_refuses_the_failure_record_a_bare_one_lands(
    refusing: Refusing, kind: str
) -> None:
    """The run end is refused, then so is the failure's first record (it carries the
    run's answer): the run still ends `failed` with the reason, in a bare record."""
    if kind == "agent":
        runner: Any = Agent(
            name="a", model=FunctionModel(tool_then_answer), tools=[note], db=refusing.db
        )
    else:

        def step(step_input: StepInput, session_state: dict[str, Any]) -> str:
            session_state["done"] = True
            return "the answer"

        runner = Workflow(name="w", steps=[step], db=refusing.db)
    refusing.refuse_event("run_completed")
    refusing.refuse_failed_runs_with_content()
    with pytest.raises(Exception, match="storage refuses"):
        runner.run("go", session_id="s")
    record = _only_run(refusing.db, "s")
    assert record.status == "failed"
    assert "storage refuses" in (record.error or "")
    assert record.content is None
    [failed] = refusing.db.read_events("s", types=["run_failed"])
    assert failed.data["error"] == record.error


def test_a_cancelled_run_ends_failed(tmp_path: Path) -> None:
    started = asyncio.Event()

    async def model(messages: list[Message], info: RequestInfo) -> ModelResponse:
        started.set()
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    agent = Agent(name="a", model=FunctionModel(model), db=SqliteDb(db_file=str(tmp_path / "c.db")))

    async def main() -> None:
        task = asyncio.ensure_future(agent.arun("go", session_id="s"))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    record = _only_run(agent.db, "s")
    assert record.status == "failed"
    assert record.error == "CancelledError: the run was cancelled before it finished"
    agent.db.close()
