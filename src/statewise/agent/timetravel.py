"""History, time travel, rollback and fork of a session's state.

History is never rewritten: a rollback is a new commit whose ops bring the state back,
recorded with a `rollback` event; a fork is a new session that starts from a past state.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from statewise.db.records import NewEvent, ScopeKey
from statewise.exceptions import SessionNotFoundError, StateError
from statewise.state.diff import diff_states
from statewise.state.tracked import to_plain

if TYPE_CHECKING:
    from statewise.db.store import SessionSpec, StateStore


class TimeTravel:
    """Mixed into Agent, Team and Workflow; needs `_store` and `_spec`."""

    _store: StateStore

    def _spec(self, session_id: str | None, user_id: str | None) -> SessionSpec:
        raise NotImplementedError

    def _session_key(self, session_id: str | None) -> tuple[str, ScopeKey]:
        spec = self._spec(session_id, None)
        if self._store.db.get_session(spec.session_id) is None:
            raise SessionNotFoundError(f"no session {spec.session_id!r}")
        return spec.session_id, ScopeKey("session", spec.session_id)

    def get_state_history(
        self, session_id: str | None = None, *, limit: int | None = None, after_version: int = 0
    ) -> list[dict[str, Any]]:
        """One entry per commit of the session's own state: version, run, step, sources,
        ops and conflicts."""
        _sid, key = self._session_key(session_id)
        return [
            {
                "version": d.version,
                "run_id": d.run_id,
                "step": d.step,
                "sources": [s.source for s in d.segments],
                "ops": d.ops,
                "conflicts": d.conflicts,
                "created_at": d.created_at,
            }
            for d in self._store.db.read_deltas(key, after_version=after_version, limit=limit)
        ]

    def _version_of(self, key: ScopeKey, at: int | str | None) -> int:
        if at is None:
            deltas = self._store.db.read_deltas(key)
            return deltas[-1].version if deltas else 0
        if isinstance(at, int):
            return at
        versions = [d.version for d in self._store.db.read_deltas(key) if d.run_id == at]
        if not versions:
            raise StateError(f"run {at!r} made no change to {key}")
        return max(versions)

    def get_state_at(
        self, session_id: str | None = None, at: int | str | None = None
    ) -> dict[str, Any]:
        """The session's own state at a version (int) or after a run (run id)."""
        _sid, key = self._session_key(session_id)
        return self._store.scope_at(key, self._version_of(key, at))

    def diff_state(
        self, session_id: str | None = None, from_: int | str = 0, to: int | str | None = None
    ) -> list[dict[str, Any]]:
        """Path-by-path changes between two versions (or runs) of the session's state."""
        _sid, key = self._session_key(session_id)
        before = self._store.scope_at(key, self._version_of(key, from_))
        after = self._store.scope_at(key, self._version_of(key, to))
        return [c.to_json() for c in diff_states(before, after)]

    def rollback_state(self, session_id: str | None = None, *, to: int | str) -> dict[str, Any]:
        """Bring the session's state back to a version or run, as a new commit."""
        sid, key = self._session_key(session_id)
        version = self._version_of(key, to)
        target = self._store.scope_at(key, version)
        spec = self._spec(sid, None)
        working = self._store.checkout(spec)
        keep = True
        try:
            root = working.root
            for name in [k for k in root if ":" not in k and k not in target]:
                del root[name]
            for name, value in target.items():
                if name not in root or to_plain(root[name]) != value:
                    root[name] = value
            self._store.commit(
                working,
                source=f"rollback:to={version}",
                events=[NewEvent(type="rollback", data={"to_version": version, "to": to})],
            )
            return working.plain()
        except BaseException:
            keep = False
            raise
        finally:
            self._store.release(working, keep=keep)

    def fork_session(
        self,
        session_id: str | None = None,
        *,
        at: int | str | None = None,
        new_session_id: str | None = None,
    ) -> str:
        """A new session starting from this one's state at a version/run (default: now)."""
        sid, key = self._session_key(session_id)
        target = self._store.scope_at(key, self._version_of(key, at))
        new_id = new_session_id or str(uuid.uuid4())
        source_record = self._store.db.get_session(sid)
        spec = self._spec(new_id, source_record.user_id if source_record else None)
        working = self._store.checkout(spec)
        keep = True
        try:
            if not working.is_new:
                raise StateError(f"cannot fork into {new_id!r}: that session exists")
            for name, value in target.items():
                working.root[name] = value
            self._store.commit(
                working,
                source=f"fork:{sid}",
                events=[NewEvent(type="forked", data={"from_session": sid, "at": at})],
            )
        except BaseException:
            keep = False
            raise
        finally:
            self._store.release(working, keep=keep)
        return new_id
