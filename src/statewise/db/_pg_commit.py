"""PostgresDb's writes: the one-round-trip commit (with its exactly-once recovery) and import."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg.pq import TransactionStatus

from statewise.db import _codec, _pg_text
from statewise.db import _pg_sql as Q
from statewise.db._pg_arrays import BigintArray, TextArray
from statewise.db._pg_async import LoopConnections
from statewise.db.base import ProbedTails
from statewise.db.records import (
    Commit,
    CommitResult,
    DeltaRecord,
    EventRecord,
    NewEvent,
    RunRecord,
    ScopeKey,
    ScopeWrite,
    SessionRecord,
    applied_result,
    decode_commit_result,
)
from statewise.exceptions import DatabaseUnavailableError, StorageError, VersionConflict

T = TypeVar("T")


class PgCommitTarget(Protocol):
    """What the commit path uses of a `PostgresDb`, typed here so that `postgres.py`
    imports this module at its top and this module never imports it (no circle)."""

    pool_size: int
    _s: str
    _loop_commits: LoopConnections

    @property
    def attempts_after_drops(self) -> int: ...

    def _connection(self) -> AbstractContextManager[psycopg.Connection[Any]]: ...

    def _read(self, fn: Callable[[psycopg.Connection[Any]], T]) -> T: ...

    def _unavailable(self, exc: BaseException) -> DatabaseUnavailableError: ...

    def _probe_tails_on(
        self,
        conn: psycopg.Connection[Any],
        session_id: str,
        bases: Mapping[ScopeKey, int],
        limit: int | None = None,
    ) -> ProbedTails: ...


def write_arrays(writes: Sequence[ScopeWrite]) -> list[Any]:
    """The scope writes as the commit functions take them (`statewise_commit`,
    `statewise_commit_group`): one array per field, a write at each index."""
    snapshots = [w.snapshot_text for w in writes]
    return [
        TextArray([w.key.kind for w in writes]),
        TextArray([w.key.id for w in writes]),
        BigintArray([w.base_version for w in writes]),
        TextArray([w.segments_text for w in writes]),
        TextArray([_codec.dumps(w.conflicts) if w.conflicts else None for w in writes]),
        TextArray(snapshots),
        BigintArray([w.delta_bytes for w in writes]),
        BigintArray([len(t) if t is not None else 0 for t in snapshots]),
    ]


def event_arrays(events: Sequence[NewEvent]) -> list[Any]:
    """The events as the commit functions take them, like `write_arrays`."""
    return [
        TextArray([e.run_id for e in events]),
        TextArray([e.type for e in events]),
        TextArray([_codec.dumps(e.data) for e in events]),
    ]


def commit_params(s: str, commit: Commit, now: float) -> tuple[str, tuple[Any, ...]]:
    """The `statewise_commit` call and its parameters. Encoding happens here, before any
    I/O, so a value that is not JSON fails without touching the database."""
    session = commit.session
    run = commit.run
    params: tuple[Any, ...] = (
        commit.commit_id or None,
        session.session_id,
        commit.create_session,
        session.user_id,
        session.app_name,
        session.kind,
        _codec.dumps(session.metadata),
        now,
        commit.run_id,
        commit.step,
        *write_arrays(commit.writes),
        *event_arrays(commit.events),
        run.run_id if run else None,
        run.status if run else None,
        run.agent_name if run else None,
        _pg_text.encode(run.input) if run else None,
        _pg_text.encode(run.content) if run else None,
        _codec.dumps(run.messages) if run else None,
        _codec.dumps(run.metrics) if run else None,
        _pg_text.encode(run.error) if run else None,
        (run.created_at or None) if run else None,
    )
    return Q.commit_call(s), params


def run_commit(db: PgCommitTarget, commit: Commit) -> CommitResult:
    now = time.time()
    sql, params = commit_params(db._s, commit, now)
    sent = _send(db, commit, sql, params, now)
    return sent if isinstance(sent, CommitResult) else _result(commit, sent, now)


def run_commit_new(
    db: PgCommitTarget, commit: Commit, probe_params: tuple[Any, ...]
) -> tuple[tuple[Any, ...], CommitResult | None]:
    """`BaseDb.commit_new` in one statement (`commit_new_call`): the probe's row, and the
    commit's result (None: not called). Sent again, as `run_commit` sends a commit, when
    its connection dies under it; only a commit with an id comes here, so a copy that
    landed is seen by the probe (the session exists) and later answered by its id."""
    now = time.time()
    _sql, params = commit_params(db._s, commit, now)
    row = _send(db, commit, Q.commit_new_call(db._s), (*params, *probe_params), now)
    assert isinstance(row, tuple)  # (a commit with an id is never looked for)
    reply = row[9]
    return row, None if reply is None else reply_result(commit, str(reply), now)


def _send(
    db: PgCommitTarget, commit: Commit, sql: str, params: tuple[Any, ...], now: float
) -> tuple[Any, ...] | CommitResult:
    """The row of a commit's statement, sent again when its connection dies under it
    (`commit_failure` says when); for a commit without an id, whose copy may have landed
    before the connection died, that copy's result where it is found instead."""
    attempts = commit_attempts(db, commit)
    for attempt in range(1, attempts + 1):
        with db._connection() as conn:
            try:
                row = conn.execute(sql, params).fetchone()
            except psycopg.Error as exc:
                failure = commit_failure(db, commit, exc, conn, attempt == attempts)
                if failure is not None:
                    raise failure from exc
                if commit.commit_id:
                    continue
                last_seq = _find_landed(db, commit, now)
                if last_seq is not None:
                    return applied_result(commit, last_seq, now)
                continue
        assert row is not None
        return tuple(row)
    raise AssertionError("unreachable")  # pragma: no cover


async def arun_commit(db: PgCommitTarget, commit: Commit) -> CommitResult:
    """`run_commit` through the event loop's own connections (`_pg_async`), for a commit
    with an id (which makes sending it again safe)."""
    now = time.time()
    sql, params = commit_params(db._s, commit, now)
    attempts = commit_attempts(db, commit)
    for attempt in range(1, attempts + 1):
        async with db._loop_commits.connection() as conn:
            try:
                row = await (await conn.execute(sql, params)).fetchone()
            except psycopg.Error as exc:
                failure = commit_failure(db, commit, exc, conn, attempt == attempts)
                if failure is not None:
                    raise failure from exc
                continue
        return _result(commit, row, now)
    raise AssertionError("unreachable")  # pragma: no cover


def commit_attempts(db: PgCommitTarget, commit: Commit) -> int:
    """How many connections a commit is sent on while each one dies under it. With a
    commit id sending again is always safe: past every pooled connection that died with
    the same fault, up to a fresh one."""
    return db.pool_size + 2 if commit.commit_id else 2


def commit_failure(
    db: PgCommitTarget,
    commit: Commit,
    exc: psycopg.Error,
    conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any],
    last: bool,
) -> BaseException | None:
    """What a failed `statewise_commit` call means: the error to raise, or None when the
    connection died with the call in flight. It is one transaction, so it landed whole or
    not at all: with a commit id it can be sent again (the server answers a landed id, and
    a copy still executing waits for it); without one, its rows tell."""
    if exc.sqlstate == Q.CONFLICT_SQLSTATE:
        return _conflict(exc)
    if isinstance(exc, pg_errors.SerializationFailure | pg_errors.DeadlockDetected):
        # The server aborted us to break a lock cycle: nothing was written; the store
        # re-probes and tries again, as after any lost race.
        sid = commit.session.session_id
        return VersionConflict(f"session {sid!r} ({exc.sqlstate})", 0)
    if not (conn.broken or conn.closed) or last:
        if isinstance(exc, psycopg.OperationalError):
            return db._unavailable(exc)
        return StorageError(
            f"PostgreSQL commit of session {commit.session.session_id!r} failed: {exc}"
        )
    return None


def roll_back(conn: psycopg.Connection[Any]) -> None:
    """End a transaction that failed part way, so the connection goes back to the pool
    clean (a dead one is replaced by the pool anyway)."""
    if conn.broken or conn.closed or conn.info.transaction_status == TransactionStatus.IDLE:
        return
    with contextlib.suppress(psycopg.Error):
        conn.execute("ROLLBACK")


def _result(commit: Commit, row: tuple[Any, ...] | None, now: float) -> CommitResult:
    assert row is not None
    return reply_result(commit, str(row[0]), now)


def reply_result(commit: Commit, reply: str, now: float) -> CommitResult:
    """What `statewise_commit` (or `statewise_commit_group`, for one of its commits)
    answered: `N<last_seq>|...` applied now, `R<result>` the commit id had landed before."""
    if reply.startswith("R"):
        return decode_commit_result(commit, reply[1:], now)
    return applied_result(commit, int(reply[1:].split("|", 1)[0]), now)


def _find_landed(db: PgCommitTarget, commit: Commit, now: float) -> int | None:
    """The commit's last_seq if its rows are in the database (they carry `now`), else None."""
    s, sid = db._s, commit.session.session_id

    def look(conn: psycopg.Connection[Any]) -> int | None:
        if commit.events:
            row = conn.execute(
                f"SELECT max(seq) FROM {s}.events WHERE session_id = %s AND created_at = %s",
                (sid, now),
            ).fetchone()
            return int(row[0]) if row and row[0] is not None else None
        if commit.writes:
            w = commit.writes[0]
            row = conn.execute(
                f"SELECT 1 FROM {s}.deltas WHERE kind = %s AND scope_id = %s AND version = %s "
                f"AND created_at = %s",
                (w.key.kind, w.key.id, w.base_version + 1, now),
            ).fetchone()
            if row is None:
                return None
        row = conn.execute(
            f"SELECT last_seq, updated_at FROM {s}.sessions WHERE session_id = %s", (sid,)
        ).fetchone()
        if row is None or (not commit.writes and row[1] != now):
            return None
        return int(row[0])

    return db._read(look)


def _conflict(exc: psycopg.Error) -> VersionConflict:
    info = _codec.loads(exc.diag.message_detail or "{}")
    key = ScopeKey(info.get("scope", "session"), str(info.get("id")))
    return VersionConflict(str(key), int(info.get("expected") or 0), info.get("actual"))


def import_in(
    s: str,
    conn: psycopg.Connection[Any],
    session: SessionRecord,
    deltas: Sequence[DeltaRecord],
    events: Sequence[EventRecord],
    runs: Sequence[RunRecord],
) -> None:
    sid = session.session_id
    conn.execute(
        f"INSERT INTO {s}.sessions ({Q.SESSION_COLUMNS}) VALUES (%s,%s,%s,%s,%s,%s,%s,%s)",
        (
            sid,
            session.user_id,
            session.app_name,
            session.kind,
            session.created_at,
            session.updated_at,
            session.last_seq,
            _codec.dumps(session.metadata),
        ),
    )
    with conn.cursor() as cur:
        if deltas:
            cur.executemany(
                f"INSERT INTO {s}.deltas (kind, scope_id, version, session_id, run_id, step, "
                f"segments, conflicts, created_at) VALUES ('session',%s,%s,%s,%s,%s,%s,%s,%s)",
                [
                    (
                        sid,
                        d.version,
                        sid,
                        d.run_id,
                        d.step,
                        _codec.dumps([seg.to_dict() for seg in d.segments]),
                        _codec.dumps(d.conflicts) if d.conflicts else None,
                        d.created_at,
                    )
                    for d in deltas
                ],
            )
            cur.execute(
                f"INSERT INTO {s}.scopes (kind, scope_id, version, updated_at) "
                f"VALUES ('session', %s, %s, %s)",
                (sid, max(d.version for d in deltas), session.updated_at),
            )
        if events:
            cur.executemany(
                f"INSERT INTO {s}.events (session_id, seq, run_id, type, data, created_at) "
                f"VALUES (%s,%s,%s,%s,%s,%s)",
                [
                    (sid, e.seq, e.run_id, e.type, _codec.dumps(e.data), e.created_at)
                    for e in events
                ],
            )
        if runs:
            cur.executemany(
                f"INSERT INTO {s}.runs (session_id, {Q.RUN_COLUMNS}) "
                f"VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
                [
                    (
                        sid,
                        r.run_id,
                        r.status,
                        r.agent_name,
                        _pg_text.encode(r.input),
                        _pg_text.encode(r.content),
                        _codec.dumps(r.messages),
                        _codec.dumps(r.metrics),
                        _pg_text.encode(r.error),
                        r.created_at,
                        r.updated_at,
                    )
                    for r in runs
                ],
            )
