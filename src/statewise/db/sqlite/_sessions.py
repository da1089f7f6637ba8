"""SQLite whole-session operations: delete, prune, compaction and import."""

from __future__ import annotations

import functools
import sqlite3
import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from statewise.db import _codec, _sql_retention
from statewise.db.base import (
    to_timestamp_cutoff,
    validate_id,
)
from statewise.db.records import (
    DeltaRecord,
    EventRecord,
    RunRecord,
    SessionRecord,
)
from statewise.db.retention import (
    Compaction,
    CompactionPlan,
    Horizon,
)
from statewise.db.sqlite import _retention
from statewise.db.sqlite._leases import SqliteLeases
from statewise.db.sqlite._schema import KEY_SPAN, listed, row_key, session_updated_at
from statewise.exceptions import (
    StorageError,
)

PRUNE_BATCH = 500
"""Sessions `prune_sessions` deletes per transaction (SQLite binds up to 32,766 values)."""


class SqliteSessions(SqliteLeases):
    """`SqliteDb`'s whole-session operations."""

    def delete_session(self, session_id: str) -> bool:
        validate_id(session_id)
        return bool(self._write(lambda conn: self._delete_sessions(conn, [session_id])))

    def _delete_sessions(self, conn: sqlite3.Connection, ids: Sequence[str]) -> int:
        """Delete these sessions with their state, events and runs in the caller's
        transaction; how many sessions there were."""
        p = self.table_prefix
        marks = ",".join("?" * len(ids))
        keys = conn.execute(
            f"DELETE FROM {p}sessions WHERE session_id IN ({marks}) RETURNING session_key", ids
        ).fetchall()
        scope_keys = conn.execute(
            f"DELETE FROM {p}scopes WHERE kind = 'session' AND scope_id IN ({marks}) "
            f"RETURNING scope_key",
            ids,
        ).fetchall()
        conn.executemany(f"DELETE FROM {p}events WHERE session_key = ?", keys)
        # Each scope's deltas are a range of rowids (see `row_key`).
        conn.executemany(
            f"DELETE FROM {p}deltas WHERE delta_key BETWEEN {row_key('?', '0')} "
            f"AND {row_key('?', str(KEY_SPAN - 1))}",
            [(key, key) for (key,) in scope_keys],
        )
        for table in ("runs", "commits", "run_leases", "horizons"):
            conn.execute(f"DELETE FROM {p}{table} WHERE session_id IN ({marks})", ids)
        conn.execute(
            f"DELETE FROM {p}snapshots WHERE kind = 'session' AND scope_id IN ({marks})", ids
        )
        return len(keys)

    def read_horizon(self, session_id: str) -> Horizon:
        return _sql_retention.read_horizon(self._conn, self._dialect, session_id)

    def write_compaction(self, plan: CompactionPlan) -> Compaction | None:
        try:
            return self._write(
                lambda conn: _retention.write_compaction(conn, self.table_prefix, plan)
            )
        except sqlite3.Error as exc:
            raise StorageError(f"SQLite compaction in {self.db_file!r} failed: {exc}") from exc

    def prune_sessions(
        self, *, older_than: float | timedelta | datetime, user_id: str | None = None
    ) -> int:
        cutoff = to_timestamp_cutoff(older_than, time.time())
        # The listing index finds the old buckets; the sessions updated since are not read.
        p = self.table_prefix
        sql = (
            f"SELECT session_id FROM {p}sessions AS s "
            f"WHERE listed_at <= {listed('?')} AND {session_updated_at(p, 's')} < ?"
        )
        params: list[Any] = [cutoff, cutoff]
        if user_id is not None:
            sql += " AND user_id = ?"
            params.append(user_id)
        ids = [row[0] for row in self._conn.execute(sql, params).fetchall()]
        # In batches: one durable commit per PRUNE_BATCH sessions, not one per session.
        pruned = 0
        for start in range(0, len(ids), PRUNE_BATCH):
            batch = ids[start : start + PRUNE_BATCH]
            pruned += self._write(functools.partial(self._prune_batch, ids=batch, cutoff=cutoff))
        return pruned

    def _prune_batch(self, conn: sqlite3.Connection, ids: Sequence[str], cutoff: float) -> int:
        """Delete the sessions of `ids` that are still not updated since the cutoff: the
        ids were read before this transaction, and a session committed to meanwhile stays."""
        marks = ",".join("?" * len(ids))
        p = self.table_prefix
        still = [
            row[0]
            for row in conn.execute(
                f"SELECT session_id FROM {p}sessions AS s "
                f"WHERE session_id IN ({marks}) AND {session_updated_at(p, 's')} < ?",
                [*ids, cutoff],
            ).fetchall()
        ]
        return self._delete_sessions(conn, still) if still else 0

    def import_records(
        self,
        session: SessionRecord,
        deltas: Sequence[DeltaRecord],
        events: Sequence[EventRecord],
        runs: Sequence[RunRecord],
    ) -> None:
        p = self.table_prefix

        def write(conn: sqlite3.Connection) -> None:
            try:
                (session_key,) = conn.execute(
                    f"INSERT INTO {p}sessions (session_id, user_id, app_name, kind, created_at, "
                    f"updated_at, last_seq, metadata) VALUES (?,?,?,?,?,?,?,?) "
                    f"RETURNING session_key",
                    (
                        session.session_id,
                        session.user_id,
                        session.app_name,
                        session.kind,
                        session.created_at,
                        session.updated_at,
                        session.last_seq,
                        _codec.dumps(session.metadata),
                    ),
                ).fetchone()
            except sqlite3.IntegrityError as exc:
                raise StorageError(
                    f"cannot import session {session.session_id!r}: it already exists"
                ) from exc
            if deltas:
                (scope_key,) = conn.execute(
                    f"INSERT INTO {p}scopes (kind, scope_id, version, updated_at) "
                    f"VALUES ('session', ?, ?, ?) RETURNING scope_key",
                    (
                        session.session_id,
                        max(delta.version for delta in deltas),
                        session.updated_at,
                    ),
                ).fetchone()
            for delta in deltas:
                conn.execute(
                    f"INSERT INTO {p}deltas (delta_key, kind, scope_id, version, session_id, "
                    f"run_id, step, segments, conflicts, created_at) "
                    f"VALUES (?,?,?,?,?,?,?,?,?,?)",
                    (
                        scope_key * KEY_SPAN + delta.version,
                        "session",
                        session.session_id,
                        delta.version,
                        session.session_id,
                        delta.run_id,
                        delta.step,
                        _codec.dumps([s.to_dict() for s in delta.segments]),
                        _codec.dumps(delta.conflicts) if delta.conflicts else None,
                        delta.created_at,
                    ),
                )
            conn.executemany(
                f"INSERT INTO {p}events (session_key, session_id, seq, run_id, type, data, "
                f"created_at) VALUES (?,?,?,?,?,?,?)",
                [
                    (
                        session_key,
                        session.session_id,
                        e.seq,
                        e.run_id,
                        e.type,
                        _codec.dumps(e.data),
                        e.created_at,
                    )
                    for e in events
                ],
            )
            conn.executemany(
                f"INSERT INTO {p}runs (session_id, run_id, status, agent_name, input, content, "
                f"messages, metrics, error, created_at, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                [
                    (
                        session.session_id,
                        r.run_id,
                        r.status,
                        r.agent_name,
                        r.input,
                        r.content,
                        _codec.dumps(r.messages),
                        _codec.dumps(r.metrics),
                        r.error,
                        r.created_at,
                        r.updated_at,
                    )
                    for r in runs
                ],
            )

        self._write(write)
