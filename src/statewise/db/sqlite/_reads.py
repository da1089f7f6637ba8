"""SQLite's own reads (the probe, scopes and snapshots, where its deltas and events are, and
events that refer to a delta); what it shares with PostgreSQL is `statewise.db._sql_reads`."""

from __future__ import annotations

import contextlib
import functools
import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any

from statewise.db import _codec, _sql_reads
from statewise.db.rebuild import decode_segments, rebuilt_scope
from statewise.db.records import (
    EventRecord,
    ScopeKey,
    ScopeState,
    SessionRecord,
)
from statewise.db.sqlite._schema import (
    DELTA_REFERENCE,
    KEY_SPAN,
    SqliteBase,
    row_key,
    session_columns,
)
from statewise.exceptions import (
    CorruptRecordError,
)


@functools.lru_cache(maxsize=64)
def _probe_sql(p: str, scopes: int) -> str:
    """The session row (NULLs when there is none) and the version of each of `scopes`
    scopes (NULL when never written), in one row."""
    versions = "".join(
        f", (SELECT version FROM {p}scopes WHERE kind = ? AND scope_id = ?)" for _ in range(scopes)
    )
    return (
        f"SELECT {session_columns(p, 's')}{versions} FROM (SELECT ? AS id) AS wanted "
        f"LEFT JOIN {p}sessions AS s ON s.session_id = wanted.id"
    )


@functools.lru_cache(maxsize=8)
def _events_sql(p: str) -> str:
    """A session's events, found by its key (the index on (session_key, seq))."""
    return (
        f"SELECT seq, run_id, type, data, created_at FROM {p}events "
        f"WHERE session_key = (SELECT session_key FROM {p}sessions WHERE session_id = ?)"
    )


def _in_span(version: Any) -> bool:
    """Whether `version` can be a delta's (else its key would name another scope's row)."""
    return isinstance(version, int) and 0 < version < KEY_SPAN


@functools.lru_cache(maxsize=8)
def _deltas_sql(p: str) -> str:
    """A scope's deltas between two versions: a range of the deltas table's own keys (see
    `row_key`), found from the scope's key."""
    scope = f"(SELECT scope_key FROM {p}scopes WHERE kind = ? AND scope_id = ?)"
    return (
        f"SELECT version, session_id, run_id, step, segments, conflicts, created_at "
        f"FROM {p}deltas WHERE delta_key BETWEEN {row_key(scope, '?')} AND {row_key(scope, '?')}"
    )


@contextlib.contextmanager
def _one_read(conn: sqlite3.Connection) -> Iterator[None]:
    """One read transaction, so what is read together agrees. Inside this thread's write
    transaction (a group commit rebasing its writers reads there) that transaction
    already is one: a BEGIN there would fail, and a COMMIT would end the write early."""
    if conn.in_transaction:
        yield
        return
    conn.execute("BEGIN")
    try:
        yield
    finally:
        conn.execute("COMMIT")


class SqliteReads(_sql_reads.SqlReads, SqliteBase):
    """`SqliteDb`'s reads."""

    def probe(
        self, session_id: str, keys: Sequence[ScopeKey]
    ) -> tuple[SessionRecord | None, dict[ScopeKey, int]]:
        # One statement, so one snapshot of the database and one round through SQLite for
        # what was a query per scope: this runs at the start of every run.
        params: list[Any] = [part for key in keys for part in key]
        params.append(session_id)
        row = self._conn.execute(_probe_sql(self.table_prefix, len(keys)), params).fetchone()
        versions = {key: row[8 + i] or 0 for i, key in enumerate(keys)}
        return (_sql_reads.session_from_row(row) if row[0] is not None else None), versions

    def load_scopes(self, keys: Sequence[ScopeKey]) -> dict[ScopeKey, ScopeState]:
        p = self.table_prefix
        conn = self._conn
        result: dict[ScopeKey, ScopeState] = {}
        for key in keys:
            # One read transaction per scope so snapshot and deltas agree with the version.
            with _one_read(conn):
                row = conn.execute(
                    f"SELECT scope_key, version, snapshot_version, snapshot_bytes, tail_bytes "
                    f"FROM {p}scopes WHERE kind = ? AND scope_id = ?",
                    (key.kind, key.id),
                ).fetchone()
                if row is None:
                    result[key] = ScopeState(key=key)
                    continue
                scope_key, version, snapshot_version, snapshot_bytes, tail_bytes = row
                snapshot_text = None
                if snapshot_version:
                    found = conn.execute(
                        f"SELECT state FROM {p}snapshots "
                        f"WHERE kind = ? AND scope_id = ? AND version = ?",
                        (key.kind, key.id, snapshot_version),
                    ).fetchone()
                    snapshot_text = found[0] if found else None
                first = scope_key * KEY_SPAN
                deltas = conn.execute(
                    f"SELECT version, segments FROM {p}deltas "
                    f"WHERE delta_key BETWEEN ? AND ? ORDER BY delta_key",
                    (first + snapshot_version + 1, first + KEY_SPAN - 1),
                ).fetchall()
            result[key] = rebuilt_scope(
                key, version, snapshot_version, snapshot_bytes, tail_bytes, snapshot_text, deltas
            )
        return result

    def _deltas_between(
        self, key: ScopeKey, after_version: int, upto_version: int | None
    ) -> tuple[str, list[Any]]:
        # (clamped into the scope's own range of delta keys)
        low = min(max(after_version + 1, 0), KEY_SPAN)
        high = KEY_SPAN - 1 if upto_version is None else min(max(upto_version, -1), KEY_SPAN - 1)
        sql = _deltas_sql(self.table_prefix) + " ORDER BY delta_key"
        return sql, [key.kind, key.id, low, key.kind, key.id, high]

    def read_snapshot(self, key: ScopeKey, at_or_before: int) -> tuple[int, dict[str, Any]]:
        row = self._conn.execute(
            _sql_reads.snapshot_query(self._dialect), (key.kind, key.id, at_or_before)
        ).fetchone()
        if row is None:
            return 0, {}
        try:
            return row[0], _codec.loads(row[1])
        except ValueError as exc:
            raise CorruptRecordError(f"{key}: snapshot at version {row[0]} is not JSON") from exc

    def _fetch_all(self, sql: str, params: Sequence[Any]) -> list[Any]:
        return self._conn.execute(sql, params).fetchall()

    def _fetch_one(self, sql: str, params: Sequence[Any]) -> Any:
        return self._conn.execute(sql, params).fetchone()

    def _events_sql(self) -> str:
        return _events_sql(self.table_prefix)

    def _events_from(
        self, session_id: str, sql: str, params: Sequence[Any], newest_first: bool
    ) -> list[EventRecord]:
        conn = self._conn
        # One read transaction, so the deltas that events refer to are read with them.
        with _one_read(conn):
            rows = conn.execute(sql, params).fetchall()
            if newest_first:
                rows.reverse()
            return [self._event_from_row(conn, session_id, *row) for row in rows]

    def _event_from_row(
        self,
        conn: sqlite3.Connection,
        session_id: str,
        seq: int,
        run_id: str | None,
        type_: str,
        data: str | bytes,
        created_at: float,
    ) -> EventRecord:
        reference = isinstance(data, str) and data.startswith(DELTA_REFERENCE)
        decoded = _sql_reads.event_data(session_id, seq, data[1:] if reference else data)
        if reference:
            decoded["segments"] = self._referenced_segments(conn, session_id, seq, decoded)
        return EventRecord(
            session_id=session_id,
            seq=seq,
            run_id=run_id,
            type=type_,
            data=decoded,
            created_at=created_at,
        )

    def _referenced_segments(
        self, conn: sqlite3.Connection, session_id: str, seq: int, data: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """The segments of the delta a `state_delta` event refers to (see `event_text`)."""
        p = self.table_prefix
        scope = f"(SELECT scope_key FROM {p}scopes WHERE kind = ? AND scope_id = ?)"
        version = data.get("version")
        row = conn.execute(
            f"SELECT segments FROM {p}deltas WHERE delta_key = {row_key(scope, '?')}",
            (data.get("scope"), data.get("scope_id"), version if _in_span(version) else 0),
        ).fetchone()
        if row is None:
            raise CorruptRecordError(
                f"session {session_id!r}: event {seq} refers to a delta that is missing"
            )
        key = ScopeKey(data["scope"], data["scope_id"])
        return [s.to_dict() for s in decode_segments(key, data["version"], row[0])]
