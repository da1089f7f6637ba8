"""SQLite's commit path: the write lock, the commit, finding a commit that already
landed, and the WAL restart.

One path whatever the caller: a sync call's private loop runs it inline, an async caller
on a shared loop on the writer thread (`SqliteBase._run_async`); which thread, not which
SQL.
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from statewise.db import _codec
from statewise.db.base import (
    BaseDb,
    GroupEntry,
    GroupReads,
)
from statewise.db.records import (
    Commit,
    CommitResult,
    decode_commit_result,
    encode_commit_result,
)
from statewise.db.sqlite._reads import SqliteReads
from statewise.db.sqlite._schema import KEY_SPAN, event_text, listed, session_last_seq
from statewise.exceptions import (
    DatabaseUnavailableError,
    StorageError,
    VersionConflict,
)

T = TypeVar("T")


LARGE_VALUE = 64 * 1024
"""A text this long is bound through a statement of its own (see `_insert_rows`)."""


class _Landed(Exception):
    """A commit whose id landed before: what was written of it is rolled back, and the
    stored result answers it."""

    def __init__(self, result: CommitResult) -> None:
        super().__init__(result)
        self.result = result


def _insert_rows(
    conn: sqlite3.Connection,
    table: str,
    columns: str,
    rows: Sequence[tuple[Any, ...]],
    texts: tuple[int, ...],
    absent: tuple[int, ...] = (),
) -> int:
    """INSERT `rows` into `table`; the length of the large texts among them. `texts` are
    the positions of the columns that may hold a large text (the others never do);
    `absent` those where the row says NULL with '' (see `_insert_sql`).

    SQLite keeps its copy of a value bound to a cached statement until that statement is
    bound again. A multi-megabyte row (a big state write: its delta, snapshot and event)
    made the next small insert through the same statement pay for freeing that copy,
    milliseconds in each of the first runs after the write. Rows holding a large text go
    through a statement of their own instead, which is bound again at once with values
    that insert nothing, so the large copy is freed within the write that made it.
    """
    width = len(rows[0]) if rows else 0
    insert_sql, large_sql = _insert_sql(table, columns, width, absent)
    small: list[tuple[Any, ...]] = []
    large: list[tuple[Any, ...]] = []
    for row in rows:
        for i in texts:
            value = row[i]
            if value is not None and len(value) > LARGE_VALUE:
                large.append(row)
                break
        else:
            small.append(row)
    if len(small) == 1:
        conn.execute(insert_sql, small[0])
    elif small:
        conn.executemany(insert_sql, small)
    if not large:
        return 0
    written = 0
    for row in large:
        conn.execute(large_sql, (*row, 1))
        written += sum(len(value) for value in row if isinstance(value, str))
    conn.execute(large_sql, (*(None,) * width, 0))  # inserts nothing; frees the copies
    return written


@functools.lru_cache(maxsize=64)
def _insert_sql(
    table: str, columns: str, width: int, absent: tuple[int, ...] = ()
) -> tuple[str, str]:
    """The INSERT for rows of `width` values, and the one for a row holding a large text.

    At the positions in `absent` the rows give '' for NULL, which the INSERT turns back:
    the sqlite3 module binds None through its adapter lookup, far slower than a string,
    and most deltas carry no conflicts."""
    marks = ",".join("NULLIF(?, '')" if i in absent else "?" for i in range(width))
    return (
        f"INSERT INTO {table} ({columns}) VALUES ({marks})",
        f"INSERT INTO {table} ({columns}) SELECT {marks} WHERE ?",
    )


@functools.lru_cache(maxsize=8)
def _session_sql(p: str) -> str:
    """A session's key, the number of its last event, and whether a commit now (the
    parameter after the id) leaves it in its listing bucket."""
    return (
        f"SELECT session_key, {session_last_seq(p, 's')}, listed_at = {listed('?')} "
        f"FROM {p}sessions AS s WHERE session_id = ?"
    )


class SqliteCommits(SqliteReads):
    """`SqliteDb`'s writes: the write lock and the commit path."""

    loses_replies = False  # (a commit raises or lands: see `BaseDb.loses_replies`)

    def _writing_conn(self) -> sqlite3.Connection:
        """This thread's connection for a write, which checks the file itself once it holds
        the write lock; only a new connection (which would create an empty file where the
        database was) needs the check first (`_conn`)."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        return conn if conn is not None else self._conn

    def _busy(self, exc: sqlite3.Error) -> DatabaseUnavailableError:
        return DatabaseUnavailableError(
            f"SQLite database {self.db_file!r} is busy or unwritable: {exc}"
        )

    def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        conn = self._writing_conn()
        with self._write_lock:
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                raise self._busy(exc) from exc
            try:
                self._check_file()
                result = fn(conn)
                conn.execute("COMMIT")
                return result
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    def commit(self, commit: Commit) -> CommitResult:
        try:
            result, large = self._write(lambda conn: self._commit_in(conn, commit))
        except _Landed as landed:
            return landed.result
        except sqlite3.Error as exc:
            raise StorageError(f"SQLite commit to {self.db_file!r} failed: {exc}") from exc
        if large >= self._wal_pages_bytes:
            self._restart_wal()
        return result

    def commit_rebased_together(
        self,
        session_id: str,
        entries: Sequence[GroupEntry],
    ) -> list[CommitResult | Exception]:
        """In one write transaction (one sync of the WAL for all; see `BaseDb`): what
        landed since the oldest base is read once, each entry rebases onto that and the
        entries before it (`GroupReads`), and writes inside a savepoint of its own."""
        if len(entries) < 2:
            return BaseDb.commit_rebased_together(self, session_id, entries)
        outcomes: list[CommitResult | Exception] = []
        large = 0

        def write_all(conn: sqlite3.Connection) -> None:
            nonlocal large
            bases = [dict(bases_of()) for bases_of, _ in entries]
            reads = GroupReads(self.probe_tails(session_id, GroupReads.oldest(bases)))
            for held, (_, build) in zip(bases, entries, strict=True):
                try:
                    commit = build(reads.for_entry(held))
                except Exception as exc:  # that writer's (a strict key, a bad value)
                    outcomes.append(exc)
                    continue
                conn.execute("SAVEPOINT statewise_entry")
                try:
                    result, written = self._commit_in(conn, commit)
                except _Landed as landed:
                    conn.execute("ROLLBACK TO SAVEPOINT statewise_entry")
                    conn.execute("RELEASE SAVEPOINT statewise_entry")
                    outcomes.append(landed.result)
                    continue
                except Exception as exc:
                    conn.execute("ROLLBACK TO SAVEPOINT statewise_entry")
                    conn.execute("RELEASE SAVEPOINT statewise_entry")
                    outcomes.append(
                        exc
                        if isinstance(exc, VersionConflict | StorageError)
                        else StorageError(f"SQLite commit to {self.db_file!r} failed: {exc}")
                    )
                    continue
                conn.execute("RELEASE SAVEPOINT statewise_entry")
                large += written
                outcomes.append(result)
                if not result.already_landed:
                    reads.wrote(commit, time.time())

        try:
            self._write(write_all)
        except sqlite3.Error as exc:
            raise StorageError(f"SQLite commit to {self.db_file!r} failed: {exc}") from exc
        if large >= self._wal_pages_bytes:
            self._restart_wal()
        return outcomes

    def _restart_wal(self) -> None:
        """Start the WAL over now, after a commit big enough to have filled it.

        Such a commit copied the WAL into the database file as it ended (the autocheckpoint),
        and the next commit then starts the WAL from its beginning: with synchronous=FULL
        that means writing and syncing a new WAL header, one more fsync, which fell on the
        first small run after a big state write. Rewriting the header page here (SQLite
        skips a row update that changes nothing, not this) starts the WAL over while the
        big write is still the caller's cost. If it cannot run (the file is busy), the
        next commit starts the WAL over as before: nothing is lost.
        """

        def rewrite_header(conn: sqlite3.Connection) -> None:
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])
            conn.execute(f"PRAGMA user_version={version}")

        with contextlib.suppress(sqlite3.Error, DatabaseUnavailableError):
            self._write(rewrite_header)

    def _find_landed(self, conn: sqlite3.Connection, commit: Commit) -> CommitResult | None:
        """The stored result of `commit`'s id, if a commit with that id landed before."""
        row = conn.execute(
            f"SELECT result, created_at FROM {self.table_prefix}commits "
            f"WHERE session_id = ? AND commit_id = ?",
            (commit.session.session_id, commit.commit_id),
        ).fetchone()
        return decode_commit_result(commit, row[0], row[1]) if row is not None else None

    def _session_for(self, conn: sqlite3.Connection, commit: Commit, now: float) -> tuple[int, int]:
        """Create the commit's session row, or find it: the session's key, and its last
        sequence number after this commit."""
        p = self.table_prefix
        session = commit.session
        n_events = len(commit.events)
        if commit.create_session:
            try:
                row = conn.execute(
                    f"INSERT INTO {p}sessions (session_id, user_id, app_name, kind, "
                    f"created_at, updated_at, last_seq, metadata) VALUES (?,?,?,?,?,?,?,?) "
                    f"RETURNING session_key, last_seq",
                    (
                        session.session_id,
                        session.user_id,
                        session.app_name,
                        session.kind,
                        now,
                        now,
                        n_events,
                        _codec.dumps(session.metadata),
                    ),
                ).fetchone()
            except sqlite3.IntegrityError as exc:
                landed = self._find_landed(conn, commit) if commit.commit_id else None
                if landed is not None:
                    raise _Landed(landed) from None
                raise VersionConflict(f"session {session.session_id!r}", 0, None) from exc
            return row[0], row[1]
        found = conn.execute(_session_sql(p), (now, session.session_id)).fetchone()
        if found is None:
            raise VersionConflict(f"session {session.session_id!r}", 1, None)
        session_key, last_seq, same_bucket = found
        last_seq += n_events
        # The events written below carry the session's number and time; the row is
        # written only when they cannot (no events) or its listing bucket moves.
        if not n_events or not same_bucket:
            conn.execute(
                f"UPDATE {p}sessions SET last_seq = ?, updated_at = ? WHERE session_key = ?",
                (last_seq, now, session_key),
            )
        return session_key, last_seq

    def _commit_in(self, conn: sqlite3.Connection, commit: Commit) -> tuple[CommitResult, int]:
        """Apply `commit`; its result, and the length of the large texts it wrote."""
        p = self.table_prefix
        now = time.time()
        session = commit.session
        n_events = len(commit.events)
        session_key, last_seq = self._session_for(conn, commit, now)
        versions = {write.key: write.base_version + 1 for write in commit.writes}
        if any(version >= KEY_SPAN for version in versions.values()):
            # (its delta's key would fall in the next scope's range)
            raise StorageError(f"a scope of session {session.session_id!r} is out of versions")
        if commit.commit_id:
            # The id before the changes: an id that landed before fails here, and the
            # caller rolls back what the session row took (`_Landed`).
            try:
                conn.execute(
                    f"INSERT INTO {p}commits (session_id, commit_id, result, created_at) "
                    f"VALUES (?,?,?,?)",
                    (
                        session.session_id,
                        commit.commit_id,
                        encode_commit_result(versions, last_seq, n_events),
                        now,
                    ),
                )
            except sqlite3.IntegrityError:
                landed = self._find_landed(conn, commit)
                if landed is None:
                    raise
                raise _Landed(landed) from None
        large = 0
        for write in commit.writes:
            key = write.key
            new_version = write.base_version + 1
            if write.base_version == 0:
                # INSERT OR IGNORE: if the scope exists, the UPDATE below decides.
                conn.execute(
                    f"INSERT OR IGNORE INTO {p}scopes (kind, scope_id, version, updated_at) "
                    f"VALUES (?,?,0,?)",
                    (key.kind, key.id, now),
                )
            updated = conn.execute(
                f"UPDATE {p}scopes SET version = ?, tail_bytes = tail_bytes + ?, updated_at = ? "
                f"WHERE kind = ? AND scope_id = ? AND version = ? RETURNING scope_key",
                (new_version, write.delta_bytes, now, key.kind, key.id, write.base_version),
            ).fetchone()
            if updated is None:
                actual = conn.execute(
                    f"SELECT version FROM {p}scopes WHERE kind = ? AND scope_id = ?",
                    (key.kind, key.id),
                ).fetchone()
                raise VersionConflict(str(key), write.base_version, actual[0] if actual else None)
            large += _insert_rows(
                conn,
                f"{p}deltas",
                "delta_key, kind, scope_id, version, session_id, run_id, step, segments, "
                "conflicts, created_at",
                [
                    (
                        updated[0] * KEY_SPAN + new_version,
                        key.kind,
                        key.id,
                        new_version,
                        session.session_id,
                        commit.run_id,
                        commit.step,
                        write.segments_text,
                        _codec.dumps(write.conflicts) if write.conflicts else "",
                        now,
                    )
                ],
                (7, 8),
                (8,),
            )
            text = write.snapshot_text
            if text is not None:
                large += _insert_rows(
                    conn,
                    f"{p}snapshots",
                    "kind, scope_id, version, state",
                    [(key.kind, key.id, new_version, text)],
                    (3,),
                )
                conn.execute(
                    f"UPDATE {p}scopes SET snapshot_version = ?, snapshot_bytes = ?, "
                    f"tail_bytes = 0 WHERE scope_key = ?",
                    (new_version, len(text), updated[0]),
                )
        first_seq = last_seq - n_events + 1
        if commit.events:
            rows: list[tuple[Any, ...]] = [
                (
                    session_key,
                    session.session_id,
                    first_seq + i,
                    event.run_id,
                    event.type,
                    event_text(event, commit.writes),
                    now,
                )
                for i, event in enumerate(commit.events)
            ]
            large += _insert_rows(
                conn,
                f"{p}events",
                "session_key, session_id, seq, run_id, type, data, created_at",
                rows,
                (5,),
            )
        if commit.run is not None:
            run = commit.run
            conn.execute(
                f"INSERT INTO {p}runs (session_id, run_id, status, agent_name, input, content, "
                f"messages, metrics, error, created_at, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?,?) "
                f"ON CONFLICT (session_id, run_id) DO UPDATE SET status = excluded.status, "
                f"content = excluded.content, messages = excluded.messages, "
                f"metrics = excluded.metrics, error = excluded.error, "
                f"updated_at = excluded.updated_at",
                (
                    run.session_id,
                    run.run_id,
                    run.status,
                    run.agent_name,
                    run.input,
                    run.content,
                    _codec.dumps(run.messages),
                    _codec.dumps(run.metrics),
                    run.error,
                    run.created_at or now,
                    now,
                ),
            )
        result = CommitResult(
            versions=versions, first_seq=first_seq, last_seq=last_seq, committed_at=now
        )
        return result, large
