"""SQLite storage: the default, for one machine.

WAL mode so readers never block the writer; `BEGIN IMMEDIATE` so a commit takes the write
lock before it reads the versions it compares (a commit sent as one statement, see
`_sqlite_commit`, takes it as that statement starts); a busy timeout so writers from other
processes wait instead of failing; one connection per thread (sqlite3 connections are
not shareable) and a process-wide lock so threads queue instead of spinning on SQLITE_BUSY.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal, ParamSpec, TypeVar

from statewise._workers import Workers
from statewise.db import _codec, _sqlite_commit, _sqlite_retention
from statewise.db.base import (
    BaseDb,
    GroupEntry,
    GroupReads,
    ScopesRead,
    on_private_loop,
    readable_records,
    to_timestamp_cutoff,
    validate_id,
)
from statewise.db.listing import LISTED_EVERY, decode_cursor
from statewise.db.records import (
    Commit,
    CommitResult,
    DeltaRecord,
    DeltaSegment,
    EventRecord,
    NewEvent,
    RunRecord,
    ScopeKey,
    ScopeState,
    ScopeWrite,
    SessionRecord,
    applied_result,
    decode_commit_result,
    encode_commit_result,
)
from statewise.db.replay import decode_delta_row, decode_segments, replayed_scope
from statewise.db.retention import (
    Compaction,
    CompactionPlan,
    Horizon,
    Retention,
    default_retention,
)
from statewise.db.threads import run_blocking
from statewise.exceptions import (
    CorruptRecordError,
    DatabaseUnavailableError,
    SchemaVersionError,
    StorageError,
    VersionConflict,
)

P = ParamSpec("P")
T = TypeVar("T")


LARGE_VALUE = 64 * 1024
"""A text this long is bound through a statement of its own (see `_insert_rows`)."""

LAST_SEQS_KEPT = 4096
"""Sessions whose last sequence number a `SqliteDb` remembers (see `_note_last_seq`)."""

WAL_AUTOCHECKPOINT = 1000
"""Pages the WAL holds before the commit that passes this many copies them into the
database file (SQLite's default, set explicitly because `SqliteDb.commit` counts on it)."""


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
    and most events carry no commit id."""
    marks = ",".join("NULLIF(?, '')" if i in absent else "?" for i in range(width))
    return (
        f"INSERT INTO {table} ({columns}) VALUES ({marks})",
        f"INSERT INTO {table} ({columns}) SELECT {marks} WHERE ?",
    )


DELTA_REFERENCE = "@"
"""Starts the stored text of a `state_delta` event whose segments are read from its delta
row (no JSON text starts with it)."""


def _event_text(event: NewEvent, writes: Sequence[ScopeWrite]) -> str:
    """An event's data as stored. A `state_delta` event carrying exactly the ops its commit
    writes to a scope's delta (nothing in it was redacted) is stored without them, as a
    reference to that delta: a big state write is then stored twice (delta and snapshot),
    not three times, and its ops are encoded once. `read_events` puts them back."""
    data = event.data
    if event.type == "state_delta":
        for write in writes:
            if (
                data.get("scope") == write.key.kind
                and data.get("scope_id") == write.key.id
                and data.get("version") == write.base_version + 1
                and _same_segments(data.get("segments"), write.segments)
            ):
                rest = {name: value for name, value in data.items() if name != "segments"}
                return DELTA_REFERENCE + _codec.dumps(rest)
    return _codec.dumps(data)


def _same_segments(segments: Any, stored: Sequence[DeltaSegment]) -> bool:
    """Whether an event's `segments` are the stored segments' own op objects (a redacted
    op is a new object, so an event showing less than the delta never matches)."""
    return (
        isinstance(segments, list)
        and len(segments) == len(stored)
        and all(
            isinstance(shown, dict)
            and shown.keys() == {"source", "ops"}
            and shown["source"] == segment.source
            and isinstance(shown["ops"], list)
            and len(shown["ops"]) == len(segment.ops)
            and all(a is b for a, b in zip(shown["ops"], segment.ops, strict=True))
            for shown, segment in zip(segments, stored, strict=True)
        )
    )


@functools.lru_cache(maxsize=64)
def _probe_sql(p: str, scopes: int) -> str:
    """The session row (NULLs when there is none) and the version of each of `scopes`
    scopes (NULL when never written), in one row."""
    versions = "".join(
        f", (SELECT version FROM {p}scopes WHERE kind = ? AND scope_id = ?)" for _ in range(scopes)
    )
    return (
        f"SELECT s.session_id, s.user_id, s.app_name, s.kind, s.created_at, s.updated_at, "
        f"s.last_seq, s.metadata{versions} FROM (SELECT ? AS id) AS wanted "
        f"LEFT JOIN {p}sessions AS s ON s.session_id = wanted.id"
    )


def _migrations(p: str) -> list[str]:
    """Schema changes in order; the list index + 1 is the schema version."""
    return [
        f"""
        CREATE TABLE {p}sessions (
            session_id TEXT PRIMARY KEY,
            user_id TEXT,
            app_name TEXT,
            kind TEXT NOT NULL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            last_seq INTEGER NOT NULL DEFAULT 0,
            metadata TEXT NOT NULL DEFAULT '{{}}'
        );
        CREATE INDEX {p}sessions_by_user ON {p}sessions (user_id, updated_at);
        CREATE INDEX {p}sessions_by_time ON {p}sessions (updated_at);
        CREATE TABLE {p}scopes (
            kind TEXT NOT NULL,
            scope_id TEXT NOT NULL,
            version INTEGER NOT NULL,
            snapshot_version INTEGER NOT NULL DEFAULT 0,
            snapshot_bytes INTEGER NOT NULL DEFAULT 0,
            tail_bytes INTEGER NOT NULL DEFAULT 0,
            updated_at REAL NOT NULL,
            PRIMARY KEY (kind, scope_id)
        ) WITHOUT ROWID;
        CREATE TABLE {p}snapshots (
            kind TEXT NOT NULL,
            scope_id TEXT NOT NULL,
            version INTEGER NOT NULL,
            state TEXT NOT NULL,
            PRIMARY KEY (kind, scope_id, version)
        ) WITHOUT ROWID;
        CREATE TABLE {p}deltas (
            kind TEXT NOT NULL,
            scope_id TEXT NOT NULL,
            version INTEGER NOT NULL,
            session_id TEXT,
            run_id TEXT,
            step INTEGER,
            segments TEXT NOT NULL,
            conflicts TEXT,
            created_at REAL NOT NULL,
            PRIMARY KEY (kind, scope_id, version)
        ) WITHOUT ROWID;
        CREATE TABLE {p}events (
            session_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            run_id TEXT,
            type TEXT NOT NULL,
            data TEXT NOT NULL,
            created_at REAL NOT NULL,
            PRIMARY KEY (session_id, seq)
        ) WITHOUT ROWID;
        CREATE TABLE {p}runs (
            session_id TEXT NOT NULL,
            run_id TEXT NOT NULL,
            status TEXT NOT NULL,
            agent_name TEXT,
            input TEXT,
            content TEXT,
            messages TEXT NOT NULL DEFAULT '[]',
            metrics TEXT NOT NULL DEFAULT '{{}}',
            error TEXT,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            PRIMARY KEY (session_id, run_id)
        );
        CREATE INDEX {p}runs_by_time ON {p}runs (session_id, created_at);
        """,
        # 2: large payloads out of WITHOUT ROWID tables. Those keep whole rows in their
        # B-tree, and a seek that meets a multi-megabyte row reads all of it, so every
        # insert near a big snapshot, delta or event paid for it. Rowid tables with a
        # unique index for the key keep the index small whatever the rows hold.
        _to_rowid_table(p, "snapshots", "kind, scope_id, version, state", "kind, scope_id, version")
        + _to_rowid_table(
            p,
            "deltas",
            "kind, scope_id, version, session_id, run_id, step, segments, conflicts, created_at",
            "kind, scope_id, version",
        )
        + _to_rowid_table(
            p, "events", "session_id, seq, run_id, type, data, created_at", "session_id, seq"
        ),
        # 3: commit ids, stored with each commit so a retried commit is never applied twice.
        f"""
        CREATE TABLE {p}commits (
            session_id TEXT NOT NULL,
            commit_id TEXT NOT NULL,
            result TEXT NOT NULL,
            created_at REAL NOT NULL,
            PRIMARY KEY (session_id, commit_id)
        ) WITHOUT ROWID;
        """,
        # 4: run leases: who is running (or resuming) a run, until when.
        f"""
        CREATE TABLE {p}run_leases (
            session_id TEXT NOT NULL,
            run_id TEXT NOT NULL,
            owner TEXT NOT NULL,
            expires_at REAL NOT NULL,
            PRIMARY KEY (session_id, run_id)
        ) WITHOUT ROWID;
        """,
        # 5: no index on sessions.updated_at. Every commit moves it (it stamps the
        # session), so both indexes holding it cost a page each in every commit's WAL write,
        # two of the ten or so a commit writes; they served only list_sessions' order and
        # prune_sessions, which now sort and scan the sessions table (one row per session)
        # or, for one user, that user's sessions, found by an index that never moves.
        f"""
        DROP INDEX IF EXISTS {p}sessions_by_user;
        DROP INDEX IF EXISTS {p}sessions_by_time;
        CREATE INDEX IF NOT EXISTS {p}sessions_of_user ON {p}sessions (user_id);
        """,
        # 6: a `state_delta` event may be stored as a reference to its delta (see
        # `_event_text`); nothing to change in existing rows, but a statewise that does not
        # know the form must refuse the database instead of reading those events as corrupt.
        "",
        # 7: a commit's id is stored in the row of its last event, which the commit writes
        # anyway, instead of a `commits` row of its own: one page fewer written and synced
        # per commit. The session row keeps the greatest id landed, so a new id (greater:
        # ids are made in time order) needs no lookup (see `SqliteDb._session_for`). Ids
        # stored before stay in `commits`, and every id up to the greatest of them is
        # looked up there; a statewise that reads only `commits` must refuse the database.
        f"""
        ALTER TABLE {p}sessions ADD COLUMN max_commit TEXT NOT NULL DEFAULT '';
        UPDATE {p}sessions SET max_commit = coalesce((SELECT max(c.commit_id)
            FROM {p}commits AS c WHERE c.session_id = {p}sessions.session_id), '');
        ALTER TABLE {p}events ADD COLUMN commit_id TEXT;
        ALTER TABLE {p}events ADD COLUMN commit_result TEXT;
        """,
        # 8: sessions listed by keyset (see `statewise.db.listing`). `listed_at` is
        # updated_at truncated to LISTED_EVERY seconds, kept by triggers that write it only
        # when a commit crosses into a new bucket, so the indexes that hold it cost a commit
        # nothing until then (they are not indexes on updated_at, which every commit moves).
        # The user's index replaces `sessions_of_user` (prune for a user still finds them).
        f"""
        ALTER TABLE {p}sessions ADD COLUMN listed_at INTEGER NOT NULL DEFAULT 0;
        UPDATE {p}sessions SET listed_at = {_listed("updated_at")};
        CREATE INDEX {p}sessions_listed ON {p}sessions (listed_at DESC, session_id);
        CREATE INDEX {p}sessions_of_user_listed
            ON {p}sessions (user_id, listed_at DESC, session_id);
        DROP INDEX IF EXISTS {p}sessions_of_user;
        CREATE TRIGGER {p}sessions_listed_on_insert AFTER INSERT ON {p}sessions
            WHEN NEW.listed_at != {_listed("NEW.updated_at")}
        BEGIN
            UPDATE {p}sessions SET listed_at = {_listed("NEW.updated_at")}
                WHERE rowid = NEW.rowid;
        END;
        CREATE TRIGGER {p}sessions_listed_on_update AFTER UPDATE OF updated_at ON {p}sessions
            WHEN NEW.listed_at != {_listed("NEW.updated_at")}
        BEGIN
            UPDATE {p}sessions SET listed_at = {_listed("NEW.updated_at")}
                WHERE rowid = NEW.rowid;
        END;
        """,
        # 9: each compacted session's retained horizon (see `statewise.db.retention`).
        _sqlite_retention.migration(p),
    ]


def _listed(updated_at: str) -> str:
    """SQL of the listing bucket of `updated_at` (an SQL expression): every statement
    that computes one uses this, so they agree to the last bit."""
    return f"(CAST({updated_at} / {LISTED_EVERY} AS INTEGER) * {LISTED_EVERY})"


def _statements(script: str) -> Iterator[str]:
    """The statements of a migration, split at the semicolons that end one (a trigger's
    body holds several)."""
    pending = ""
    for part in script.split(";"):
        pending += part + ";"
        if sqlite3.complete_statement(pending):
            if pending.strip(" \n;"):
                yield pending
            pending = ""
    if pending.strip(" \n;"):
        yield pending


_COLUMN_TYPES = {
    "kind": "TEXT NOT NULL",
    "scope_id": "TEXT NOT NULL",
    "version": "INTEGER NOT NULL",
    "state": "TEXT NOT NULL",
    "session_id": "TEXT",
    "run_id": "TEXT",
    "step": "INTEGER",
    "segments": "TEXT NOT NULL",
    "conflicts": "TEXT",
    "created_at": "REAL NOT NULL",
    "seq": "INTEGER NOT NULL",
    "type": "TEXT NOT NULL",
    "data": "TEXT NOT NULL",
}


def _to_rowid_table(p: str, table: str, columns: str, key: str) -> str:
    """SQL that rebuilds `table` as a rowid table with a unique index on `key`, rows kept."""
    names = [c.strip() for c in columns.split(",")]
    # events.session_id is part of the key, so it must not be NULL there.
    types = {**_COLUMN_TYPES, **({"session_id": "TEXT NOT NULL"} if table == "events" else {})}
    definitions = ", ".join(f"{name} {types[name]}" for name in names)
    return f"""
        CREATE TABLE {p}{table}_rowid ({definitions});
        INSERT INTO {p}{table}_rowid ({columns}) SELECT {columns} FROM {p}{table} ORDER BY {key};
        DROP TABLE {p}{table};
        ALTER TABLE {p}{table}_rowid RENAME TO {p}{table};
        CREATE UNIQUE INDEX {p}{table}_by_key ON {p}{table} ({key});
        """


PRUNE_BATCH = 500
"""Sessions `prune_sessions` deletes per transaction (SQLite binds up to 32,766 values)."""


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


class SqliteDb(BaseDb):
    """Sessions in one SQLite file (`db_file`), or in memory with `db_file=":memory:"`.

    `synchronous="FULL"` (the default) makes every commit durable across power loss;
    `"NORMAL"` keeps the database consistent but may lose the last commits on power loss.
    """

    def __init__(
        self,
        db_file: str | Path = "statewise.db",
        *,
        table_prefix: str = "statewise_",
        synchronous: Literal["FULL", "NORMAL", "OFF"] = "FULL",
        busy_timeout: float = 30.0,
        retention: Retention | None = None,
    ) -> None:
        self.retention = default_retention(retention)
        if not table_prefix.replace("_", "").isalnum():
            raise StorageError(f"table_prefix must be letters, digits and '_': {table_prefix!r}")
        if synchronous not in ("FULL", "NORMAL", "OFF"):
            raise StorageError(f"synchronous must be FULL, NORMAL or OFF, not {synchronous!r}")
        self.db_file = str(db_file)
        self.table_prefix = table_prefix
        self.synchronous = synchronous
        self.busy_timeout = busy_timeout
        self._local = threading.local()
        self._write_lock = threading.Lock()
        self._connections: list[sqlite3.Connection] = []
        self._connections_lock = threading.Lock()
        self._thread: Workers | None = None
        self._closed = False
        self._identity: tuple[int, int] | None = None
        self._last_seqs: dict[str, int] = {}
        if self.db_file != ":memory:":
            self._prepare_path(Path(self.db_file))
        self._migrate()
        self._identity = self._file_identity()
        conn = self._conn
        in_wal = conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
        # How much text one commit writes to fill the WAL (see `_restart_wal`).
        self._wal_pages_bytes = WAL_AUTOCHECKPOINT * page_size if in_wal else float("inf")

    def __repr__(self) -> str:
        return f"SqliteDb(db_file={self.db_file!r})"

    # ---- connections ---------------------------------------------------------------------

    def _prepare_path(self, path: Path) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DatabaseUnavailableError(
                f"cannot create the directory for SQLite database {str(path)!r}: {exc.strerror}"
            ) from exc
        if path.is_dir():
            raise DatabaseUnavailableError(
                f"SQLite database path {str(path)!r} is a directory; give a file path"
            )

    def _file_identity(self) -> tuple[int, int] | None:
        if self.db_file == ":memory:" or self.db_file.startswith("file:"):
            return None
        try:
            st = os.stat(self.db_file)
        except OSError:
            return None
        return st.st_dev, st.st_ino

    def _check_file(self) -> None:
        """Writes to a database file that was deleted (or replaced) under us would land in
        an unlinked inode and vanish: fail them loudly instead."""
        if self._identity is None:
            return
        try:
            st = os.stat(self.db_file)
            same = (st.st_dev, st.st_ino) == self._identity
        except OSError:
            same = False
        if not same:
            raise DatabaseUnavailableError(
                f"SQLite database file {self.db_file!r} was deleted or replaced while this "
                "process had it open; nothing was written. Restore the file or open the "
                "database again"
            )

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self.db_file,
                timeout=self.busy_timeout,
                isolation_level=None,
                check_same_thread=False,
            )
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
            conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout * 1000)}")
            conn.execute(f"PRAGMA wal_autocheckpoint={WAL_AUTOCHECKPOINT}")
        except sqlite3.Error as exc:
            raise DatabaseUnavailableError(
                f"cannot open SQLite database {self.db_file!r}: {exc}"
            ) from exc
        with self._connections_lock:
            self._connections.append(conn)
        return conn

    @property
    def _conn(self) -> sqlite3.Connection:
        # Every use checks that the file is still the one we opened (one stat): through a
        # deleted file, writes would vanish, and a new connection would create an empty one.
        self._check_file()
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            if self._closed:
                raise StorageError(f"{self!r} is closed")
            conn = self._local.conn = self._connect()
        return conn

    def close(self) -> None:
        self._closed = True
        with self._connections_lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
            thread, self._thread = self._thread, None
        self._local = threading.local()
        if thread is not None:
            thread.close()

    async def aread_scopes(
        self, session_id: str, keys: Sequence[ScopeKey], held: Mapping[ScopeKey, int]
    ) -> ScopesRead:
        """A reader's read (the state GET) does not queue behind commits on the writer's
        thread: in WAL mode any thread reads at once, on a connection of its own."""
        if on_private_loop() or self.db_file == ":memory:":
            return await super().aread_scopes(session_id, keys, held)
        return await run_blocking(self.read_scopes, session_id, keys, held)

    async def _run_async(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Async callers on a shared loop (a server) reach SQLite through one dedicated
        thread with its own connection, so the loop never waits on a disk sync, the busy
        timeout or a commit's retry backoff. A sync call's private loop, and an in-memory
        database (which exists only on its connection), run inline."""
        if on_private_loop() or self.db_file == ":memory:":
            return fn(*args, **kwargs)
        return await self._writer_thread().run(fn, *args, **kwargs)

    async def acommit(self, commit: Commit) -> CommitResult:
        """On the writer thread, the commit is one statement when it can be (see
        `_sqlite_commit`): that thread shares the interpreter lock with a busy event loop,
        and each statement of a commit gives the lock up and waits to win it back. A sync
        commit has no one to wait for, and its statements cost SQLite less than the one
        statement's triggers."""
        if on_private_loop() or self.db_file == ":memory:":
            return self.commit(commit)
        return await self._writer_thread().run(self._commit_on_writer_thread, commit)

    def _commit_on_writer_thread(self, commit: Commit) -> CommitResult:
        landed = self._commit_in_one_statement(commit)
        return landed if landed is not None else self._commit_statements(commit)

    def _writer_thread(self) -> Workers:
        with self._connections_lock:
            if self._closed:
                raise StorageError(f"{self!r} is closed")
            if self._thread is None:
                self._thread = Workers(1, "statewise-sqlite")
            return self._thread

    def _schema_version(self, conn: sqlite3.Connection) -> int:
        """This table prefix's schema version. Several prefixes can share one file, so the
        version is kept per prefix; a file from before that kept it in `user_version`."""
        conn.execute(
            "CREATE TABLE IF NOT EXISTS statewise_schema_versions "
            "(table_prefix TEXT PRIMARY KEY, version INTEGER NOT NULL)"
        )
        row = conn.execute(
            "SELECT version FROM statewise_schema_versions WHERE table_prefix = ?",
            (self.table_prefix,),
        ).fetchone()
        if row is not None:
            return int(row[0])
        has_tables = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
            (f"{self.table_prefix}sessions",),
        ).fetchone()
        return int(conn.execute("PRAGMA user_version").fetchone()[0]) if has_tables else 0

    def _migrate(self) -> None:
        migrations = _migrations(self.table_prefix)
        conn = self._conn
        try:
            with self._write_lock:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    current = self._schema_version(conn)
                    if current > len(migrations):
                        raise SchemaVersionError(
                            f"SQLite database {self.db_file!r} has schema version {current}, "
                            f"newer than this statewise ({len(migrations)}); upgrade statewise"
                        )
                    for version in range(current, len(migrations)):
                        for statement in _statements(migrations[version]):
                            conn.execute(statement)
                        conn.execute(f"PRAGMA user_version={version + 1}")
                    conn.execute(
                        "INSERT INTO statewise_schema_versions (table_prefix, version) "
                        "VALUES (?, ?) ON CONFLICT (table_prefix) DO UPDATE SET "
                        "version = excluded.version",
                        (self.table_prefix, len(migrations)),
                    )
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
        except sqlite3.Error as exc:
            raise DatabaseUnavailableError(
                f"cannot use SQLite database {self.db_file!r}: {exc}"
            ) from exc

    # ---- reads ---------------------------------------------------------------------------

    def probe(
        self, session_id: str, keys: Sequence[ScopeKey]
    ) -> tuple[SessionRecord | None, dict[ScopeKey, int]]:
        # One statement, so one snapshot of the database and one round through SQLite for
        # what was a query per scope: this runs at the start of every run.
        params: list[Any] = [part for key in keys for part in key]
        params.append(session_id)
        row = self._conn.execute(_probe_sql(self.table_prefix, len(keys)), params).fetchone()
        versions = {key: row[8 + i] or 0 for i, key in enumerate(keys)}
        return (self._session_from_row(row) if row[0] is not None else None), versions

    def _session_from_row(self, row: Sequence[Any]) -> SessionRecord:
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

    def load_scopes(self, keys: Sequence[ScopeKey]) -> dict[ScopeKey, ScopeState]:
        p = self.table_prefix
        conn = self._conn
        result: dict[ScopeKey, ScopeState] = {}
        for key in keys:
            # One read transaction per scope so snapshot and deltas agree with the version.
            with _one_read(conn):
                row = conn.execute(
                    f"SELECT version, snapshot_version, snapshot_bytes, tail_bytes "
                    f"FROM {p}scopes WHERE kind = ? AND scope_id = ?",
                    (key.kind, key.id),
                ).fetchone()
                if row is None:
                    result[key] = ScopeState(key=key)
                    continue
                version, snapshot_version, snapshot_bytes, tail_bytes = row
                snapshot_text = None
                if snapshot_version:
                    found = conn.execute(
                        f"SELECT state FROM {p}snapshots "
                        f"WHERE kind = ? AND scope_id = ? AND version = ?",
                        (key.kind, key.id, snapshot_version),
                    ).fetchone()
                    snapshot_text = found[0] if found else None
                deltas = conn.execute(
                    f"SELECT version, segments FROM {p}deltas "
                    f"WHERE kind = ? AND scope_id = ? AND version > ? ORDER BY version",
                    (key.kind, key.id, snapshot_version),
                ).fetchall()
            result[key] = replayed_scope(
                key, version, snapshot_version, snapshot_bytes, tail_bytes, snapshot_text, deltas
            )
        return result

    def read_deltas(
        self,
        key: ScopeKey,
        *,
        after_version: int = 0,
        upto_version: int | None = None,
        limit: int | None = None,
    ) -> list[DeltaRecord]:
        p = self.table_prefix
        sql = (
            f"SELECT version, session_id, run_id, step, segments, conflicts, created_at "
            f"FROM {p}deltas WHERE kind = ? AND scope_id = ? AND version > ?"
        )
        params: list[Any] = [key.kind, key.id, after_version]
        if upto_version is not None:
            sql += " AND version <= ?"
            params.append(upto_version)
        sql += " ORDER BY version"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        rows = self._conn.execute(sql, params).fetchall()
        return [decode_delta_row(key, *row) for row in rows]

    def read_snapshot(self, key: ScopeKey, at_or_before: int) -> tuple[int, dict[str, Any]]:
        row = self._conn.execute(
            f"SELECT version, state FROM {self.table_prefix}snapshots WHERE kind = ? "
            f"AND scope_id = ? AND version <= ? ORDER BY version DESC LIMIT 1",
            (key.kind, key.id, at_or_before),
        ).fetchone()
        if row is None:
            return 0, {}
        try:
            return row[0], _codec.loads(row[1])
        except ValueError as exc:
            raise CorruptRecordError(f"{key}: snapshot at version {row[0]} is not JSON") from exc

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
        sql = (
            f"SELECT seq, run_id, type, data, created_at FROM {self.table_prefix}events "
            f"WHERE session_id = ?"
        )
        params: list[Any] = [session_id]
        if after is not None:
            sql += " AND seq > ?"
            params.append(after)
        if before is not None:
            sql += " AND seq < ?"
            params.append(before)
        if types:
            sql += f" AND type IN ({','.join('?' * len(types))})"
            params.extend(types)
        if run_id is not None:
            sql += " AND run_id = ?"
            params.append(run_id)
        newest_first = limit is not None and after is None
        sql += " ORDER BY seq DESC" if newest_first else " ORDER BY seq"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        conn = self._conn
        # One read transaction, so the deltas that events refer to are read with them.
        with _one_read(conn):
            rows = conn.execute(sql, params).fetchall()
            if newest_first:
                rows.reverse()
            events = [self._event_from_row(conn, session_id, *row) for row in rows]
        return events

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
        try:
            decoded = _codec.loads(data[1:] if reference else data)
        except ValueError as exc:
            raise CorruptRecordError(f"session {session_id!r}: event {seq} is not JSON") from exc
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
        """The segments of the delta a `state_delta` event refers to (see `_event_text`)."""
        row = conn.execute(
            f"SELECT segments FROM {self.table_prefix}deltas "
            f"WHERE kind = ? AND scope_id = ? AND version = ?",
            (data.get("scope"), data.get("scope_id"), data.get("version")),
        ).fetchone()
        if row is None:
            raise CorruptRecordError(
                f"session {session_id!r}: event {seq} refers to a delta that is missing"
            )
        key = ScopeKey(data["scope"], data["scope_id"])
        return [s.to_dict() for s in decode_segments(key, data["version"], row[0])]

    _RUN_COLUMNS = (
        "run_id, status, agent_name, input, content, messages, metrics, error, "
        "created_at, updated_at"
    )

    def _run_from_row(self, session_id: str, row: Sequence[Any]) -> RunRecord:
        try:
            messages = _codec.loads(row[5])
            metrics = _codec.loads(row[6])
        except ValueError as exc:
            raise CorruptRecordError(
                f"session {session_id!r}: run {row[0]!r} is not valid JSON"
            ) from exc
        return RunRecord(
            session_id=session_id,
            run_id=row[0],
            status=row[1],
            agent_name=row[2],
            input=row[3],
            content=row[4],
            messages=messages,
            metrics=metrics,
            error=row[7],
            created_at=row[8],
            updated_at=row[9],
        )

    def read_runs(
        self, session_id: str, *, limit: int | None = None, status: str | None = None
    ) -> list[RunRecord]:
        sql = f"SELECT {self._RUN_COLUMNS} FROM {self.table_prefix}runs WHERE session_id = ?"
        params: list[Any] = [session_id]
        if status is not None:
            sql += " AND status = ?"
            params.append(status)
        sql += " ORDER BY created_at DESC, rowid DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        rows = self._conn.execute(sql, params).fetchall()
        return [self._run_from_row(session_id, row) for row in reversed(rows)]

    def iter_runs(self, session_id: str, *, page: int = 500) -> Iterator[RunRecord]:
        after: tuple[float, int] = (float("-inf"), -1)
        while True:
            rows = self._conn.execute(
                f"SELECT {self._RUN_COLUMNS}, rowid FROM {self.table_prefix}runs "
                "WHERE session_id = ? AND (created_at, rowid) > (?, ?) "
                "ORDER BY created_at, rowid LIMIT ?",
                (session_id, *after, page),
            ).fetchall()
            for row in rows:
                yield self._run_from_row(session_id, row[:-1])
            if len(rows) < page:
                return
            after = (rows[-1][-3], rows[-1][-1])  # (created_at, rowid) of the last one

    def get_run(self, session_id: str, run_id: str) -> RunRecord | None:
        row = self._conn.execute(
            f"SELECT {self._RUN_COLUMNS} FROM {self.table_prefix}runs "
            f"WHERE session_id = ? AND run_id = ?",
            (session_id, run_id),
        ).fetchone()
        return self._run_from_row(session_id, row) if row else None

    def list_sessions(
        self,
        *,
        user_id: str | None = None,
        app_name: str | None = None,
        limit: int = 50,
        offset: int = 0,
        cursor: str | None = None,
    ) -> list[SessionRecord]:
        sql = (
            f"SELECT session_id, user_id, app_name, kind, created_at, updated_at, last_seq, "
            f"metadata FROM {self.table_prefix}sessions WHERE 1=1"
        )
        params: list[Any] = []
        if user_id is not None:
            sql += " AND user_id = ?"
            params.append(user_id)
        if app_name is not None:
            sql += " AND app_name = ?"
            params.append(app_name)
        if cursor is not None:
            # Seeks the listing index to the cursor's bucket (see `statewise.db.listing`).
            updated_at, session_id = decode_cursor(cursor)
            bucket = _listed("?")
            sql += (
                f" AND listed_at <= {bucket} AND (listed_at < {bucket} OR updated_at < ?"
                f" OR (updated_at = ? AND session_id > ?))"
            )
            params += [updated_at, updated_at, updated_at, updated_at, session_id]
        sql += " ORDER BY listed_at DESC, updated_at DESC, session_id LIMIT ? OFFSET ?"
        params.extend([limit, offset])
        rows = self._conn.execute(sql, params).fetchall()
        return readable_records(rows, self._session_from_row)

    # ---- writes --------------------------------------------------------------------------

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
        return self._commit_statements(commit)

    def _commit_statements(self, commit: Commit) -> CommitResult:
        try:
            result, large = self._write(lambda conn: self._commit_in(conn, commit))
        except sqlite3.Error as exc:
            raise StorageError(f"SQLite commit to {self.db_file!r} failed: {exc}") from exc
        if large >= self._wal_pages_bytes:
            self._restart_wal()
        if not result.replayed:
            self._note_last_seq(commit.session.session_id, result.last_seq)
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
                if not result.replayed:
                    reads.wrote(commit, time.time())

        try:
            self._write(write_all)
        except sqlite3.Error as exc:
            raise StorageError(f"SQLite commit to {self.db_file!r} failed: {exc}") from exc
        if large >= self._wal_pages_bytes:
            self._restart_wal()
        for outcome in outcomes:
            if isinstance(outcome, CommitResult) and not outcome.replayed:
                self._note_last_seq(session_id, outcome.last_seq)
        return outcomes

    def _commit_in_one_statement(self, commit: Commit) -> CommitResult | None:
        """`commit` landed through one statement (see `_sqlite_commit`), or None if it
        must take the statement-by-statement path (nothing was written then)."""
        now = time.time()
        session_id = commit.session.session_id
        at_seq = self._last_seqs.get(session_id, -1)
        values = _sqlite_commit.commit_rows(commit, now, _event_text, LARGE_VALUE, at_seq)
        if values is None:
            return None
        conn = self._writing_conn()
        with self._write_lock:
            self._check_file()
            last_seq = self._send_one_statement(conn, values, len(commit.events))
            if last_seq is None:
                return None
            self._note_last_seq(session_id, last_seq)
        return applied_result(commit, last_seq, now)

    def _send_one_statement(
        self, conn: sqlite3.Connection, values: list[Any], n_events: int
    ) -> int | None:
        """The session's last sequence number once the statement of `values` landed, or
        None if it wrote nothing and the commit must take the statement-by-statement path.
        Raises DatabaseUnavailableError when the database stayed busy."""
        sql = _sqlite_commit.insert_sql(self.table_prefix, len(values) // _sqlite_commit.WIDTH)
        at_seq = values[_sqlite_commit.AT_SEQ]
        try:
            if not getattr(self._local, "one_statement", False):
                # (after the migrations: ALTER TABLE checks temporary triggers too)
                conn.executescript(_sqlite_commit.temp_schema(self.table_prefix))
                self._local.one_statement = True
            try:
                conn.execute(sql, values)
            except sqlite3.IntegrityError as exc:
                if at_seq < 0 or str(exc) != _sqlite_commit.SEQUENCE_MOVED:
                    raise
                at_seq = values[_sqlite_commit.AT_SEQ] = -1  # another writer came between
                conn.execute(sql, values)
        except sqlite3.IntegrityError:
            return None  # a trigger handed the commit over (or a row clashed): no write
        except sqlite3.Error as exc:
            if getattr(exc, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_BUSY:
                raise self._busy(exc) from exc
            return None  # nothing was written; the full path meets the cause and names it
        if at_seq >= 0:
            return int(at_seq) + n_events
        try:
            row = conn.execute(f"SELECT last_seq FROM {self.table_prefix}commit_out").fetchone()
        except sqlite3.Error as exc:  # (it landed: a retry with its id is answered, not applied)
            raise StorageError(f"SQLite commit to {self.db_file!r} failed: {exc}") from exc
        return int(row[0])

    def _note_last_seq(self, session_id: str, last_seq: int) -> None:
        """Remember where a session's sequence numbers are after our commit to it, so the
        next one-statement commit to it need not read that back (a few thousand sessions;
        a wrong guess costs an aborted statement, never a wrong number)."""
        if len(self._last_seqs) >= LAST_SEQS_KEPT:
            self._last_seqs.clear()
        self._last_seqs[session_id] = last_seq

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

    def _landed(
        self, conn: sqlite3.Connection, commit: Commit, last_seq: int
    ) -> CommitResult | None:
        """The stored result of `commit`'s id, if a commit with that id landed before.

        An id is stored in the `commits` table (by a commit with no event, one whose id was
        not greater than every id landed before it, and every commit of schema 6 and
        before), or else in the row of its commit's last event. The ids stored in event
        rows grow with the sequence numbers (each was greater than all before it), so they
        are found by bisecting the session's events: a few short reads, not a scan."""
        p = self.table_prefix
        session_id = commit.session.session_id
        wanted = commit.commit_id
        row = conn.execute(
            f"SELECT result, created_at FROM {p}commits WHERE session_id = ? AND commit_id = ?",
            (session_id, wanted),
        ).fetchone()
        if row is not None:
            return decode_commit_result(commit, row[0], row[1])
        first_stored = (
            f"SELECT seq, commit_id, commit_result, created_at FROM {p}events "
            f"WHERE session_id = ? AND seq >= ? AND seq <= ? AND commit_id IS NOT NULL "
            f"ORDER BY seq LIMIT 1"
        )
        low, high = 1, last_seq
        while low <= high:
            middle = (low + high) // 2
            found = conn.execute(first_stored, (session_id, middle, high)).fetchone()
            if found is None or found[1] > wanted:
                high = middle - 1  # (no id stored from `middle` on is `wanted` or before it)
            elif found[1] < wanted:
                low = found[0] + 1
            else:
                return decode_commit_result(commit, found[2], found[3])
        return None

    def _session_for(
        self, conn: sqlite3.Connection, commit: Commit, now: float
    ) -> tuple[int, bool] | CommitResult:
        """Create or advance the commit's session row: the session's last sequence number
        after this commit, and whether the commit's id goes in its last event's row; or the
        stored result of the commit, if its id landed before (nothing is written then).

        The session row keeps the greatest commit id landed. An id greater than it has
        never landed, so the UPDATE that advances the session also tells that, and a
        commit whose id is new (ids are made in time order) looks nothing up. Any other id
        (a retry, or ids not made in order) is looked up (`_landed`)."""
        p = self.table_prefix
        session = commit.session
        n_events = len(commit.events)
        commit_id = commit.commit_id
        if commit.create_session:
            try:
                conn.execute(
                    f"INSERT INTO {p}sessions (session_id, user_id, app_name, kind, "
                    f"created_at, updated_at, last_seq, metadata, max_commit) "
                    f"VALUES (?,?,?,?,?,?,?,?,?)",
                    (
                        session.session_id,
                        session.user_id,
                        session.app_name,
                        session.kind,
                        now,
                        now,
                        n_events,
                        _codec.dumps(session.metadata),
                        commit_id,
                    ),
                )
            except sqlite3.IntegrityError as exc:
                if commit_id:
                    landed = self._landed_in_session(conn, commit)
                    if landed is not None:
                        return landed
                raise VersionConflict(f"session {session.session_id!r}", 0, None) from exc
            return n_events, bool(commit_id)
        if commit_id:
            row = conn.execute(
                f"UPDATE {p}sessions SET last_seq = last_seq + ?, updated_at = ?, "
                f"max_commit = ? WHERE session_id = ? AND max_commit < ? RETURNING last_seq",
                (n_events, now, commit_id, session.session_id, commit_id),
            ).fetchone()
            if row is not None:
                return row[0], True
            landed = self._landed_in_session(conn, commit)
            if landed is not None:
                return landed
        row = conn.execute(
            f"UPDATE {p}sessions SET last_seq = last_seq + ?, updated_at = ? "
            f"WHERE session_id = ? RETURNING last_seq",
            (n_events, now, session.session_id),
        ).fetchone()
        if row is None:
            raise VersionConflict(f"session {session.session_id!r}", 1, None)
        return row[0], False

    def _landed_in_session(self, conn: sqlite3.Connection, commit: Commit) -> CommitResult | None:
        found = conn.execute(
            f"SELECT last_seq FROM {self.table_prefix}sessions WHERE session_id = ?",
            (commit.session.session_id,),
        ).fetchone()
        return self._landed(conn, commit, found[0]) if found is not None else None

    def _commit_in(self, conn: sqlite3.Connection, commit: Commit) -> tuple[CommitResult, int]:
        """Apply `commit`; its result, and the length of the large texts it wrote."""
        p = self.table_prefix
        now = time.time()
        session = commit.session
        n_events = len(commit.events)
        advanced = self._session_for(conn, commit, now)
        if isinstance(advanced, CommitResult):
            return advanced, 0
        last_seq, id_in_event = advanced
        versions: dict[ScopeKey, int] = {}
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
                f"WHERE kind = ? AND scope_id = ? AND version = ?",
                (new_version, write.delta_bytes, now, key.kind, key.id, write.base_version),
            ).rowcount
            if updated != 1:
                actual = conn.execute(
                    f"SELECT version FROM {p}scopes WHERE kind = ? AND scope_id = ?",
                    (key.kind, key.id),
                ).fetchone()
                raise VersionConflict(str(key), write.base_version, actual[0] if actual else None)
            large += _insert_rows(
                conn,
                f"{p}deltas",
                "kind, scope_id, version, session_id, run_id, step, segments, conflicts, "
                "created_at",
                [
                    (
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
                (6, 7),
                (7,),
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
                    f"tail_bytes = 0 WHERE kind = ? AND scope_id = ?",
                    (new_version, len(text), key.kind, key.id),
                )
            versions[key] = new_version
        first_seq = last_seq - n_events + 1
        stored = encode_commit_result(versions, last_seq, n_events) if commit.commit_id else ""
        if commit.events:
            rows: list[tuple[Any, ...]] = [
                (
                    session.session_id,
                    first_seq + i,
                    event.run_id,
                    event.type,
                    _event_text(event, commit.writes),
                    now,
                    "",
                    "",
                )
                for i, event in enumerate(commit.events)
            ]
            if id_in_event:
                rows[-1] = (*rows[-1][:6], commit.commit_id, stored)
            large += _insert_rows(
                conn,
                f"{p}events",
                "session_id, seq, run_id, type, data, created_at, commit_id, commit_result",
                rows,
                (4,),
                (6, 7),
            )
        if stored and not (id_in_event and commit.events):
            conn.execute(
                f"INSERT INTO {p}commits (session_id, commit_id, result, created_at) "
                f"VALUES (?,?,?,?)",
                (session.session_id, commit.commit_id, stored, now),
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

    def delete_session(self, session_id: str) -> bool:
        validate_id(session_id)
        return bool(self._write(lambda conn: self._delete_sessions(conn, [session_id])))

    def _delete_sessions(self, conn: sqlite3.Connection, ids: Sequence[str]) -> int:
        """Delete these sessions with their state, events and runs in the caller's
        transaction; how many sessions there were."""
        p = self.table_prefix
        marks = ",".join("?" * len(ids))
        found = conn.execute(f"DELETE FROM {p}sessions WHERE session_id IN ({marks})", ids).rowcount
        for table in ("events", "runs", "commits", "run_leases", "horizons"):
            conn.execute(f"DELETE FROM {p}{table} WHERE session_id IN ({marks})", ids)
        for table in ("deltas", "snapshots", "scopes"):
            conn.execute(
                f"DELETE FROM {p}{table} WHERE kind = 'session' AND scope_id IN ({marks})", ids
            )
        return int(found)

    def read_horizon(self, session_id: str) -> Horizon:
        return _sqlite_retention.read_horizon(self._conn, self.table_prefix, session_id)

    def write_compaction(self, plan: CompactionPlan) -> Compaction | None:
        try:
            return self._write(
                lambda conn: _sqlite_retention.write_compaction(conn, self.table_prefix, plan)
            )
        except sqlite3.Error as exc:
            raise StorageError(f"SQLite compaction in {self.db_file!r} failed: {exc}") from exc

    def prune_sessions(
        self, *, older_than: float | timedelta | datetime, user_id: str | None = None
    ) -> int:
        cutoff = to_timestamp_cutoff(older_than, time.time())
        # The listing index finds the old buckets; the sessions updated since are not read.
        sql = (
            f"SELECT session_id FROM {self.table_prefix}sessions "
            f"WHERE listed_at <= {_listed('?')} AND updated_at < ?"
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
        still = [
            row[0]
            for row in conn.execute(
                f"SELECT session_id FROM {self.table_prefix}sessions "
                f"WHERE session_id IN ({marks}) AND updated_at < ?",
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
                conn.execute(
                    f"INSERT INTO {p}sessions (session_id, user_id, app_name, kind, created_at, "
                    f"updated_at, last_seq, metadata) VALUES (?,?,?,?,?,?,?,?)",
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
                )
            except sqlite3.IntegrityError as exc:
                raise StorageError(
                    f"cannot import session {session.session_id!r}: it already exists"
                ) from exc
            version = 0
            for delta in deltas:
                version = max(version, delta.version)
                conn.execute(
                    f"INSERT INTO {p}deltas (kind, scope_id, version, session_id, run_id, "
                    f"step, segments, conflicts, created_at) VALUES (?,?,?,?,?,?,?,?,?)",
                    (
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
            if deltas:
                conn.execute(
                    f"INSERT INTO {p}scopes (kind, scope_id, version, updated_at) "
                    f"VALUES ('session', ?, ?, ?)",
                    (session.session_id, version, session.updated_at),
                )
            conn.executemany(
                f"INSERT INTO {p}events (session_id, seq, run_id, type, data, created_at) "
                f"VALUES (?,?,?,?,?,?)",
                [
                    (
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
