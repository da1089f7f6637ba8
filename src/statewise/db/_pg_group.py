"""PostgresDb's group commit: the writers of one session that `db._group` queued, landed
by one `statewise_commit_group` call (`_pg_group_sql`).

A group needs what landed since its writers' bases, to rebase them. The locked way reads
it under the session row's lock (`FOR UPDATE`), then builds and commits: two round trips,
the lock held across the client's turn. But the group before it was landed by this
process, which knows what that group wrote: when that covers every base of the group (no
other process wrote the session since, as far as the bases tell), the group is built
from it and sent at once, one statement in its own transaction: one round trip. The
statement's compare-and-swap on each scope stays the judge; a commit that finds a scope
moved by another process gets VersionConflict (nothing of it written) and its writer
rebases again, by the locked way."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from psycopg import errors as pg_errors

from statewise.db import _codec, _pg_text
from statewise.db._pg_arrays import BigintArray, FloatArray, TextArray
from statewise.db._pg_commit import (
    PgCommitTarget,
    event_arrays,
    reply_result,
    roll_back,
    run_commit,
    write_arrays,
)
from statewise.db._pg_group_sql import commit_group_call
from statewise.db.base import GroupEntry, GroupReads, RebasedOnUnlanded
from statewise.db.records import Commit, CommitResult, ScopeKey
from statewise.exceptions import StorageError, VersionConflict

KEPT_DELTAS = 64  # per scope, the newest deltas a session's last group leaves known
KEPT_BYTES = 1 << 20  # per session at most (their stored size), else nothing is kept
KEPT_SESSIONS = 256  # sessions whose last group is known, then all forgotten at once


class KnownLanded:
    """Per session, what the last group this process landed leaves known (`GroupReads`
    after it: the session's record, its scopes' versions and their newest deltas), and
    whether to trust it: not when other processes write the session too (then a group
    built from it would mostly lose, a round trip for nothing). Trusted again once a
    locked group finds that nobody else landed since."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._known: dict[str, tuple[GroupReads, bool]] = {}

    def take(self, session_id: str) -> tuple[GroupReads | None, bool]:
        """What is known and whether it is trusted; the caller's until it `keep`s."""
        with self._guard:
            return self._known.pop(session_id, (None, False))

    def keep(self, session_id: str, reads: GroupReads, trusted: bool) -> None:
        size = 0
        for key, deltas in reads.landed.items():
            if len(deltas) > KEPT_DELTAS:
                reads.landed[key] = deltas = deltas[-KEPT_DELTAS:]
            size += sum(d.stored_bytes or 0 for d in deltas)
        if size > KEPT_BYTES:
            return  # (large deltas: the next group reads what it needs under the lock)
        with self._guard:
            if len(self._known) >= KEPT_SESSIONS:
                self._known.clear()
            self._known[session_id] = (reads, trusted)


def _covers(reads: GroupReads, held: Mapping[ScopeKey, int]) -> bool:
    """Whether `reads` has every delta from `held` up to the version it knows, and knows
    no older version than `held` (else another writer landed after what it knows)."""
    for key, base in held.items():
        version = reads.versions.get(key)
        if version is None or base > version:
            return False
        if base < version:
            tail = [d.version for d in reads.landed.get(key, ()) if d.version > base]
            if tail != list(range(base + 1, version + 1)):
                return False
    return True


def run_group(
    db: PgCommitTarget, known: KnownLanded, session_id: str, entries: Sequence[GroupEntry]
) -> list[CommitResult | Exception]:
    """`BaseDb.commit_rebased_together` (and `commit_rebased`, a group of one).

    The entries from the first that did not land on (its commit lost a compare-and-swap,
    or its commit id had landed before: it applied nothing, and the server skipped the
    ones rebased onto it) go once more, under the lock, rebased anew: asked for their
    bases again, their writers take back what those rebases applied (see
    `RebasedOnUnlanded`)."""
    outcomes, lost = _once(db, known, session_id, entries)
    if lost:
        again = [entries[i] for i in lost]
        bases = [dict(bases_of()) for bases_of, _ in again]
        redone, _ = _locked(db, known, session_id, again, bases, known.take(session_id)[0])
        for index, outcome in zip(lost, redone, strict=True):
            outcomes[index] = outcome
    return outcomes


def _once(
    db: PgCommitTarget, known: KnownLanded, session_id: str, entries: Sequence[GroupEntry]
) -> tuple[list[CommitResult | Exception], list[int]]:
    bases = [dict(bases_of()) for bases_of, _ in entries]
    reads, trusted = known.take(session_id)
    if reads is None or not trusted or not all(_covers(reads, held) for held in bases):
        return _locked(db, known, session_id, entries, bases, reads)
    now = time.time()
    commits, outcomes = _build(entries, bases, reads, now)
    sent = [c for c in commits if c is not None]
    if not sent:
        known.keep(session_id, reads, True)
        return outcomes, []
    sql, params = group_params(db._s, sent, now)
    with db._connection() as conn:
        try:
            row = conn.execute(sql, params).fetchone()
        except psycopg.Error as exc:
            if conn.broken or conn.closed:
                # It landed whole or not at all: each commit's id tells which.
                return _resend(db, commits, outcomes), []
            return _failed(session_id, exc, commits, outcomes), []
    return _outcomes(known, session_id, reads, commits, outcomes, row, now, True)


def _locked(
    db: PgCommitTarget,
    known: KnownLanded,
    session_id: str,
    entries: Sequence[GroupEntry],
    bases: list[dict[ScopeKey, int]],
    before: GroupReads | None,
) -> tuple[list[CommitResult | Exception], list[int]]:
    """The group under the session row's lock, what landed read once (`GroupReads`), its
    commits and COMMIT pipelined: two round trips. With the lock, no writer of another
    process lands in between; the commits' compare-and-swap still guards a shared
    `user:`/`app:` scope. `before`: what was known, to tell whether anybody else landed
    since."""
    s = db._s
    attempts = db.attempts_after_drops
    for attempt in range(1, attempts + 1):
        commits: list[Commit | None] = []
        outcomes: list[CommitResult | Exception] = []
        with db._connection() as conn:
            try:
                try:
                    with conn.pipeline():
                        conn.execute("BEGIN")
                        conn.execute(
                            f"SELECT 1 FROM {s}.sessions WHERE session_id = %s FOR UPDATE",
                            (session_id,),
                        )
                        reads = GroupReads(
                            db._probe_tails_on(conn, session_id, GroupReads.oldest(bases))
                        )
                        quiet = before is not None and all(
                            before.versions.get(key) == version
                            for key, version in reads.versions.items()
                        )
                        now = time.time()
                        commits, outcomes = _build(entries, bases, reads, now)
                        sent = [c for c in commits if c is not None]
                        cur = None
                        if sent:
                            cur = conn.execute(*group_params(s, sent, now))
                        conn.execute("COMMIT")
                    row = cur.fetchone() if cur is not None else None
                except BaseException:
                    roll_back(conn)
                    raise
            except psycopg.Error as exc:
                if conn.broken or conn.closed:
                    if commits:  # built: each sent one answers by its id when sent again
                        return _resend(db, commits, outcomes), []
                    if attempt < attempts:
                        continue  # it died before anything was built: on a fresh one
                if commits:
                    return _failed(session_id, exc, commits, outcomes), []
                raise _failure(session_id, exc) from exc
        if row is None:
            return outcomes, []
        return _outcomes(known, session_id, reads, commits, outcomes, row, now, quiet)
    raise AssertionError("unreachable")  # pragma: no cover


def _build(
    entries: Sequence[GroupEntry],
    bases: list[dict[ScopeKey, int]],
    reads: GroupReads,
    now: float,
) -> tuple[list[Commit | None], list[CommitResult | Exception]]:
    """Each entry's commit, rebased onto what `reads` knows and onto the entries before
    it; an entry whose build raised (that writer's: a strict key, a bad value) gets its
    error and sends nothing."""
    commits: list[Commit | None] = []
    outcomes: list[CommitResult | Exception] = []
    for held, (_, build) in zip(bases, entries, strict=True):
        try:
            commit = build(reads.for_entry(held))
        except Exception as exc:
            commits.append(None)
            outcomes.append(exc)
            continue
        commits.append(commit)
        outcomes.append(VersionConflict("(pending)", 0))  # its reply, once it comes
        reads.wrote(commit, now)
    return commits, outcomes


def _outcomes(
    known: KnownLanded,
    session_id: str,
    reads: GroupReads,
    commits: list[Commit | None],
    outcomes: list[CommitResult | Exception],
    row: tuple[Any, ...] | None,
    now: float,
    trusted: bool,
) -> tuple[list[CommitResult | Exception], list[int]]:
    """Each commit's outcome from its reply, and the positions of those that lost."""
    assert row is not None
    replies = iter(row[0])
    lost = []
    clean = reads.record is not None
    for index, commit in enumerate(commits):
        if commit is None:
            continue
        reply = next(replies)
        if reply == "S":
            outcomes[index] = RebasedOnUnlanded(f"session {session_id!r} (skipped)", 0)
            lost.append(index)
        elif reply.startswith("C"):
            outcomes[index] = conflict_of(reply[1:])
            lost.append(index)
            clean = False
        else:
            outcomes[index] = reply_result(commit, reply, now)
            clean = clean and reply.startswith("N")
    if clean:  # (else what it knows may not be what landed: the next group reads)
        known.keep(session_id, reads, trusted)
    return outcomes, lost


def conflict_of(detail: str) -> VersionConflict:
    info = _codec.loads(detail or "{}")
    key = ScopeKey(info.get("scope", "session"), str(info.get("id")))
    return VersionConflict(str(key), int(info.get("expected") or 0), info.get("actual"))


def _failure(session_id: str, exc: psycopg.Error) -> Exception:
    if isinstance(exc, pg_errors.SerializationFailure | pg_errors.DeadlockDetected):
        # The server aborted us to break a lock cycle: nothing was written.
        return VersionConflict(f"session {session_id!r} ({exc.sqlstate})", 0)
    return StorageError(f"PostgreSQL commit of session {session_id!r} failed: {exc}")


def _failed(
    session_id: str,
    exc: psycopg.Error,
    commits: list[Commit | None],
    outcomes: list[CommitResult | Exception],
) -> list[CommitResult | Exception]:
    """The group's statement failed, nothing of it landed: the first commit sent fails
    with what that means, the ones rebased onto it are `RebasedOnUnlanded` (when it means
    losing a race) or fail alike."""
    failure = _failure(session_id, exc)
    first = True
    for index, commit in enumerate(commits):
        if commit is not None:
            if isinstance(failure, VersionConflict) and not first:
                outcomes[index] = RebasedOnUnlanded(failure.scope, 0)
            else:
                outcomes[index] = failure
            first = False
    return outcomes


def _resend(
    db: PgCommitTarget,
    commits: list[Commit | None],
    outcomes: list[CommitResult | Exception],
) -> list[CommitResult | Exception]:
    """After the group's connection died with it in flight: it landed whole or not at
    all, so each commit is sent again on its own, in order (its id answers it if the
    group landed; if not, the ones before it land first, as its base has them), until
    one does not land."""
    recovered: list[CommitResult | Exception] = []
    lost = False
    for commit, outcome in zip(commits, outcomes, strict=True):
        if commit is None:
            recovered.append(outcome)
        elif lost:  # (rebased onto one that did not land: not sent, see `RebasedOnUnlanded`)
            recovered.append(RebasedOnUnlanded(f"session {commit.session.session_id!r}", 0))
        else:
            try:
                recovered.append(run_commit(db, commit))
            except Exception as exc:
                recovered.append(exc)
                lost = True
    return recovered


def group_params(s: str, commits: Sequence[Commit], now: float) -> tuple[str, tuple[Any, ...]]:
    """The `statewise_commit_group` call of `commits` (one session's) and its parameters,
    encoded before any I/O like `statewise_commit`'s."""
    first = next((c for c in commits if c.create_session), commits[0]).session
    writes = [w for c in commits for w in c.writes]
    events = [e for c in commits for e in c.events]
    runs = [c.run for c in commits]
    params: tuple[Any, ...] = (
        first.session_id,
        now,
        first.user_id,
        first.app_name,
        first.kind,
        _codec.dumps(first.metadata),
        TextArray([c.commit_id or None for c in commits]),
        BigintArray([int(c.create_session) for c in commits]),
        TextArray([c.run_id for c in commits]),
        BigintArray([c.step for c in commits]),
        BigintArray([len(c.writes) for c in commits]),
        BigintArray([len(c.events) for c in commits]),
        *write_arrays(writes),
        *event_arrays(events),
        TextArray([r.run_id if r else None for r in runs]),
        TextArray([r.status if r else None for r in runs]),
        TextArray([r.agent_name if r else None for r in runs]),
        TextArray([_pg_text.encode(r.input) if r else None for r in runs]),
        TextArray([_pg_text.encode(r.content) if r else None for r in runs]),
        TextArray([_codec.dumps(r.messages) if r else None for r in runs]),
        TextArray([_codec.dumps(r.metrics) if r else None for r in runs]),
        TextArray([_pg_text.encode(r.error) if r else None for r in runs]),
        FloatArray([(r.created_at or None) if r else None for r in runs]),
    )
    return commit_group_call(s), params


__all__ = ["KnownLanded", "conflict_of", "group_params", "run_group"]
