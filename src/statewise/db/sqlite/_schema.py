"""SQLite's schema and its migrations, the stored form of an event, and the connections.

The bottom of `SqliteDb`: each module of this package adds one concern to the class
below it (connections and schema, reads, the commit path, leases, whole sessions), so
each sees what it builds on without a circle of imports.
"""

from __future__ import annotations

import functools
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, ParamSpec, TypeVar

from statewise._workers import Workers, run_blocking, runs_inline
from statewise.db import _codec
from statewise.db._sql_reads import Dialect
from statewise.db.base import (
    BaseDb,
    ScopesRead,
)
from statewise.db.listing import LISTED_EVERY
from statewise.db.records import (
    DeltaSegment,
    NewEvent,
    ScopeKey,
    ScopeWrite,
)
from statewise.db.retention import (
    Retention,
    default_retention,
)
from statewise.exceptions import (
    DatabaseUnavailableError,
    SchemaVersionError,
    StorageError,
)

P = ParamSpec("P")
T = TypeVar("T")


WAL_AUTOCHECKPOINT = 1000
"""Pages the WAL holds before the commit that passes this many copies them into the
database file (SQLite's default, set explicitly because `SqliteDb.commit` counts on it)."""


DELTA_REFERENCE = "@"
"""Starts the stored text of a `state_delta` event whose segments are read from its delta
row (no JSON text starts with it)."""


def event_text(event: NewEvent, writes: Sequence[ScopeWrite]) -> str:
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
        # `event_text`); nothing to change in existing rows, but a statewise that does not
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
        UPDATE {p}sessions SET listed_at = {listed("updated_at")};
        DROP INDEX IF EXISTS {p}sessions_of_user;
        """
        + _session_listing(p),
        # 9: each compacted session's retained horizon (see `statewise.db.retention`), in a
        # table of its own (not a column of `sessions`), so the commit path, which never
        # reads a horizon, writes no wider a row.
        f"""
        CREATE TABLE IF NOT EXISTS {p}horizons (
            session_id TEXT PRIMARY KEY,
            version INTEGER NOT NULL,
            before REAL NOT NULL,
            ids_before REAL NOT NULL
        ) WITHOUT ROWID;
        """,
        # 10: every commit id in `commits`, and small integer keys. Each session and each
        # scope gets a key of its own (`session_key`, `scope_key`: INTEGER PRIMARY KEYs,
        # which VACUUM keeps). Events stay in the order they were written (a commit
        # appends them at the table's end, where SQLite splits no page) and are found by
        # a unique index on (session_key, seq), whose entries are a few bytes instead of
        # a session id's text. A delta's rowid is `row_key(scope_key, version)`: deltas
        # are ordered as they are read, with no key index beside them to write. (Events
        # ordered the same way measured worse with many sessions: each commit then inserts
        # large rows in the middle of the table, and every page split there rewrites
        # several.) Ids kept in their last event's row (schema 7) move into `commits`,
        # where every id is found by one lookup; the session row no longer keeps the
        # greatest. A statewise that looks ids up in event rows, or rows up by the old
        # indexes, must refuse the database.
        f"""
        CREATE TABLE {p}sessions_keyed (
            session_key INTEGER PRIMARY KEY,
            session_id TEXT NOT NULL UNIQUE,
            user_id TEXT,
            app_name TEXT,
            kind TEXT NOT NULL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            last_seq INTEGER NOT NULL DEFAULT 0,
            metadata TEXT NOT NULL DEFAULT '{{}}',
            listed_at INTEGER NOT NULL DEFAULT 0
        );
        INSERT INTO {p}sessions_keyed (session_key, session_id, user_id, app_name, kind,
            created_at, updated_at, last_seq, metadata, listed_at)
            SELECT rowid, session_id, user_id, app_name, kind, created_at, updated_at,
                last_seq, metadata, listed_at FROM {p}sessions ORDER BY rowid;
        INSERT OR IGNORE INTO {p}commits (session_id, commit_id, result, created_at)
            SELECT session_id, commit_id, commit_result, created_at FROM {p}events
            WHERE commit_id IS NOT NULL;
        CREATE TABLE {p}events_keyed (
            session_key INTEGER NOT NULL,
            session_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            run_id TEXT,
            type TEXT NOT NULL,
            data TEXT NOT NULL,
            created_at REAL NOT NULL
        );
        INSERT INTO {p}events_keyed (rowid, session_key, session_id, seq, run_id, type, data,
            created_at)
            SELECT e.rowid, s.session_key, e.session_id, e.seq, e.run_id, e.type, e.data,
                e.created_at
            FROM {p}events AS e JOIN {p}sessions_keyed AS s ON s.session_id = e.session_id
            ORDER BY e.rowid;
        DROP TABLE {p}events;
        ALTER TABLE {p}events_keyed RENAME TO {p}events;
        CREATE UNIQUE INDEX {p}events_by_key ON {p}events (session_key, seq);
        DROP TABLE {p}sessions;
        ALTER TABLE {p}sessions_keyed RENAME TO {p}sessions;
        CREATE TABLE {p}scopes_keyed (
            scope_key INTEGER PRIMARY KEY,
            kind TEXT NOT NULL,
            scope_id TEXT NOT NULL,
            version INTEGER NOT NULL,
            snapshot_version INTEGER NOT NULL DEFAULT 0,
            snapshot_bytes INTEGER NOT NULL DEFAULT 0,
            tail_bytes INTEGER NOT NULL DEFAULT 0,
            updated_at REAL NOT NULL,
            UNIQUE (kind, scope_id)
        );
        INSERT INTO {p}scopes_keyed (kind, scope_id, version, snapshot_version,
            snapshot_bytes, tail_bytes, updated_at)
            SELECT kind, scope_id, version, snapshot_version, snapshot_bytes, tail_bytes,
                updated_at FROM {p}scopes ORDER BY kind, scope_id;
        CREATE TABLE {p}deltas_keyed (
            delta_key INTEGER PRIMARY KEY,
            kind TEXT NOT NULL,
            scope_id TEXT NOT NULL,
            version INTEGER NOT NULL,
            session_id TEXT,
            run_id TEXT,
            step INTEGER,
            segments TEXT NOT NULL,
            conflicts TEXT,
            created_at REAL NOT NULL
        );
        INSERT INTO {p}deltas_keyed (delta_key, kind, scope_id, version, session_id, run_id,
            step, segments, conflicts, created_at)
            SELECT {row_key("s.scope_key", "d.version")}, d.kind, d.scope_id, d.version,
                d.session_id, d.run_id, d.step, d.segments, d.conflicts, d.created_at
            FROM {p}deltas AS d JOIN {p}scopes_keyed AS s
                ON s.kind = d.kind AND s.scope_id = d.scope_id
            ORDER BY 1;
        DROP TABLE {p}deltas;
        ALTER TABLE {p}deltas_keyed RENAME TO {p}deltas;
        DROP TABLE {p}scopes;
        ALTER TABLE {p}scopes_keyed RENAME TO {p}scopes;
        """
        + _session_listing(p),
        # 11: a commit that writes events leaves the session row as it is, unless it moves
        # the session into a new listing bucket: the row's `last_seq` and `updated_at` are
        # floors, and a session's are the greater of those and its last event's number and
        # time (see `session_columns`), which the commit writes anyway. The row was one
        # page of every commit's WAL write. Nothing to change in existing rows (they are
        # exact), but a statewise that numbers events from the row alone must refuse the
        # database.
        "",
    ]


KEY_SPAN = 1 << 32
"""Versions one scope's range of delta rowids holds: scope k's delta at `version` has the
rowid `k * KEY_SPAN + version` (see `row_key`)."""


def row_key(owner_key: str, n: str) -> str:
    """SQL of the rowid of the delta at version `n` (an SQL expression) of the scope whose
    key is `owner_key` (another)."""
    return f"({owner_key} * {KEY_SPAN} + {n})"


def _session_listing(p: str) -> str:
    """The indexes and triggers that keep sessions listed (see migration 8)."""
    return f"""
        CREATE INDEX {p}sessions_listed ON {p}sessions (listed_at DESC, session_id);
        CREATE INDEX {p}sessions_of_user_listed
            ON {p}sessions (user_id, listed_at DESC, session_id);
        CREATE TRIGGER {p}sessions_listed_on_insert AFTER INSERT ON {p}sessions
            WHEN NEW.listed_at != {listed("NEW.updated_at")}
        BEGIN
            UPDATE {p}sessions SET listed_at = {listed("NEW.updated_at")}
                WHERE rowid = NEW.rowid;
        END;
        CREATE TRIGGER {p}sessions_listed_on_update AFTER UPDATE OF updated_at ON {p}sessions
            WHEN NEW.listed_at != {listed("NEW.updated_at")}
        BEGIN
            UPDATE {p}sessions SET listed_at = {listed("NEW.updated_at")}
                WHERE rowid = NEW.rowid;
        END;
        """


def listed(updated_at: str) -> str:
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


def _last_event(p: str, session: str, column: str) -> str:
    """SQL of `column` of the last event of the session row named `session` (NULL when it
    has none): one seek of the events' key index."""
    return (
        f"(SELECT e.{column} FROM {p}events AS e WHERE e.session_key = {session}.session_key "
        f"ORDER BY e.seq DESC LIMIT 1)"
    )


def session_updated_at(p: str, session: str) -> str:
    """SQL of the time the session row named `session` was last committed to: the greater
    of the row's own (written when a commit has no events or starts a new listing bucket)
    and its last event's (see migration 11)."""
    return f"max({session}.updated_at, coalesce({_last_event(p, session, 'created_at')}, 0))"


def session_last_seq(p: str, session: str) -> str:
    """SQL of the number of the last event of the session row named `session`, likewise."""
    return f"max({session}.last_seq, coalesce({_last_event(p, session, 'seq')}, 0))"


def session_columns(p: str, session: str) -> str:
    """SQL of `SESSION_COLUMNS` of the session row named `session`."""
    return (
        f"{session}.session_id, {session}.user_id, {session}.app_name, {session}.kind, "
        f"{session}.created_at, {session_updated_at(p, session)}, "
        f"{session_last_seq(p, session)}, {session}.metadata"
    )


@functools.lru_cache(maxsize=8)
def dialect(p: str) -> Dialect:
    """How the statements SQLite shares with PostgreSQL are spelt with table prefix `p`."""
    return Dialect(
        prefix=p,
        listed=listed,
        session_columns=session_columns(p, f"{p}sessions"),
        updated_at=session_updated_at(p, f"{p}sessions"),
    )


class SqliteBase(BaseDb):
    """A SQLite file's connections and schema (see `SqliteDb`)."""

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
        self._dialect = dialect(table_prefix)
        self.synchronous = synchronous
        self.busy_timeout = busy_timeout
        self._local = threading.local()
        self._write_lock = threading.Lock()
        self._connections: list[sqlite3.Connection] = []
        self._connections_lock = threading.Lock()
        self._thread: Workers | None = None
        self._closed = False
        self._identity: tuple[int, int] | None = None
        if self.db_file != ":memory:":
            self._prepare_path(Path(self.db_file))
        self._migrate()
        self._identity = self._file_identity()
        conn = self._conn
        in_wal = conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
        # How much text one commit writes to fill the WAL (see `_restart_wal`).
        self._wal_pages_bytes = WAL_AUTOCHECKPOINT * page_size if in_wal else float("inf")

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
        if runs_inline() or self.db_file == ":memory:":
            return await super().aread_scopes(session_id, keys, held)
        return await run_blocking(self.read_scopes, session_id, keys, held)

    async def _run_async(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Async callers on a shared loop (a server) reach SQLite through one dedicated
        thread with its own connection, so the loop never waits on a disk sync, the busy
        timeout or a commit's retry backoff. A sync call's private loop, and an in-memory
        database (which exists only on its connection), run inline."""
        if runs_inline() or self.db_file == ":memory:":
            return fn(*args, **kwargs)
        return await self._writer_thread().run(fn, *args, **kwargs)

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
