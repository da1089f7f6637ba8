"""SQLite run leases: which owner is running a paused run."""

from __future__ import annotations

import sqlite3
import time

from statewise.db.sqlite._commit import SqliteCommits
from statewise.exceptions import (
    StorageError,
)


class SqliteLeases(SqliteCommits):
    """`SqliteDb`'s run leases."""

    def claim_run(self, session_id: str, run_id: str, owner: str, ttl: float) -> bool:
        # (Every client of a SQLite file runs on the machine holding it: its clock is the
        # database's.)
        p = self.table_prefix
        now = time.time()

        def claim(conn: sqlite3.Connection) -> bool:
            row = conn.execute(
                f"INSERT INTO {p}run_leases (session_id, run_id, owner, expires_at) "
                f"VALUES (?,?,?,?) ON CONFLICT (session_id, run_id) DO UPDATE SET "
                f"owner = excluded.owner, expires_at = excluded.expires_at "
                f"WHERE {p}run_leases.owner = excluded.owner OR {p}run_leases.expires_at <= ? "
                f"RETURNING owner",
                (session_id, run_id, owner, now + ttl, now),
            ).fetchone()
            return row is not None

        try:
            return self._write(claim)
        except sqlite3.Error as exc:
            raise StorageError(f"SQLite run lease on {self.db_file!r} failed: {exc}") from exc

    def release_run(self, session_id: str, run_id: str, owner: str) -> None:
        p = self.table_prefix
        self._write(
            lambda conn: conn.execute(
                f"DELETE FROM {p}run_leases WHERE session_id = ? AND run_id = ? AND owner = ?",
                (session_id, run_id, owner),
            )
        )
