"""Harnesses for the bundled backends: memory, SQLite, PostgreSQL and Redis."""

from __future__ import annotations

import secrets
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from statewise.db.base import BaseDb
from statewise.db.memory import InMemoryDb
from statewise.db.records import ScopeKey
from statewise.db.sqlite import SqliteDb
from statewise.db.testing.base import CorruptTarget, Harness

GARBAGE = "{not json"


def _need(value: Any, what: str) -> Any:
    if value is None:
        raise ValueError(f"corrupt: {what} is required")
    return value


class MemoryHarness(Harness):
    """InMemoryDb: `reopen` hands out the same object (there is no second process)."""

    name = "memory"

    def open_db(self) -> BaseDb:
        return InMemoryDb()

    def reopen(self) -> BaseDb:
        return self.db

    def new_db(self) -> BaseDb:
        return InMemoryDb()

    def corrupt(
        self,
        target: CorruptTarget,
        *,
        key: ScopeKey | None = None,
        session_id: str | None = None,
        at: int | str = 0,
    ) -> None:
        db = self.db
        assert isinstance(db, InMemoryDb)
        with db._lock:
            if target == "snapshot":
                db._scopes[_need(key, "key")].snapshots[int(at)] = GARBAGE
            elif target == "delta":
                scope = db._scopes[_need(key, "key")]
                row = scope.deltas[int(at)]
                scope.deltas[int(at)] = (*row[:3], GARBAGE, *row[4:])
            elif target == "event":
                events = db._events[_need(session_id, "session_id")]
                i = next(i for i, row in enumerate(events) if row[0] == int(at))
                events[i] = (*events[i][:3], GARBAGE, 0, events[i][5])
            else:
                runs = db._runs[_need(session_id, "session_id")]
                runs[str(at)] = (*runs[str(at)][:8], GARBAGE, 0)

    def stored_rows(self, session_id: str) -> dict[str, int]:
        db = self.db
        assert isinstance(db, InMemoryDb)
        with db._lock:
            scope = db._scopes.get(ScopeKey("session", session_id))
            return {
                "deltas": len(scope.deltas) if scope else 0,
                "snapshots": len(scope.snapshots) if scope else 0,
                "events": len(db._events.get(session_id, [])),
                "runs": len(db._runs.get(session_id, {})),
                "commit_ids": len(db._commits.get(session_id, {})),
            }


class SqliteHarness(Harness):
    name = "sqlite"

    def __init__(self, directory: Path) -> None:
        super().__init__()
        self.directory = directory
        self.path = directory / "main.db"

    def open_db(self) -> BaseDb:
        return SqliteDb(db_file=self.path)

    def reopen(self) -> BaseDb:
        return self.track(SqliteDb(db_file=self.path))

    def new_db(self) -> BaseDb:
        return self.track(SqliteDb(db_file=self.directory / f"other-{secrets.token_hex(4)}.db"))

    def corrupt(
        self,
        target: CorruptTarget,
        *,
        key: ScopeKey | None = None,
        session_id: str | None = None,
        at: int | str = 0,
    ) -> None:
        import sqlite3

        db = self.db
        assert isinstance(db, SqliteDb)
        p = db.table_prefix
        sql, params = _corrupt_sql(p, "?", target, key, session_id, at)
        conn = sqlite3.connect(self.path)
        try:
            with conn:
                changed = conn.execute(sql, params).rowcount
        finally:
            conn.close()
        assert changed == 1, f"corrupt {target}: no such record"

    def stored_rows(self, session_id: str) -> dict[str, int]:
        import sqlite3

        db = self.db
        assert isinstance(db, SqliteDb)
        conn = sqlite3.connect(self.path)
        try:
            return {
                name: conn.execute(sql, (session_id,)).fetchone()[0]
                for name, sql in stored_rows_sql(db.table_prefix, "?").items()
            }
        finally:
            conn.close()


def stored_rows_sql(p: str, mark: str) -> dict[str, str]:
    """The counts `Harness.stored_rows` reads, as SQL (SQLite and Postgres)."""
    scope = f"kind = 'session' AND scope_id = {mark}"
    return {
        "deltas": f"SELECT count(*) FROM {p}deltas WHERE {scope}",
        "snapshots": f"SELECT count(*) FROM {p}snapshots WHERE {scope}",
        "events": f"SELECT count(*) FROM {p}events WHERE session_id = {mark}",
        "runs": f"SELECT count(*) FROM {p}runs WHERE session_id = {mark}",
        "commit_ids": f"SELECT count(*) FROM {p}commits WHERE session_id = {mark}",
    }


def _corrupt_sql(
    p: str,
    mark: str,
    target: CorruptTarget,
    key: ScopeKey | None,
    session_id: str | None,
    at: int | str,
) -> tuple[str, tuple[Any, ...]]:
    """An UPDATE overwriting one record's JSON column with garbage (SQLite and Postgres)."""
    if target in ("snapshot", "delta"):
        k: ScopeKey = _need(key, "key")
        table, column = ("snapshots", "state") if target == "snapshot" else ("deltas", "segments")
        return (
            f"UPDATE {p}{table} SET {column} = {mark} WHERE kind = {mark} AND scope_id = {mark} "
            f"AND version = {mark}",
            (GARBAGE, k.kind, k.id, int(at)),
        )
    sid = _need(session_id, "session_id")
    if target == "event":
        return (
            f"UPDATE {p}events SET data = {mark} WHERE session_id = {mark} AND seq = {mark}",
            (GARBAGE, sid, int(at)),
        )
    return (
        f"UPDATE {p}runs SET messages = {mark} WHERE session_id = {mark} AND run_id = {mark}",
        (GARBAGE, sid, str(at)),
    )


@contextmanager
def memory_backend() -> Iterator[Harness]:
    with MemoryHarness() as harness:
        yield harness


@contextmanager
def sqlite_backend() -> Iterator[Harness]:
    directory = Path(tempfile.mkdtemp(prefix="statewise-conformance-"))
    try:
        with SqliteHarness(directory) as harness:
            yield harness
    finally:
        shutil.rmtree(directory, ignore_errors=True)


__all__ = ["GARBAGE", "MemoryHarness", "SqliteHarness", "memory_backend", "sqlite_backend"]
