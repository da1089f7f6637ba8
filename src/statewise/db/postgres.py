"""PostgreSQL storage: many processes and machines on one database.

psycopg 3 with a `psycopg_pool.ConnectionPool` of autocommit connections, and on each
event loop that uses the database (a server's) async connections of its own: one for the
state reads and up to `pool_size` for commits (`_pg_async`). Each primitive is one
statement, so each is one round trip and its own transaction:

- `commit` calls the `statewise_commit(...)` PL/pgSQL function (see `_pg_sql`), which does
  the compare-and-swap (`UPDATE ... WHERE version = base`) on every scope, appends deltas,
  snapshots and events, and upserts the run. A lost race raises inside the function, so the
  whole call rolls back and nothing is written.
- `probe`, `load_scopes` and `read_scopes` are one statement each (one consistent snapshot).

Faults: an unreachable server at construction raises `DatabaseUnavailableError` naming the
URL (password masked). A connection the server closed (restart, `pg_terminate_backend`) is
noticed before use by a zero-cost socket check and replaced; a read that still fails on a
dead connection is retried once on a fresh one. A commit whose connection dies mid-flight
is checked on a fresh connection (its rows carry the commit's exact timestamp): if it landed
its result is returned, otherwise it is sent once more, so it is applied exactly once. A
pool with every connection busy waits `pool_timeout` seconds, then raises.

Schema changes are a list of migrations (index + 1 = version) recorded in
`<schema>.schema_migrations` and applied under `pg_advisory_xact_lock`, so processes that
start together do not race; a database newer than this code raises `SchemaVersionError`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any, TypeVar

from statewise._workers import runs_inline

try:
    import psycopg
    from psycopg import errors as pg_errors
    from psycopg_pool import ConnectionPool, PoolTimeout
except ImportError as exc:  # before the modules below, which import psycopg too
    from statewise.exceptions import MissingDependencyError

    raise MissingDependencyError("psycopg", "postgres") from exc

from statewise.db import _codec, _pg_retention, _sql_reads, _sql_retention
from statewise.db import _pg_sql as Q
from statewise.db._pg_admin import claim_in, delete_in, prune_in, release_in
from statewise.db._pg_arrays import ADAPTERS, BigintArray, TextArray
from statewise.db._pg_async import LoopConnections
from statewise.db._pg_commit import arun_commit, import_in, run_commit, run_commit_new
from statewise.db._pg_group import KnownLanded, run_group
from statewise.db._pg_rows import is_dead as _is_dead
from statewise.db._pg_rows import reason as _reason
from statewise.db._sql_reads import SqlReads, session_from_row
from statewise.db.base import (
    BaseDb,
    GroupEntry,
    ProbedNew,
    ProbedTails,
    ScopesRead,
    to_timestamp_cutoff,
    validate_id,
)
from statewise.db.rebuild import decode_delta_row, rebuilt_scope
from statewise.db.records import (
    Commit,
    CommitResult,
    DeltaRecord,
    EventRecord,
    RunRecord,
    ScopeKey,
    ScopeState,
    SessionRecord,
)
from statewise.db.retention import (
    Compaction,
    CompactionPlan,
    Horizon,
    Retention,
    default_retention,
)
from statewise.db.url import mask_password
from statewise.exceptions import (
    CorruptRecordError,
    DatabaseUnavailableError,
    MissingDependencyError,
    SchemaVersionError,
    StorageError,
)

T = TypeVar("T")
_SCHEMA_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_LOCK_CLASS = 0x5357  # "SW": first key of the advisory lock, the schema's hash is the second
_RETRYABLE = (pg_errors.SerializationFailure, pg_errors.DeadlockDetected)


def _key_arrays(keys: Sequence[ScopeKey]) -> tuple[TextArray, TextArray]:
    """The kinds and the ids of `keys`, as the two `text[]` parameters every scope
    query unnests side by side."""
    return TextArray([k.kind for k in keys]), TextArray([k.id for k in keys])


def _probed(
    row: Sequence[Any], keys: Sequence[ScopeKey]
) -> tuple[SessionRecord | None, dict[ScopeKey, int]]:
    """The session (None if there is none) and each scope's version, from a row of
    `probe_query` (or of `probe_tails_query`, which starts with its columns)."""
    versions = dict(zip(keys, [int(v) for v in (row[8] or [])], strict=True))
    return (session_from_row(row) if row[0] is not None else None), versions


def _scope_state(
    key: ScopeKey,
    version: int,
    snapshot_version: int,
    snapshot_bytes: int,
    tail_bytes: int,
    state: Any,
    delta_versions: Sequence[int] | None,
    delta_segments: Sequence[Any] | None,
) -> ScopeState:
    """A scope as `load_query` (or `read_query`) reads it: its snapshot and the deltas after it."""
    deltas = zip(delta_versions or [], delta_segments or [], strict=False)
    return rebuilt_scope(key, version, snapshot_version, snapshot_bytes, tail_bytes, state, deltas)


def _scopes_read(keys: Sequence[ScopeKey], rows: Sequence[Sequence[Any]]) -> ScopesRead:
    """What `read_query` read: the session, each scope's version, the moved scopes."""
    record = session_from_row(rows[0]) if rows and rows[0][0] is not None else None
    if not keys:  # (`_read_scopes_query` probed the session alone)
        return record, {}, {}
    versions: dict[ScopeKey, int] = {}
    loaded: dict[ScopeKey, ScopeState] = {}
    for key, row in zip(keys, rows, strict=True):
        version, held, *scope = row[8:]
        versions[key] = version
        if record is None or version == held:
            continue
        loaded[key] = (
            _scope_state(key, version, *scope) if scope[0] is not None else ScopeState(key=key)
        )
    return record, versions, loaded


class PostgresDb(SqlReads, BaseDb):
    """Sessions in PostgreSQL (or anything speaking its protocol), inside `schema`."""

    def __init__(
        self,
        db_url: str,
        *,
        schema: str = "statewise",
        pool_size: int = 10,
        pool_timeout: float = 10.0,
        connect_timeout: float = 5.0,
        retention: Retention | None = None,
    ) -> None:
        self.retention = default_retention(retention)
        if not _SCHEMA_RE.match(schema):
            raise StorageError(
                f"schema must be lowercase letters, digits and '_' (at most 63), not {schema!r}"
            )
        if pool_size < 1:
            raise StorageError(f"pool_size must be at least 1, not {pool_size}")
        self.db_url = db_url.replace("postgresql+psycopg://", "postgresql://", 1)
        self.schema = schema
        self.pool_size = pool_size
        self.pool_timeout = pool_timeout
        self.connect_timeout = connect_timeout
        self._s = f'"{schema}"'
        self._dialect = Q.dialect(self._s)
        self._closed = False
        kwargs: dict[str, Any] = {
            "autocommit": True,
            "context": ADAPTERS,
            "connect_timeout": max(1, round(connect_timeout)),
        }
        try:
            first = psycopg.connect(self.db_url, **kwargs)
        except psycopg.Error as exc:
            raise DatabaseUnavailableError(
                f"cannot connect to PostgreSQL at {self.url_masked}: {_reason(exc)}"
            ) from exc
        try:
            self._migrate(first)
        finally:
            first.close()
        self._pool: ConnectionPool[psycopg.Connection[tuple[Any, ...]]] = ConnectionPool(
            self.db_url,
            min_size=1,
            max_size=pool_size,
            kwargs=kwargs,
            timeout=pool_timeout,
            open=False,
            name=f"statewise-{schema}",
        )
        self._pool.open(wait=False)
        # On each event loop: the state reads' connection, and the commits' own (up to
        # pool_size), so a read never waits for a connection a commit holds.
        self._loop_reads = LoopConnections(self.db_url, connect_timeout, 1, pool_timeout)
        self._known = KnownLanded()  # (what this process's last group of a session landed)
        self._loop_commits = LoopConnections(self.db_url, connect_timeout, pool_size, pool_timeout)

    @property
    def url_masked(self) -> str:
        return mask_password(self.db_url)

    def __repr__(self) -> str:
        return f"PostgresDb(db_url={self.url_masked!r}, schema={self.schema!r})"

    # ---- migrations ----------------------------------------------------------------------

    def _migrate(self, conn: psycopg.Connection[Any]) -> None:
        s = self._s
        steps = Q.migrations(s)
        try:
            with conn.transaction():
                conn.execute(
                    "SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_LOCK_CLASS, self.schema)
                )
                conn.execute(f"CREATE SCHEMA IF NOT EXISTS {s}")
                conn.execute(
                    f"CREATE TABLE IF NOT EXISTS {s}.schema_migrations ("
                    f"version integer PRIMARY KEY, applied_at double precision NOT NULL)"
                )
                row = conn.execute(
                    f"SELECT coalesce(max(version), 0) FROM {s}.schema_migrations"
                ).fetchone()
                current = int(row[0]) if row else 0
                if current > len(steps):
                    raise SchemaVersionError(
                        f"PostgreSQL schema {self.schema!r} at {self.url_masked} has schema "
                        f"version {current}, newer than this statewise ({len(steps)}); "
                        f"upgrade statewise (nothing was changed)"
                    )
                for version in range(current, len(steps)):
                    conn.execute(steps[version])
                    conn.execute(
                        f"INSERT INTO {s}.schema_migrations (version, applied_at) VALUES (%s, %s)",
                        (version + 1, time.time()),
                    )
        except psycopg.Error as exc:
            raise DatabaseUnavailableError(
                f"cannot prepare schema {self.schema!r} in PostgreSQL at {self.url_masked}: "
                f"{_reason(exc)}"
            ) from exc

    # ---- connections ---------------------------------------------------------------------

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        if self._closed:
            raise StorageError(f"{self!r} is closed")
        for _ in range(self.pool_size + 1):
            try:
                conn = self._pool.getconn(timeout=self.pool_timeout)
            except PoolTimeout as exc:
                raise self._pool_error() from exc
            if _is_dead(conn):
                conn.close()  # the pool replaces closed connections when they come back
                self._pool.putconn(conn)
                continue
            break
        else:  # pragma: no cover - every pooled connection was dead and so was the new one
            raise DatabaseUnavailableError(f"PostgreSQL at {self.url_masked} keeps dropping us")
        try:
            yield conn
        finally:
            self._pool.putconn(conn)

    def _pool_error(self) -> DatabaseUnavailableError:
        stats = self._pool.get_stats()
        if stats.get("pool_size", 0) >= self.pool_size and not stats.get("pool_available"):
            return DatabaseUnavailableError(
                f"the pool of {self.pool_size} PostgreSQL connections to {self.url_masked} is "
                f"exhausted: none was free after {self.pool_timeout:g} s (raise pool_size, or "
                f"look for connections held too long)"
            )
        return DatabaseUnavailableError(
            f"cannot get a connection to PostgreSQL at {self.url_masked} within "
            f"{self.pool_timeout:g} s: the server is unreachable or refusing connections"
        )

    @property
    def attempts_after_drops(self) -> int:
        """How many connections a call that may safely start over tries while each one
        turns out dropped. When the server drops every connection (a restart, an
        administrator), the pooled ones may still look alive for a moment after the first
        one failed; each failed one is replaced, so: every pooled one, then a new one."""
        return self.pool_size + 1

    def _read(self, fn: Callable[[psycopg.Connection[Any]], T]) -> T:
        """Run an idempotent read; on a dropped connection, again on another one (see
        `attempts_after_drops`)."""
        attempts = self.attempts_after_drops
        for attempt in range(1, attempts + 1):
            with self._connection() as conn:
                try:
                    return fn(conn)
                except psycopg.OperationalError as exc:
                    if attempt == attempts or not (conn.broken or conn.closed):
                        raise self._unavailable(exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _transaction(self, fn: Callable[[psycopg.Connection[Any]], T]) -> T:
        with self._connection() as conn:
            try:
                with conn.transaction():
                    return fn(conn)
            except psycopg.OperationalError as exc:
                raise self._unavailable(exc) from exc

    def _unavailable(self, exc: BaseException) -> DatabaseUnavailableError:
        return DatabaseUnavailableError(f"PostgreSQL at {self.url_masked}: {_reason(exc)}")

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._pool.close()
            self._loop_reads.close()
            self._loop_commits.close()

    # ---- reads ---------------------------------------------------------------------------

    def probe(
        self, session_id: str, keys: Sequence[ScopeKey]
    ) -> tuple[SessionRecord | None, dict[ScopeKey, int]]:
        row = self._read(
            lambda c: c.execute(
                Q.probe_query(self._s),
                (session_id, *_key_arrays(keys)),
            ).fetchone()
        )
        assert row is not None
        return _probed(row, keys)

    def probe_tails(
        self, session_id: str, bases: Mapping[ScopeKey, int], *, limit: int | None = None
    ) -> ProbedTails:
        """One round trip (see `BaseDb.probe_tails`)."""
        return self._read(lambda c: self._probe_tails_on(c, session_id, bases, limit))

    def _probe_tails_on(
        self,
        conn: psycopg.Connection[Any],
        session_id: str,
        bases: Mapping[ScopeKey, int],
        limit: int | None = None,
    ) -> ProbedTails:
        keys = list(bases)
        kinds, ids = _key_arrays(keys)
        span = limit if limit is not None else 2**62  # (no limit: past any version)
        afters = BigintArray([bases[k] for k in keys])
        uptos = BigintArray([bases[k] + span for k in keys])
        row = conn.execute(
            Q.probe_tails_query(self._s), (session_id, kinds, ids, kinds, ids, afters, uptos)
        ).fetchone()
        assert row is not None
        record, versions = _probed(row, keys)
        tails: dict[ScopeKey, list[DeltaRecord]] = {
            key: [] for key in keys if versions[key] != bases[key]
        }
        for ordinal, version, *fields in row[9]:
            key = keys[ordinal - 1]
            if key in tails:
                tails[key].append(decode_delta_row(key, version, *fields))
        return record, versions, tails

    def load_scopes(self, keys: Sequence[ScopeKey]) -> dict[ScopeKey, ScopeState]:
        rows = self._read(lambda c: c.execute(Q.load_query(self._s), _key_arrays(keys)).fetchall())
        found = {ScopeKey(r[0], r[1]): r[2:] for r in rows}
        return {
            key: _scope_state(key, *found[key]) if key in found else ScopeState(key=key)
            for key in keys
        }

    def read_scopes(
        self, session_id: str, keys: Sequence[ScopeKey], held: Mapping[ScopeKey, int]
    ) -> ScopesRead:
        """One statement (see `BaseDb.read_scopes`)."""
        query, params = self._read_scopes_query(session_id, keys, held)
        return _scopes_read(keys, self._read(lambda c: c.execute(query, params).fetchall()))

    async def aread_scopes(
        self, session_id: str, keys: Sequence[ScopeKey], held: Mapping[ScopeKey, int]
    ) -> ScopesRead:
        """The same statement through psycopg's async driver, on the running loop (see
        `_pg_async`); inline on a sync call's private loop, as every async method is."""
        if runs_inline():
            return self.read_scopes(session_id, keys, held)
        if self._closed:
            raise StorageError(f"{self!r} is closed")
        query, params = self._read_scopes_query(session_id, keys, held)

        async def fetch(conn: psycopg.AsyncConnection[Any]) -> list[Any]:
            return await (await conn.execute(query, params)).fetchall()

        try:
            rows = await self._loop_reads.read(fetch)
        except psycopg.OperationalError as exc:
            raise self._unavailable(exc) from exc
        return _scopes_read(keys, rows)

    def _read_scopes_query(
        self, session_id: str, keys: Sequence[ScopeKey], held: Mapping[ScopeKey, int]
    ) -> tuple[str, tuple[Any, ...]]:
        if not keys:  # the session alone (`read_query` has a row per scope: none here)
            return Q.probe_query(self._s), (session_id, TextArray(), TextArray())
        return Q.read_query(self._s), (
            *_key_arrays(keys),
            BigintArray([held.get(k, -1) for k in keys]),
            session_id,
        )

    def _deltas_between(
        self, key: ScopeKey, after_version: int, upto_version: int | None
    ) -> tuple[str, list[Any]]:
        sql = (
            f"SELECT version, session_id, run_id, step, segments, conflicts, created_at "
            f"FROM {self._s}.deltas WHERE kind = %s AND scope_id = %s AND version > %s"
        )
        params: list[Any] = [key.kind, key.id, after_version]
        sql = _sql_reads.and_given(self._dialect, sql, params, [("version <=", upto_version)])
        return sql + " ORDER BY version", params

    def read_snapshot(self, key: ScopeKey, at_or_before: int) -> tuple[int, dict[str, Any]]:
        sql = _sql_reads.snapshot_query(self._dialect)
        row = self._read(lambda c: c.execute(sql, (key.kind, key.id, at_or_before)).fetchone())
        if row is None:
            return 0, {}
        try:
            data = _codec.loads(row[1])
        except ValueError as exc:
            raise CorruptRecordError(f"{key}: snapshot at version {row[0]} is not JSON") from exc
        if not isinstance(data, dict):
            raise CorruptRecordError(f"{key}: snapshot at version {row[0]} is not an object")
        return int(row[0]), data

    def _fetch_all(self, sql: str, params: Sequence[Any]) -> list[Any]:
        return self._read(lambda c: c.execute(sql, params).fetchall())

    def _fetch_one(self, sql: str, params: Sequence[Any]) -> Any:
        return self._read(lambda c: c.execute(sql, params).fetchone())

    def _events_sql(self) -> str:
        return (
            f"SELECT seq, run_id, type, data, created_at FROM {self._s}.events "
            f"WHERE session_id = %s"
        )

    def _events_from(
        self, session_id: str, sql: str, params: Sequence[Any], newest_first: bool
    ) -> list[EventRecord]:
        rows = self._fetch_all(sql, params)
        if newest_first:
            rows.reverse()
        return [
            EventRecord(
                session_id=session_id,
                seq=seq,
                run_id=run_id,
                type=type_,
                data=_sql_reads.event_data(session_id, seq, data),
                created_at=created_at,
            )
            for seq, run_id, type_, data, created_at in rows
        ]

    # ---- writes --------------------------------------------------------------------------

    def commit(self, commit: Commit) -> CommitResult:
        return run_commit(self, commit)

    def commit_new(self, commit: Commit, keys: Sequence[ScopeKey]) -> ProbedNew:
        """One statement (`_pg_sql.commit_new_call`) for a commit with an id (which makes
        sending it again safe); two calls, as every backend, for one without."""
        if not commit.commit_id:
            return super().commit_new(commit, keys)
        row, result = run_commit_new(self, commit, (commit.session.session_id, *_key_arrays(keys)))
        return (*_probed(row, keys), result)

    async def acommit(self, commit: Commit) -> CommitResult:
        """The same call through the event loop's own connections (see `_pg_async`): a
        commit is one round trip, and a worker thread would cost more than it. A commit
        without an id (nothing to make a resend safe by) goes through a thread, whose
        recovery looks for its rows."""
        if runs_inline() or not commit.commit_id:
            return await super().acommit(commit)
        if self._closed:
            raise StorageError(f"{self!r} is closed")
        try:
            return await arun_commit(self, commit)
        except PoolTimeout as exc:
            raise DatabaseUnavailableError(
                f"the {self.pool_size} connections this event loop commits through to "
                f"PostgreSQL at {self.url_masked} were all busy for {self.pool_timeout:g} s "
                f"(raise pool_size, or look for commits held too long)"
            ) from exc
        except psycopg.OperationalError as exc:  # (connecting failed)
            raise self._unavailable(exc) from exc

    @property
    def queues_rebased_commits(self) -> bool:
        """With two connections or more: the rebase's reads need one of their own."""
        return self.pool_size >= 2

    def commit_rebased(
        self,
        session_id: str,
        bases: Mapping[ScopeKey, int],
        build: Callable[[ProbedTails], Commit],
    ) -> CommitResult:
        """A group of one (`commit_rebased_together`); with a pool of one connection, the
        unlocked default: a rebase that reloads a scope reads on a second connection
        while the session row's lock holds the first."""
        if self.pool_size < 2:
            return BaseDb.commit_rebased(self, session_id, bases, build)
        (outcome,) = run_group(self, self._known, session_id, [(lambda: bases, build)])
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def commit_rebased_together(
        self,
        session_id: str,
        entries: Sequence[GroupEntry],
    ) -> list[CommitResult | Exception]:
        """In one statement, one transaction (`_pg_group`)."""
        if self.pool_size < 2:
            return BaseDb.commit_rebased_together(self, session_id, entries)
        return run_group(self, self._known, session_id, entries)

    def claim_run(self, session_id: str, run_id: str, owner: str, ttl: float) -> bool:
        """Expiry by the server's clock (`clock_timestamp()`), not this client's: clients
        whose clocks disagree still agree on who holds a run."""
        return self._transaction(
            lambda conn: claim_in(conn, self._s, session_id, run_id, owner, ttl)
        )

    def release_run(self, session_id: str, run_id: str, owner: str) -> None:
        self._transaction(lambda conn: release_in(conn, self._s, session_id, run_id, owner))

    def delete_session(self, session_id: str) -> bool:
        validate_id(session_id)
        return self._transaction(lambda c: delete_in(c, self._s, [session_id])) > 0

    def read_horizon(self, session_id: str) -> Horizon:
        return self._read(lambda conn: _sql_retention.read_horizon(conn, self._dialect, session_id))

    def write_compaction(self, plan: CompactionPlan) -> Compaction | None:
        return self._transaction(
            lambda conn: _pg_retention.write_compaction(conn, self._dialect, plan)
        )

    def prune_sessions(
        self, *, older_than: float | timedelta | datetime, user_id: str | None = None
    ) -> int:
        cutoff = to_timestamp_cutoff(older_than, time.time())
        return self._transaction(lambda conn: prune_in(conn, self._s, cutoff, user_id))

    def import_records(
        self,
        session: SessionRecord,
        deltas: Sequence[DeltaRecord],
        events: Sequence[EventRecord],
        runs: Sequence[RunRecord],
    ) -> None:
        try:
            self._transaction(lambda c: import_in(self._s, c, session, deltas, events, runs))
        except pg_errors.UniqueViolation as exc:
            raise StorageError(
                f"cannot import session {session.session_id!r}: it already exists"
            ) from exc


__all__ = ["PostgresDb"]
