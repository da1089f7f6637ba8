"""In-memory storage: the reference backend, for tests and throwaway agents.

It stores the same encoded records as the durable backends (JSON text), so it catches a
non-serializable value or an aliasing bug exactly where they would. The events of one
commit and its run record's messages and metrics are encoded together, in one call: the
text is the check and the copy at once, and reads, which are rare next to commits, decode
the batch they need. Keeping text rather than objects also keeps a long session's
history out of the garbage collector's way (it traced every kept message on each full
collection): an event's row is a tuple of strings and numbers, which the collector stops
tracking once it has seen it, and the rows of one commit share one batch by referring to
the same string.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, ParamSpec, TypeVar

from statewise.db import _codec
from statewise.db.base import BaseDb, to_timestamp_cutoff, validate_id
from statewise.db.listing import listed_in_memory
from statewise.db.rebuild import decode_delta_row, rebuilt_scope
from statewise.db.records import (
    Commit,
    CommitResult,
    DeltaRecord,
    EventRecord,
    RunRecord,
    RunStatus,
    ScopeKey,
    ScopeState,
    ScopeWrite,
    SessionRecord,
    decode_commit_result,
    encode_commit_result,
)
from statewise.db.retention import (
    LIVE_RUN_STATUSES,
    Compaction,
    CompactionPlan,
    Horizon,
    Retention,
    default_retention,
    forgets,
)
from statewise.exceptions import CorruptRecordError, StorageError, VersionConflict

P = ParamSpec("P")
T = TypeVar("T")


@dataclass(slots=True)
class _Scope:
    version: int = 0
    snapshot_version: int = 0
    snapshot_bytes: int = 0
    tail_bytes: int = 0
    snapshots: dict[int, str] = field(default_factory=dict)
    # version -> (session_id, run_id, step, segments json, conflicts json, created_at)
    deltas: dict[int, tuple[str | None, str | None, int | None, str, str | None, float]] = field(
        default_factory=dict
    )


# The JSON text of one commit's event data (and its run's messages and metrics): a list
# in event order, shared by that commit's rows.
_Batch = str
# seq, run_id, type, the batch holding its data, its index there, created_at
_EventRow = tuple[int, str | None, str, _Batch, int, float]
# A run's own fields (run_id, status, agent_name, input, content, error, created_at,
# updated_at), and where its messages and metrics are: a batch and an index (no batch:
# both empty). Strings and numbers only, like an event's row.
_RunRow = tuple[
    str, RunStatus, str | None, str | None, str | None, str | None, float, float, _Batch | None, int
]


def _run_row(
    run: RunRecord,
    created_at: float,
    updated_at: float,
    body: _Batch | None,
    index: int,
    origin: _RunRow | None = None,
) -> _RunRow:
    """`run` as a stored row; with `origin` (the run's row stored before), that row's
    agent_name, input and created_at stay, as SQL's upsert keeps them. Written out rather
    than walking the dataclass's fields, which costs more than the rest of storing a run;
    a test checks no field is missed."""
    agent_name, input_ = run.agent_name, run.input
    if origin is not None:
        agent_name, input_, created_at = origin[2], origin[3], origin[6]
    return (
        run.run_id,
        run.status,
        agent_name,
        input_,
        run.content,
        run.error,
        created_at,
        updated_at,
        body,
        index,
    )


def _copy_session(record: SessionRecord) -> SessionRecord:
    """A copy of a stored session record (its metadata its own), written out as
    `_run_row` is; a test checks no field is missed."""
    return SessionRecord(
        session_id=record.session_id,
        user_id=record.user_id,
        app_name=record.app_name,
        kind=record.kind,
        created_at=record.created_at,
        updated_at=record.updated_at,
        last_seq=record.last_seq,
        metadata=dict(record.metadata),
    )


def _run_out(session_id: str, row: _RunRow) -> RunRecord:
    """A stored run as a new record of its own."""
    run_id, status, agent_name, input_, content, error, created_at, updated_at, body, index = row
    out = RunRecord(
        session_id=session_id,
        run_id=run_id,
        status=status,
        agent_name=agent_name,
        input=input_,
        content=content,
        error=error,
        created_at=created_at,
        updated_at=updated_at,
    )
    if body is not None:
        try:
            out.messages, out.metrics = _codec.loads(body)[index]
        except ValueError as exc:
            raise CorruptRecordError(f"session {session_id!r}: run {run_id!r} is not JSON") from exc
    return out


class InMemoryDb(BaseDb):
    """Everything in this process's memory; gone when it exits."""

    loses_replies = False

    def __init__(self, *, retention: Retention | None = None) -> None:
        self.retention = default_retention(retention)
        self._horizons: dict[str, Horizon] = {}
        self._lock = threading.RLock()
        self._sessions: dict[str, SessionRecord] = {}
        self._scopes: dict[ScopeKey, _Scope] = {}
        self._events: dict[str, list[_EventRow]] = {}
        self._runs: dict[str, dict[str, _RunRow]] = {}
        # session id -> commit id -> (versions, last_seq, event count), encoded only when
        # the id comes again
        self._commits: dict[str, dict[str, tuple[dict[ScopeKey, int], int, int]]] = {}
        self._leases: dict[tuple[str, str], tuple[str, float]] = {}  # run -> (owner, expiry)

    def __repr__(self) -> str:
        return "InMemoryDb()"

    def close(self) -> None:
        pass

    def probe(
        self, session_id: str, keys: Sequence[ScopeKey]
    ) -> tuple[SessionRecord | None, dict[ScopeKey, int]]:
        with self._lock:
            record = self._sessions.get(session_id)
            copy = _copy_session(record) if record else None
            scopes = self._scopes
            versions = {k: (scope.version if (scope := scopes.get(k)) else 0) for k in keys}
            return copy, versions

    def load_scopes(self, keys: Sequence[ScopeKey]) -> dict[ScopeKey, ScopeState]:
        result = {}
        with self._lock:
            for key in keys:
                scope = self._scopes.get(key)
                if scope is None:
                    result[key] = ScopeState(key=key)
                    continue
                rows = [
                    (v, scope.deltas[v][3])
                    for v in range(scope.snapshot_version + 1, scope.version + 1)
                    if v in scope.deltas
                ]
                result[key] = rebuilt_scope(
                    key,
                    scope.version,
                    scope.snapshot_version,
                    scope.snapshot_bytes,
                    scope.tail_bytes,
                    scope.snapshots.get(scope.snapshot_version),
                    rows,
                )
        return result

    def commit(self, commit: Commit) -> CommitResult:
        now = time.time()
        session = commit.session
        sid = session.session_id
        commit_id = commit.commit_id
        writes = commit.writes
        events = commit.events
        run = commit.run
        with self._lock:
            ids = self._commits.get(sid)
            if ids is not None and commit_id:
                landed = ids.get(commit_id)
                if landed is not None:
                    return decode_commit_result(commit, encode_commit_result(*landed), now)
            existing = self._sessions.get(sid)
            if commit.create_session:
                if existing is not None:
                    raise VersionConflict(f"session {sid!r}", 0, None)
            elif existing is None:
                raise VersionConflict(f"session {sid!r}", 1, None)
            scopes = self._scopes
            for write in writes:
                scope = scopes.get(write.key)
                actual = scope.version if scope else 0
                if actual != write.base_version:
                    raise VersionConflict(str(write.key), write.base_version, actual)
            # Encode everything before mutating anything: a failure here changes nothing.
            # The deltas' segments are encoded already (`ScopeWrite.segments_text`), and so
            # are snapshots (`ScopeWrite.snapshot_text`).
            payload: list[Any] = [e.data for e in events]
            body = run is not None and bool(run.messages or run.metrics)
            if body:
                assert run is not None
                payload.append((run.messages, run.metrics))
            batch = _codec.dumps(payload)
            conflicts_texts: Sequence[str | None] = ()
            snapshots: Sequence[str | None] = ()
            if writes:  # (a run's start and end commits usually write no state)
                conflicts_texts = [
                    _codec.dumps(write.conflicts) if write.conflicts else None for write in writes
                ]
                snapshots = [write.snapshot_text for write in writes]
            if existing is None:
                existing = SessionRecord(**session.to_dict())
                existing.created_at = now
                existing.last_seq = 0
                self._sessions[sid] = existing
            first_seq = existing.last_seq + 1
            last_seq = existing.last_seq = existing.last_seq + len(events)
            existing.updated_at = now
            versions: dict[ScopeKey, int] = {}
            if writes:
                self._apply_writes(commit, writes, conflicts_texts, snapshots, versions, now)
            rows = self._events.get(sid)
            if rows is None:
                rows = self._events[sid] = []
            rows.extend(
                [
                    (first_seq + i, event.run_id, event.type, batch, i, now)
                    for i, event in enumerate(events)
                ]
            )
            if run is not None:
                runs = self._runs.get(sid)
                if runs is None:
                    runs = self._runs[sid] = {}
                runs[run.run_id] = _run_row(
                    run,
                    run.created_at or now,
                    now,
                    batch if body else None,
                    len(events),
                    runs.get(run.run_id),
                )
            if commit_id:
                # (The result is kept as it is: nothing changes `versions` afterwards.)
                if ids is None:
                    ids = self._commits[sid] = {}
                ids[commit_id] = (versions, last_seq, len(events))
            return CommitResult(
                versions=versions, first_seq=first_seq, last_seq=last_seq, committed_at=now
            )

    def _apply_writes(
        self,
        commit: Commit,
        writes: Sequence[ScopeWrite],
        conflicts_texts: Sequence[str | None],
        snapshots: Sequence[str | None],
        versions: dict[ScopeKey, int],
        now: float,
    ) -> None:
        """Store each write's delta (and snapshot), filling `versions` (the lock held)."""
        scopes = self._scopes
        sid = commit.session.session_id
        for write, conflicts, snapshot in zip(writes, conflicts_texts, snapshots, strict=True):
            scope = scopes.get(write.key)
            if scope is None:
                scope = scopes[write.key] = _Scope()
            version = scope.version = scope.version + 1
            scope.deltas[version] = (
                sid,
                commit.run_id,
                commit.step,
                write.segments_text,
                conflicts,
                now,
            )
            scope.tail_bytes += write.delta_bytes
            if snapshot is not None:
                scope.snapshots[version] = snapshot
                scope.snapshot_version = version
                scope.snapshot_bytes = len(snapshot)
                scope.tail_bytes = 0
            versions[write.key] = version

    def read_deltas(
        self,
        key: ScopeKey,
        *,
        after_version: int = 0,
        upto_version: int | None = None,
        limit: int | None = None,
    ) -> list[DeltaRecord]:
        with self._lock:
            scope = self._scopes.get(key)
            if scope is None:
                return []
            last = scope.version if upto_version is None else min(upto_version, scope.version)
            versions = [v for v in range(after_version + 1, last + 1) if v in scope.deltas]
            if limit is not None:
                versions = versions[:limit]
            return [decode_delta_row(key, v, *scope.deltas[v]) for v in versions]

    def read_snapshot(self, key: ScopeKey, at_or_before: int) -> tuple[int, dict[str, Any]]:
        with self._lock:
            scope = self._scopes.get(key)
            if scope is None:
                return 0, {}
            candidates = [v for v in scope.snapshots if v <= at_or_before]
            if not candidates:
                return 0, {}
            version = max(candidates)
            try:
                return version, _codec.loads(scope.snapshots[version])
            except ValueError as exc:
                raise CorruptRecordError(f"{key}: snapshot at {version} is not JSON") from exc

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
        with self._lock:
            rows = [
                row
                for row in self._events.get(session_id, [])
                if (after is None or row[0] > after)
                and (before is None or row[0] < before)
                and (not types or row[2] in types)
                and (run_id is None or row[1] == run_id)
            ]
        if limit is not None:
            rows = (rows[-limit:] if limit else []) if after is None else rows[:limit]
        events = []
        decoded: dict[int, list[Any]] = {}  # each batch read once, each event its own copy
        for seq, run_id, type_, batch, index, created_at in rows:
            data = decoded.get(id(batch))
            if data is None:
                try:
                    data = decoded[id(batch)] = _codec.loads(batch)
                except ValueError as exc:
                    raise CorruptRecordError(
                        f"session {session_id!r}: event {seq} is not JSON"
                    ) from exc
            events.append(
                EventRecord(
                    session_id=session_id,
                    seq=seq,
                    run_id=run_id,
                    type=type_,
                    data=data[index],
                    created_at=created_at,
                )
            )
        return events

    def read_runs(
        self, session_id: str, *, limit: int | None = None, status: str | None = None
    ) -> list[RunRecord]:
        with self._lock:
            rows = [
                row
                for row in self._runs.get(session_id, {}).values()
                if status is None or row[1] == status
            ]
        if limit is not None:
            rows = rows[-limit:] if limit else []
        return [_run_out(session_id, row) for row in rows]

    def get_run(self, session_id: str, run_id: str) -> RunRecord | None:
        with self._lock:
            row = self._runs.get(session_id, {}).get(run_id)
        return _run_out(session_id, row) if row else None

    def list_sessions(
        self,
        *,
        user_id: str | None = None,
        app_name: str | None = None,
        limit: int = 50,
        offset: int = 0,
        cursor: str | None = None,
    ) -> list[SessionRecord]:
        with self._lock:
            found = listed_in_memory(
                self._sessions.values(),
                user_id=user_id,
                app_name=app_name,
                limit=limit,
                offset=offset,
                cursor=cursor,
            )
            return [SessionRecord(**s.to_dict()) for s in found]

    def claim_run(self, session_id: str, run_id: str, owner: str, ttl: float) -> bool:
        now = time.time()
        with self._lock:
            held = self._leases.get((session_id, run_id))
            if held is not None and held[0] != owner and held[1] > now:
                return False
            self._leases[(session_id, run_id)] = (owner, now + ttl)
            return True

    def release_run(self, session_id: str, run_id: str, owner: str) -> None:
        with self._lock:
            held = self._leases.get((session_id, run_id))
            if held is not None and held[0] == owner:
                del self._leases[(session_id, run_id)]

    def delete_session(self, session_id: str) -> bool:
        validate_id(session_id)
        with self._lock:
            existed = self._sessions.pop(session_id, None) is not None
            self._events.pop(session_id, None)
            self._runs.pop(session_id, None)
            self._scopes.pop(ScopeKey("session", session_id), None)
            self._commits.pop(session_id, None)
            self._horizons.pop(session_id, None)
            for lease in [k for k in self._leases if k[0] == session_id]:
                del self._leases[lease]
            return existed

    def prune_sessions(
        self, *, older_than: float | timedelta | datetime, user_id: str | None = None
    ) -> int:
        cutoff = to_timestamp_cutoff(older_than, time.time())
        with self._lock:
            ids = [
                s.session_id
                for s in self._sessions.values()
                if s.updated_at < cutoff and (user_id is None or s.user_id == user_id)
            ]
        return sum(self.delete_session(i) for i in ids)

    def read_horizon(self, session_id: str) -> Horizon:
        with self._lock:
            return self._horizons.get(session_id) or Horizon()

    def write_compaction(self, plan: CompactionPlan) -> Compaction | None:
        sid = plan.session_id
        new = plan.new
        with self._lock:
            if sid not in self._sessions or self.read_horizon(sid) != plan.old:
                return None
            out = Compaction(session_id=sid, horizon=new)
            scope = self._scopes.get(ScopeKey("session", sid))
            if scope is not None and plan.snapshot is not None:
                folded = [v for v in scope.deltas if v <= new.version]
                if scope.snapshot_version < new.version:
                    scope.tail_bytes = max(
                        0,
                        scope.tail_bytes
                        - sum(
                            len(scope.deltas[v][3]) for v in folded if v > scope.snapshot_version
                        ),
                    )
                    scope.snapshot_version = new.version
                    scope.snapshot_bytes = len(plan.snapshot)
                scope.snapshots[new.version] = plan.snapshot
                for v in folded:
                    del scope.deltas[v]
                old_snapshots = [v for v in scope.snapshots if v < new.version]
                for v in old_snapshots:
                    del scope.snapshots[v]
                out.deltas, out.snapshots = len(folded), len(old_snapshots)
            runs = self._runs.get(sid, {})
            live = {run_id for run_id, row in runs.items() if row[1] in LIVE_RUN_STATUSES}
            events = self._events.get(sid, [])
            times = {row[0]: row[5] for row in events}
            kept = [row for row in events if row[5] > new.before or row[1] in live]
            out.events = len(events) - len(kept)
            self._events[sid] = kept
            gone = [
                run_id
                for run_id, row in runs.items()
                if row[1] not in LIVE_RUN_STATUSES and row[7] <= new.before
            ]
            for run_id in gone:
                del runs[run_id]
            out.runs = len(gone)
            ids = self._commits.get(sid, {})
            forgotten = [
                commit_id
                for commit_id, (_versions, last_seq, _n) in ids.items()
                if forgets(plan, commit_id, times.get(last_seq), live)
            ]
            for commit_id in forgotten:
                del ids[commit_id]
            out.commit_ids = len(forgotten)
            self._horizons[sid] = new
            return out

    def import_records(
        self,
        session: SessionRecord,
        deltas: Sequence[DeltaRecord],
        events: Sequence[EventRecord],
        runs: Sequence[RunRecord],
    ) -> None:
        with self._lock:
            if session.session_id in self._sessions:
                raise StorageError(
                    f"cannot import session {session.session_id!r}: it already exists"
                )
            self._sessions[session.session_id] = SessionRecord(**session.to_dict())
            if deltas:
                scope = self._scopes.setdefault(ScopeKey("session", session.session_id), _Scope())
                for d in deltas:
                    scope.deltas[d.version] = (
                        session.session_id,
                        d.run_id,
                        d.step,
                        _codec.dumps([s.to_dict() for s in d.segments]),
                        _codec.dumps(d.conflicts) if d.conflicts else None,
                        d.created_at,
                    )
                    scope.version = max(scope.version, d.version)
            batch = _codec.dumps([e.data for e in events])
            self._events[session.session_id] = [
                (e.seq, e.run_id, e.type, batch, i, e.created_at) for i, e in enumerate(events)
            ]
            bodies = _codec.dumps([(r.messages, r.metrics) for r in runs])
            self._runs[session.session_id] = {
                r.run_id: _run_row(r, r.created_at, r.updated_at, bodies, i)
                for i, r in enumerate(runs)
            }
