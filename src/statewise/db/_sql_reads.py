"""The read SQL and row decoding that SQLite and PostgreSQL share.

The two backends hold the same tables with the same columns; what their statements differ
in is small and listed in `Dialect`. The statements that really differ (SQLite finds a
session's events and a scope's deltas by integer keys, PostgreSQL by id and version; SQLite
events may refer to a delta) stay with their backend, which passes its part in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from statewise.db import _codec
from statewise.db.base import readable_records
from statewise.db.listing import decode_cursor
from statewise.db.rebuild import decode_delta_row
from statewise.db.records import DeltaRecord, EventRecord, RunRecord, ScopeKey, SessionRecord
from statewise.exceptions import CorruptRecordError

SESSION_COLUMNS = "session_id, user_id, app_name, kind, created_at, updated_at, last_seq, metadata"
RUN_COLUMNS = (
    "run_id, status, agent_name, input, content, messages, metrics, error, created_at, updated_at"
)


@dataclass(frozen=True)
class Dialect:
    """How one backend spells what the shared statements need (the defaults: SQLite's,
    but where a field says otherwise)."""

    prefix: str
    """Put before a table's name: SQLite's table prefix, or PostgreSQL's `"schema".`."""
    listed: Callable[[str], str]
    """SQL of the listing bucket of an SQL expression (see `statewise.db.listing`)."""
    session_columns: str = SESSION_COLUMNS
    """SQL of `SESSION_COLUMNS` of a row of the sessions table (SQLite's `last_seq` and
    `updated_at` are the row's or its last event's: see `statewise.db.sqlite._schema`)."""
    updated_at: str = "updated_at"
    """SQL of a row of the sessions table's `updated_at`, likewise."""
    p: str = "?"
    """The parameter placeholder."""
    cursor_time: str = "?"
    """The placeholder of a cursor's time, as `listed` needs it."""
    row_id: str = "rowid"
    """The runs table's column that orders runs created at the same time, so that a page
    of runs ends at a place the next can start from."""
    session_order: str = "session_id"
    """How session ids compare, so that both backends page them in the same order."""
    greatest: str = "max"
    """The SQL function of the larger of two values."""
    arrays: bool = False
    """Whether a list is one parameter (PostgreSQL's arrays) rather than one a value."""
    lock: str = ""
    """Appended to a SELECT of a row the statements after it update: PostgreSQL's writers
    run side by side and must take turns on the row; SQLite's one writer holds the file."""
    text: Callable[[str | None], str | None] | None = None
    """Turns a run's stored free text (input, content, error) back into what was written:
    PostgreSQL's `text` cannot hold every string (see `statewise.db._pg_text`)."""

    def any_of(self, column: str, values: Sequence[str]) -> tuple[str, list[Any]]:
        """SQL that `column` is one of `values`, and its parameters."""
        if not self.arrays:
            return f"{column} IN ({','.join('?' * len(values))})", list(values)
        return f"{column} = ANY(%s::text[])", [list(values)]


def session_from_row(row: Sequence[Any]) -> SessionRecord:
    """A session from a row of `SESSION_COLUMNS`."""
    try:
        metadata = _codec.loads(row[7]) if row[7] else {}
    except ValueError as exc:
        raise CorruptRecordError(f"session {row[0]!r}: metadata is not JSON") from exc
    return SessionRecord(
        session_id=row[0],
        user_id=row[1],
        app_name=row[2],
        kind=row[3],
        created_at=row[4],
        updated_at=row[5],
        last_seq=row[6],
        metadata=metadata,
    )


def run_from_row(
    session_id: str, row: Sequence[Any], text: Callable[[str | None], str | None] | None = None
) -> RunRecord:
    """A run from a row of `RUN_COLUMNS` (`text` as in `Dialect.text`)."""
    try:
        messages = _codec.loads(row[5])
        metrics = _codec.loads(row[6])
    except ValueError as exc:
        raise CorruptRecordError(
            f"session {session_id!r}: run {row[0]!r} is not valid JSON"
        ) from exc
    input_, content, error = row[3], row[4], row[7]
    if text is not None:
        input_, content, error = text(input_), text(content), text(error)
    return RunRecord(
        session_id=session_id,
        run_id=row[0],
        status=row[1],
        agent_name=row[2],
        input=input_,
        content=content,
        messages=messages,
        metrics=metrics,
        error=error,
        created_at=row[8],
        updated_at=row[9],
    )


def event_data(session_id: str, seq: int, data: str | bytes) -> Any:
    """An event's stored JSON, decoded."""
    try:
        return _codec.loads(data)
    except ValueError as exc:
        raise CorruptRecordError(f"session {session_id!r}: event {seq} is not JSON") from exc


def and_given(d: Dialect, sql: str, params: list[Any], tests: Sequence[tuple[str, Any]]) -> str:
    """`sql` and a condition for each test (SQL that a parameter completes, and the
    parameter) whose parameter is not None, which is appended to `params`: a filter not
    asked for is left out of the statement rather than written to match anything."""
    for test, value in tests:
        if value is not None:
            sql += f" AND {test} {d.p}"
            params.append(value)
    return sql


def snapshot_query(d: Dialect) -> str:
    """A scope's newest snapshot at or before a version (kind, scope id, version)."""
    return (
        f"SELECT version, state FROM {d.prefix}snapshots WHERE kind = {d.p} "
        f"AND scope_id = {d.p} AND version <= {d.p} ORDER BY version DESC LIMIT 1"
    )


class SqlReads:
    """The reads of deltas, events, runs and sessions both SQL backends make, written once
    over what each does its own way: running a statement (`_fetch_all`, `_fetch_one`),
    finding a scope's deltas (`_deltas_between`) and a session's events (`_events_sql`),
    and turning event rows into events (`_events_from`)."""

    _dialect: Dialect

    def _fetch_all(self, sql: str, params: Sequence[Any]) -> list[Any]:
        raise NotImplementedError

    def _fetch_one(self, sql: str, params: Sequence[Any]) -> Any:
        raise NotImplementedError

    def _deltas_between(
        self, key: ScopeKey, after_version: int, upto_version: int | None
    ) -> tuple[str, list[Any]]:
        """SELECT version, session_id, run_id, step, segments, conflicts, created_at of
        `key`'s deltas after `after_version` up to `upto_version` (None: the last), in
        version order, and its parameters."""
        raise NotImplementedError

    def read_deltas(
        self,
        key: ScopeKey,
        *,
        after_version: int = 0,
        upto_version: int | None = None,
        limit: int | None = None,
    ) -> list[DeltaRecord]:
        sql, params = self._deltas_between(key, after_version, upto_version)
        if limit is not None:
            sql += f" LIMIT {self._dialect.p}"
            params.append(limit)
        return [decode_delta_row(key, *row) for row in self._fetch_all(sql, params)]

    def _events_sql(self) -> str:
        """SELECT seq, run_id, type, data, created_at of the events of the session whose
        id is its one parameter, ending in a WHERE clause more conditions can join."""
        raise NotImplementedError

    def _events_from(
        self, session_id: str, sql: str, params: Sequence[Any], newest_first: bool
    ) -> list[EventRecord]:
        """The events of `sql`'s rows, oldest first."""
        raise NotImplementedError

    def read_events(
        self,
        session_id: str,
        *,
        after: int | None = None,
        before: int | None = None,
        limit: int | None = None,
        types: Sequence[str] | None = None,
        run_id: str | None = None,
    ) -> list[EventRecord]:
        d = self._dialect
        sql = self._events_sql()
        params: list[Any] = [session_id]
        sql = and_given(d, sql, params, [("seq >", after), ("seq <", before), ("run_id =", run_id)])
        if types:
            among, values = d.any_of("type", types)
            sql += f" AND {among}"
            params.extend(values)
        # The last `limit` events are found from the end, then turned round.
        newest_first = limit is not None and after is None
        sql += " ORDER BY seq DESC" if newest_first else " ORDER BY seq"
        if limit is not None:
            sql += f" LIMIT {d.p}"
            params.append(limit)
        return self._events_from(session_id, sql, params, newest_first)

    def read_runs(
        self, session_id: str, *, limit: int | None = None, status: str | None = None
    ) -> list[RunRecord]:
        d = self._dialect
        sql = f"SELECT {RUN_COLUMNS} FROM {d.prefix}runs WHERE session_id = {d.p}"
        params: list[Any] = [session_id]
        sql = and_given(d, sql, params, [("status =", status)])
        sql += f" ORDER BY created_at DESC, {d.row_id} DESC"
        if limit is not None:
            sql += f" LIMIT {d.p}"
            params.append(limit)
        rows = self._fetch_all(sql, params)
        return [run_from_row(session_id, row, d.text) for row in reversed(rows)]

    def iter_runs(self, session_id: str, *, page: int = 500) -> Iterator[RunRecord]:
        # A page seeks the index from where the last one ended, so a session with many
        # runs costs no more a page than one with few.
        d = self._dialect
        sql = (
            f"SELECT {RUN_COLUMNS}, {d.row_id} FROM {d.prefix}runs WHERE session_id = {d.p} "
            f"AND (created_at, {d.row_id}) > ({d.p}, {d.p}) "
            f"ORDER BY created_at, {d.row_id} LIMIT {d.p}"
        )
        after: tuple[float, int] = (float("-inf"), -1)
        while True:
            rows = self._fetch_all(sql, (session_id, *after, page))
            for row in rows:
                yield run_from_row(session_id, row[:-1], d.text)
            if len(rows) < page:
                return
            after = (rows[-1][-3], rows[-1][-1])  # (created_at, row id) of the last one

    def get_run(self, session_id: str, run_id: str) -> RunRecord | None:
        d = self._dialect
        row = self._fetch_one(
            f"SELECT {RUN_COLUMNS} FROM {d.prefix}runs WHERE session_id = {d.p} AND run_id = {d.p}",
            (session_id, run_id),
        )
        return run_from_row(session_id, row, d.text) if row else None

    def list_sessions(
        self,
        *,
        user_id: str | None = None,
        app_name: str | None = None,
        limit: int = 50,
        offset: int = 0,
        cursor: str | None = None,
    ) -> list[SessionRecord]:
        d = self._dialect
        sql = f"SELECT {d.session_columns} FROM {d.prefix}sessions WHERE 1=1"
        params: list[Any] = []
        sql = and_given(d, sql, params, [("user_id =", user_id), ("app_name =", app_name)])
        if cursor is not None:
            # Seeks the listing index to the cursor's bucket (see `statewise.db.listing`).
            updated_at, session_id = decode_cursor(cursor)
            bucket = d.listed(d.cursor_time)
            sql += (
                f" AND listed_at <= {bucket} AND (listed_at < {bucket} OR {d.updated_at} < {d.p}"
                f" OR ({d.updated_at} = {d.p} AND {d.session_order} > {d.p}))"
            )
            params += [updated_at, updated_at, updated_at, updated_at, session_id]
        sql += (
            f" ORDER BY listed_at DESC, {d.updated_at} DESC, {d.session_order} "
            f"LIMIT {d.p} OFFSET {d.p}"
        )
        params.extend([limit, offset])
        return readable_records(self._fetch_all(sql, params), session_from_row)
