"""History, time travel, rollback and fork of a session's state.

History is never rewritten: a rollback is a new commit whose ops bring the state back,
recorded with a `rollback` event; a fork is a new session that starts from a past state.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from types import MethodType
from typing import TYPE_CHECKING, Any, Concatenate, Generic, Protocol, cast, overload

from typing_extensions import ParamSpec, TypeVar

from statewise.db.base import split_records
from statewise.db.records import (
    Commit,
    DeltaRecord,
    EventRecord,
    NewEvent,
    RunRecord,
    ScopeKey,
    SessionRecord,
)
from statewise.db.retention import require_retained
from statewise.exceptions import (
    HistoryCompactedError,
    SessionExistsError,
    SessionNotFoundError,
    StateError,
    StorageError,
)
from statewise.state.diff import diff_states
from statewise.state.secrets import REGISTRY_KEY, Redaction
from statewise.state.tracked import to_plain

if TYPE_CHECKING:
    from statewise.db.store import SessionSpec, StateStore

P = ParamSpec("P")
R = TypeVar("R")


class SessionSource(Protocol):
    """Where time travel finds sessions: the store, the spec a session id stands for, who
    a fork belongs to, and what its history hides. An agent's `SessionConfig` is one (its
    own sessions, its rules); `Sessions` has one for any session on a database."""

    @property
    def store(self) -> StateStore: ...

    def spec(self, session_id: str | None, user_id: str | None) -> SessionSpec: ...

    def fork_spec(self, new_id: str, source: SessionRecord | None) -> SessionSpec: ...

    def redaction(self, session_id: str) -> Redaction: ...


class TimeTravel:
    """History, time travel, rollback, fork, export and import over a `SessionSource`.

    Agents, teams, workflows and `Sessions` each hold one and hand these calls to it
    (`ToTimeTravel`), so the behaviour is written once and depends only on its source,
    not on what the object holding it inherits."""

    def __init__(self, source: SessionSource) -> None:
        self.source = source

    @property
    def _store(self) -> StateStore:
        return self.source.store

    def _spec(self, session_id: str | None, user_id: str | None) -> SessionSpec:
        return self.source.spec(session_id, user_id)

    def _session_key(self, session_id: str | None) -> tuple[str, ScopeKey]:
        spec = self._spec(session_id, None)
        if self._store.db.get_session(spec.session_id) is None:
            raise SessionNotFoundError(f"no session {spec.session_id!r}")
        return spec.session_id, ScopeKey("session", spec.session_id)

    def get_state_history(
        self,
        session_id: str | None = None,
        *,
        limit: int | None = None,
        after_version: int = 0,
        before: int | None = None,
    ) -> list[dict[str, Any]]:
        """One entry per commit of the session's own state: version, run, step, sources,
        ops and conflicts, oldest first; secret values redacted.

        Paged by version: `after_version` and `limit` give the first `limit` commits
        after that version; `before` gives the last `limit` commits before that version
        (the page to show when reading back from the newest)."""
        sid, key = self._session_key(session_id)
        if after_version:  # (the default, 0, lists the retained history)
            require_retained(self._store.db, sid, after_version)
        upto: int | None = None
        if before is not None:
            upto = before - 1
            if limit is not None:
                after_version = max(after_version, upto - limit)
        # History shows what changed, never a secret's value (stored ones are encrypted).
        redaction = self._redaction(sid)
        return [
            redaction.delta(
                {
                    "version": d.version,
                    "run_id": d.run_id,
                    "step": d.step,
                    "sources": [s.source for s in d.segments],
                    "ops": d.ops,
                    "conflicts": d.conflicts,
                    "created_at": d.created_at,
                }
            )
            for d in self._store.db.read_deltas(
                key, after_version=after_version, upto_version=upto, limit=limit
            )
        ]

    def _redaction(self, session_id: str) -> Redaction:
        return self.source.redaction(session_id)

    def _version_of(self, key: ScopeKey, at: int | str | None) -> int:
        if at is None:
            # The current version is what the cheap version probe reports; no need to
            # read the whole delta history for it.
            return self._store.db.probe(key.id, [key])[1][key]
        if isinstance(at, int):
            require_retained(self._store.db, key.id, at)
            return at
        versions = [d.version for d in self._store.db.read_deltas(key) if d.run_id == at]
        if not versions:
            oldest = self._store.db.read_horizon(key.id).version
            if oldest and self._store.db.get_run(key.id, at) is None:
                raise HistoryCompactedError(key.id, at, oldest)  # (that run is gone too)
            raise StateError(f"run {at!r} made no change to {key}")
        return max(versions)

    def get_state_at(
        self, session_id: str | None = None, at: int | str | None = None
    ) -> dict[str, Any]:
        """The session's own state at a version (int) or after a run (run id)."""
        _sid, key = self._session_key(session_id)
        return self._store.plain_scope_at(key, self._version_of(key, at))

    def diff_state(
        self, session_id: str | None = None, from_: int | str = 0, to: int | str | None = None
    ) -> list[dict[str, Any]]:
        """Path-by-path changes between two versions (or runs) of the session's state."""
        _sid, key = self._session_key(session_id)
        before = self._store.plain_scope_at(key, self._version_of(key, from_))
        after = self._store.plain_scope_at(key, self._version_of(key, to))
        # A diff is a view of history: secret values show as the marker.
        redaction = self._redaction(_sid)
        return [redaction.change(c.to_json()) for c in diff_states(before, after)]

    def rollback_state(
        self, session_id: str | None = None, *, to: int | str, include_shared: bool = False
    ) -> dict[str, Any]:
        """Bring the session's state back to a version or run, as a new commit.

        With `include_shared=True` the session's `user:` and `app:` scopes go back too, each
        to its last version committed at or before the target version's time.
        """
        sid, key = self._session_key(session_id)
        version = self._version_of(key, to)
        targets = {"": self._store.plain_scope_at(key, version)}
        spec = self._spec(sid, None)
        with self._store.begin(spec, mode="existing") as txn:
            if include_shared:
                deltas = self._store.db.read_deltas(
                    key, after_version=version - 1, upto_version=version
                )
                cutoff = deltas[-1].created_at if deltas else 0.0
                if not deltas and version:  # (folded into the horizon's snapshot)
                    cutoff = self._store.db.read_horizon(sid).before
                for shared in txn.spec.scope_keys()[1:]:
                    shared_version = max(
                        (
                            d.version
                            for d in self._store.db.read_deltas(shared)
                            if d.created_at <= cutoff
                        ),
                        default=0,
                    )
                    targets[f"{shared.kind}:"] = self._store.plain_scope_at(shared, shared_version)
            with txn.state.engine_writes():  # the engine's own keys (`__ttl__`) come back too
                for prefix, target in targets.items():
                    _restore(txn.state, prefix, target)
            txn.commit(
                [
                    NewEvent(
                        type="rollback",
                        data={"to_version": version, "to": to, "include_shared": include_shared},
                    )
                ],
                source=f"rollback:to={version}",
            )
            return txn.plain()

    def fork_session(
        self,
        session_id: str | None = None,
        *,
        at: int | str | None = None,
        new_session_id: str | None = None,
    ) -> str:
        """A new session starting from this one's state at a version/run (default: now),
        with the runs (the chat history) that led there. Its `forked` event names the
        session and the version it came from."""
        sid, key = self._session_key(session_id)
        version = self._version_of(key, at)
        target = self._store.plain_scope_at(key, version)
        new_id = new_session_id or str(uuid.uuid4())
        spec = self.source.fork_spec(new_id, self._store.db.get_session(sid))
        try:
            txn = self._store.begin(spec, mode="create")
        except SessionExistsError:
            raise SessionExistsError(f"cannot fork into {new_id!r}: that session exists") from None
        with txn:
            with txn.state.engine_writes():
                for name, value in target.items():
                    txn.state[name] = value
            event = {"from_session": sid, "at": at, "version": version}
            source = f"fork:{sid}"
            attempt = txn.prepare([NewEvent(type="forked", data=event)], source=source)
            runs = [
                dataclasses.replace(run, session_id=new_id)
                for run in self._runs_up_to(sid, key, version)
            ]
            assert attempt.commit is not None  # (prepare builds it)
            records = _fork_records(attempt.commit, runs, time.time())
            if records is None:  # (it writes a shared scope too: a commit per run, as ever)
                txn.land(attempt)
                for run in runs:
                    txn.commit(run=run, source=source)
                return new_id
            try:
                self._store.db.import_records(*records)
            except StorageError:
                if self._store.db.get_session(new_id) is not None:
                    raise SessionExistsError(
                        f"cannot fork into {new_id!r}: that session exists"
                    ) from None
                raise
            finally:
                txn.close(keep=False)  # (what landed was not written through it)
        return new_id

    def _runs_up_to(self, session_id: str, key: ScopeKey, version: int) -> list[RunRecord]:
        """The finished runs of a session whose state changes all lie at or before
        `version` (a run that changed nothing counts by its time)."""
        deltas = self._store.db.read_deltas(key)
        last_version: dict[str, int] = {}
        for delta in deltas:
            if delta.run_id:
                last_version[delta.run_id] = max(last_version.get(delta.run_id, 0), delta.version)
        later = [d.created_at for d in deltas if d.version > version]
        cutoff = min(later) if later else float("inf")
        kept = []
        for run in self._store.db.read_runs(session_id):
            if run.status not in ("completed", "failed"):
                continue
            if run.run_id in last_version:
                if last_version[run.run_id] <= version:
                    kept.append(run)
            elif run.created_at < cutoff:
                kept.append(run)
        return kept

    # ---- export / import ---------------------------------------------------------------

    def export_session(
        self, session_id: str | None = None, path: str | Path | None = None
    ) -> list[dict[str, Any]]:
        """The session (state deltas, events, runs) as JSON Lines records; with `path`,
        also written to that file. Secret values stay encrypted; import needs the key."""
        sid, _key = self._session_key(session_id)
        records = list(self._store.db.export_session(sid))
        if path is not None:
            with open(path, "w", encoding="utf-8") as out:
                for record in records:
                    out.write(json.dumps(record, ensure_ascii=False) + "\n")
        return records

    def import_sessions(self, source: str | Path | Iterable[dict[str, Any]]) -> list[str]:
        """Import sessions exported by `export_session` (a JSON Lines file or records).
        Refuses to overwrite an existing session; returns the imported session ids."""
        if isinstance(source, str | Path):
            with open(source, encoding="utf-8") as lines:
                records = [json.loads(line) for line in lines if line.strip()]
        else:
            records = list(source)
        imported = []
        for session, deltas, events, runs in split_records(records):
            self._store.db.import_records(session, deltas, events, runs)
            imported.append(session.session_id)
        return imported


class ToTimeTravel(Generic[P, R]):
    """One `TimeTravel` method offered on an object that holds a `TimeTravel` as
    `_time_travel`: `get_state_at = ToTimeTravel(TimeTravel.get_state_at)` makes
    `agent.get_state_at(...)` call `agent._time_travel.get_state_at(...)`, with the same
    signature for type checkers and the same docstring."""

    def __init__(self, method: Callable[Concatenate[TimeTravel, P], R]) -> None:
        self.method = method
        self.__doc__ = method.__doc__

    @overload
    def __get__(self, obj: None, objtype: type | None = None) -> ToTimeTravel[P, R]: ...
    @overload
    def __get__(self, obj: object, objtype: type | None = None) -> Callable[P, R]: ...

    def __get__(
        self, obj: object | None, objtype: type | None = None
    ) -> ToTimeTravel[P, R] | Callable[P, R]:
        if obj is None:
            return self
        travel: TimeTravel = obj._time_travel  # type: ignore[attr-defined]
        # A bound method: `help()` and `inspect.signature` show the method's own.
        return cast("Callable[P, R]", MethodType(self.method, travel))


def _fork_records(
    commit: Commit, runs: list[RunRecord], now: float
) -> tuple[SessionRecord, list[DeltaRecord], list[EventRecord], list[RunRecord]] | None:
    """A fork's first commit (the new session, its state, its `forked` event) with the
    runs it copies, as the records of one import: one transaction, however many runs,
    where a commit per run made a long session's fork cost a durable write per run.
    None when the commit writes a scope other than the session's own (an import writes
    only that one)."""
    session = commit.session
    sid = session.session_id
    if any(write.key != ScopeKey("session", sid) for write in commit.writes):
        return None
    record = dataclasses.replace(
        session, created_at=now, updated_at=now, last_seq=len(commit.events)
    )
    deltas = [
        DeltaRecord(
            key=write.key,
            version=write.base_version + 1,
            session_id=sid,
            run_id=None,
            step=None,
            segments=write.segments,
            conflicts=write.conflicts,
            created_at=now,
        )
        for write in commit.writes
    ]
    events = [
        EventRecord(
            session_id=sid, seq=seq, type=e.type, data=e.data, run_id=e.run_id, created_at=now
        )
        for seq, e in enumerate(commit.events, start=1)
    ]
    return record, deltas, events, runs


def _restore(root: Any, prefix: str, target: dict[str, Any]) -> None:
    """Make the keys of one scope (`""` = the session's own, `"user:"`, `"app:"`) equal
    `target`, writing only the keys that differ."""

    def in_scope(name: str) -> bool:
        return name.startswith(prefix) if prefix else ":" not in name

    # The secrets registry only grows: a rollback never makes a secret key plain again.
    wanted = {
        prefix + name: value
        for name, value in target.items()
        if (name != "__ttl__" or not prefix) and prefix + name != REGISTRY_KEY
    }
    for name in [k for k in root if in_scope(k) and k not in wanted and k != REGISTRY_KEY]:
        del root[name]
    for name, value in wanted.items():
        if name not in root or to_plain(root[name]) != value:
            root[name] = value
