"""Version-checked writes of a whole session's state, for callers that do optimistic
concurrency themselves (the HTTP API's `If-Match`).

`replace_session_state` and `merge_patch_session_state` check the session scope's version
against the one the caller last saw, apply their change as ordinary ops and commit. The
check and the commit are one compare-and-swap: if another writer commits between them,
the commit does not rebase onto it (as a run would) but fails with
`StaleStateVersionError`, and nothing is written.

They work on any façade object with a state store (Agent, Team, Workflow).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from statewise.db.records import NewEvent, ScopeKey
from statewise.db.store import SessionSpec, StateStore, WorkingState, _Pending, scope_of
from statewise.exceptions import SessionNotFoundError, StateError, TempScopeError
from statewise.state.jsonvalue import to_json_value
from statewise.state.reserved import check_writable, is_reserved
from statewise.state.tracked import TrackedDict, to_plain

REDACTED = "***"


class StaleStateVersionError(StateError):
    """The session's state moved past the version the caller based its write on."""

    def __init__(self, session_id: str, expected: int, actual: int) -> None:
        super().__init__(
            f"session {session_id!r} is at state version {actual}, not {expected}: "
            "read it again and retry"
        )
        self.session_id = session_id
        self.expected = expected
        self.actual = actual


class _HasStore(Protocol):
    _store: StateStore

    def _spec(self, session_id: str | None, user_id: str | None) -> SessionSpec: ...


def session_version(owner: _HasStore, session_id: str) -> int:
    """The version of a session's own state scope (0 before its first commit)."""
    key = ScopeKey("session", session_id)
    record, versions = owner._store.db.probe(session_id, [key])
    if record is None:
        raise SessionNotFoundError(f"no session {session_id!r}")
    return versions[key]


class _StrictStore(StateStore):
    """A store whose commit refuses to rebase over a moved session scope."""

    def _rebase(self, ws: WorkingState, pending: _Pending) -> None:
        key = ScopeKey("session", ws.spec.session_id)
        _record, versions = self.db.probe(ws.spec.session_id, [key])
        if versions[key] != ws.versions.get(key, 0):
            raise StaleStateVersionError(ws.spec.session_id, ws.versions.get(key, 0), versions[key])
        super()._rebase(ws, pending)


def _strict(store: StateStore) -> _StrictStore:
    return _StrictStore(
        store.db,
        rules=store.rules,
        schema=store.schema,
        secret_keys=store.secret_keys,
        cipher=store._cipher,
    )


def _check_keys(keys: Any) -> None:
    check_writable(keys)
    for key in keys:
        if not isinstance(key, str) or not key:
            raise StateError(f"state keys must be non-empty strings, got {key!r}")
        if key.startswith("temp:"):
            raise TempScopeError(
                f"cannot write {key!r} outside a run: temp: keys only live for the run "
                "that writes them"
            )


def _versioned_write(
    owner: _HasStore,
    session_id: str,
    if_version: int | None,
    source: str,
    change: Any,
) -> tuple[dict[str, Any], int]:
    store = owner._store
    strict = _strict(store)
    spec = owner._spec(session_id, None)
    working = strict.checkout(spec)
    keep = True
    try:
        if working.is_new:
            raise SessionNotFoundError(f"no session {session_id!r}")
        key = ScopeKey("session", spec.session_id)
        current = working.versions.get(key, 0)
        if if_version is not None and current != if_version:
            raise StaleStateVersionError(spec.session_id, if_version, current)
        change(working.root, store.secret_keys)
        if working.has_changes:
            strict.commit(
                working,
                source=source,
                events=[NewEvent(type="api_call", data={"call": source, "base_version": current})],
            )
        return working.plain(), working.versions.get(key, 0)
    except BaseException:
        keep = False
        working.discard_uncommitted()
        raise
    finally:
        store.release(working, keep=keep)


def replace_session_state(
    owner: _HasStore,
    session_id: str,
    state: Mapping[str, Any],
    *,
    if_version: int | None = None,
) -> tuple[dict[str, Any], int]:
    """Make the session's own keys exactly `state` (its `user:`/`app:` keys in `state` are
    set, the ones it leaves out are not deleted: they are shared with other sessions).

    A secret key given as "***" (as reads show it) keeps its stored value. Returns the new
    state and the session scope's version.
    """
    _check_keys(state)
    plain = to_json_value(dict(state), ())

    def change(root: TrackedDict, secrets: frozenset[str]) -> None:
        for name in [
            k for k in root if scope_of(k)[0] == "session" and k not in plain and not is_reserved(k)
        ]:
            del root[name]
        for name, value in plain.items():
            if name in secrets and value == REDACTED and name in root:
                continue
            if name not in root or to_plain(root[name]) != value:
                root[name] = value

    return _versioned_write(owner, session_id, if_version, "api:state.replace", change)


def apply_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7396 JSON merge patch, on plain values (returns the patched value)."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = apply_merge_patch(result.get(key), value)
    return result


def _patch_tracked(root: Any, patch: Mapping[str, Any], secrets: frozenset[str], top: bool) -> None:
    """Apply a merge patch in place, so only the paths it names are recorded as changed."""
    for key, value in patch.items():
        if value is None:
            if key in root:
                del root[key]
        elif top and key in secrets and value == REDACTED and key in root:
            continue
        elif isinstance(value, dict) and isinstance(root.get(key), dict):
            _patch_tracked(root[key], value, secrets, False)
        else:
            new = apply_merge_patch(None, value)
            if key not in root or to_plain(root[key]) != new:
                root[key] = new


def merge_patch_session_state(
    owner: _HasStore,
    session_id: str,
    patch: Mapping[str, Any],
    *,
    if_version: int | None = None,
) -> tuple[dict[str, Any], int]:
    """Apply an RFC 7396 merge patch to the session's state (null deletes a key)."""
    _check_keys(patch)
    plain = to_json_value(dict(patch), ())

    def change(root: TrackedDict, secrets: frozenset[str]) -> None:
        _patch_tracked(root, plain, secrets, True)

    return _versioned_write(owner, session_id, if_version, "api:state.merge_patch", change)


__all__ = [
    "StaleStateVersionError",
    "apply_merge_patch",
    "merge_patch_session_state",
    "replace_session_state",
    "session_version",
]
