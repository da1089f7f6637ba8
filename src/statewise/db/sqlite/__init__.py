"""SQLite storage: the default, for one machine.

WAL mode so readers never block the writer; `BEGIN IMMEDIATE` so a commit takes the write
lock before it reads the versions it compares; a busy timeout so writers from other
processes wait instead of failing; one connection per thread (sqlite3 connections are
not shareable) and a process-wide lock so threads queue instead of spinning on SQLITE_BUSY.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from statewise.db.records import DeltaSegment
from statewise.db.retention import Retention

# Re-exported: the tuning constants tests and callers read from `statewise.db.sqlite`.
from statewise.db.sqlite._commit import LARGE_VALUE as LARGE_VALUE
from statewise.db.sqlite._schema import DELTA_REFERENCE as DELTA_REFERENCE
from statewise.db.sqlite._schema import WAL_AUTOCHECKPOINT as WAL_AUTOCHECKPOINT
from statewise.db.sqlite._sessions import PRUNE_BATCH as PRUNE_BATCH
from statewise.db.sqlite._sessions import SqliteSessions
from statewise.exceptions import StorageError


class SqliteDb(SqliteSessions):
    """Sessions in one SQLite file (`db_file`), or in memory with `db_file=":memory:"`.

    `synchronous="FULL"` (the default) makes every commit durable across power loss;
    `"NORMAL"` keeps the database consistent but may lose the last commits on power loss.
    """

    def __repr__(self) -> str:
        return f"SqliteDb(db_file={self.db_file!r})"


__all__ = ["DeltaSegment", "SqliteDb"]


class SqliteStorage(SqliteDb):
    """Agno's name for a SQLite store: `SqliteStorage(table_name="agent_sessions",
    db_file="tmp/data.db")` is `SqliteDb(db_file="tmp/data.db",
    table_prefix="agent_sessions_")`. Pass it as `Agent(storage=...)` or `db=...`.

    `db_url="sqlite:///path"` names the file instead of `db_file`; Agno's `mode` and
    `auto_upgrade_schema` are accepted and need nothing (schemas always migrate).
    """

    def __init__(
        self,
        table_name: str = "statewise",
        db_url: str | None = None,
        db_file: str | Path | None = None,
        *,
        mode: str | None = None,
        auto_upgrade_schema: bool = True,
        synchronous: Literal["FULL", "NORMAL", "OFF"] = "FULL",
        busy_timeout: float = 30.0,
        retention: Retention | None = None,
    ) -> None:
        if db_url is not None and db_file is not None:
            raise StorageError("SqliteStorage: give db_file= or db_url=, not both")
        if db_url is not None:
            if not db_url.startswith("sqlite:///"):
                raise StorageError(
                    f"SqliteStorage: db_url must look like sqlite:///path.db, got {db_url!r}"
                )
            db_file = db_url.removeprefix("sqlite:///") or ":memory:"
        if not table_name or not table_name.replace("_", "").isalnum():
            raise StorageError(
                f"SqliteStorage: table_name must be letters, digits and '_': {table_name!r}"
            )
        self.table_name = table_name
        super().__init__(
            db_file if db_file is not None else "statewise.db",
            table_prefix=f"{table_name}_",
            synchronous=synchronous,
            busy_timeout=busy_timeout,
            retention=retention,
        )
