"""Whole-session state writes for callers that do optimistic concurrency themselves (the
HTTP API's `If-Match`), and reads that return the version of exactly the state they return.

`replace_session_state` and `merge_patch_session_state` apply their change as ordinary ops
in a session transaction. With `if_version` the transaction requires that version of the
session scope: the check and the write are one compare-and-swap, so if another writer
commits in between, the commit does not rebase onto it (as a run would) but fails with
`StaleStateVersionError`, and nothing is written. Without `if_version` the change is
merged like any other writer's (concurrent patches of different keys all apply).

They work on any façade object with a state store (Agent, Team, Workflow).
"""

from __future__ import annotations

import time
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from statewise.db.base import ScopesRead
from statewise.db.records import NewEvent, ScopeKey, SessionRecord
from statewise.db.store import (
    TTL_KEY,
    SessionSpec,
    StateStore,
    owned_spec,
    scope_of,
    visible_state,
)
from statewise.exceptions import (
    SessionNotFoundError,
    StaleStateVersionError,
    StateError,
    TempScopeError,
)
from statewise.state.jsonvalue import copy_json, to_json_value
from statewise.state.reserved import check_writable, is_reserved
from statewise.state.secrets import REDACTED
from statewise.state.tracked import TrackedDict, to_plain


class _HasStore(Protocol):
    @property
    def _store(self) -> StateStore: ...

    def _spec(self, session_id: str | None, user_id: str | None) -> SessionSpec: ...


def session_version(owner: _HasStore, session_id: str) -> int:
    """The version of a session's own state scope (0 before its first commit)."""
    return owner._store.session_version(session_id)


@dataclass(frozen=True, slots=True)
class StateRead:
    """A session's state as readers outside a run see it, with what they need to show it:
    the session's record (its owner), the version of exactly this state, and the secret
    keys to redact (declared by the reader, or recorded in this very state's registry)."""

    record: SessionRecord
    state: dict[str, Any]
    version: int
    secret_keys: frozenset[str]


def read_session_state(owner: _HasStore, session_id: str) -> StateRead:
    """A session's state (as `get_session_state` shows it: `user:`/`app:` defaults fill
    missing shared keys) and the version of exactly that state, read together.

    A reader must not get in a run's way: one read of the session and its scopes, which
    loads only the scopes that moved since the tree last read (or cached by a run), and
    copies the rest from that tree (`BaseDb.read_scopes`). Raises SessionNotFoundError for
    a session that does not exist.
    """
    flow = _read_flow(owner, session_id)
    asked = next(flow)
    while True:
        try:
            asked = flow.send(owner._store.db.read_scopes(*asked))
        except StopIteration as done:
            result: StateRead = done.value
            return result


async def aread_session_state(owner: _HasStore, session_id: str) -> StateRead:
    """`read_session_state` for async callers: the read goes through the database's async
    driver where it has one (PostgreSQL, Redis), so it queues behind no thread."""
    flow = _read_flow(owner, session_id)
    asked = next(flow)
    while True:
        try:
            asked = flow.send(await owner._store.db.aread_scopes(*asked))
        except StopIteration as done:
            result: StateRead = done.value
            return result


_Ask = tuple[str, Sequence[ScopeKey], dict[ScopeKey, int]]


def _read_flow(owner: _HasStore, session_id: str) -> Generator[_Ask, ScopesRead, StateRead]:
    """The state read without its I/O: yields what to read (`BaseDb.read_scopes`'s
    arguments), is sent what was read, returns the StateRead."""
    store = owner._store
    spec = owner._spec(session_id, None)
    sid = spec.session_id
    keys = (store.cache.spec_of(sid) or spec).scope_keys()
    held = store.cache.held_versions(sid)
    while True:
        record, versions, loaded = yield sid, keys, held
        if record is None:
            raise SessionNotFoundError(f"no session {sid!r}")
        owned = owned_spec(spec, record)
        if owned.scope_keys() != keys:  # someone else's session: read its owner's scopes
            keys = owned.scope_keys()
            continue
        kept = {k: v for k, v in versions.items() if k not in loaded}
        tree = store.cache.read_tree(sid, kept)
        if tree is not None:
            break
        held = {}  # a run moved what was held meanwhile: load every scope
    for key, scope in loaded.items():
        tree.update(store.codec.decode_scope(key, scope.data))
    store.cache.keep_read(owned, versions, tree)
    tree = dict(tree)  # the kept tree's values are shared: only the top level changes below
    _drop_expired(tree)
    own_version = versions.get(ScopeKey("session", sid), 0)
    defaults = getattr(owner, "_default_state", None)
    if defaults is not None:
        fresh = record.last_seq == 0 and own_version == 0
        for key, value in defaults().items():
            # As a run's start applies them: all keys to a fresh session, else only the
            # shared scopes' missing keys.
            if key not in tree and (fresh or scope_of(key)[0] in ("user", "app")):
                tree[key] = copy_json(value)
    return StateRead(
        record=record,
        state=visible_state(tree),
        version=own_version,
        secret_keys=store.secret_keys_in(tree),
    )


def _drop_expired(tree: dict[str, Any]) -> None:
    """Hide keys whose TTL passed (the next run deletes them for good)."""
    expiries = tree.get(TTL_KEY)
    if not isinstance(expiries, dict):
        return
    now = time.time()
    for key, at in expiries.items():
        if not isinstance(at, int | float) or at <= now:
            tree.pop(key, None)


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
    spec = owner._spec(session_id, None)
    with store.begin(spec, mode="existing", expected_version=if_version) as txn:
        base = txn.version
        change(txn.state, store.secret_keys_in(txn.state))  # the data's secrets
        if txn.has_changes:
            txn.commit(
                [NewEvent(type="api_call", data={"call": source, "base_version": base})],
                source=source,
            )
        return txn.plain(), txn.version


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
    "StateRead",
    "apply_merge_patch",
    "aread_session_state",
    "merge_patch_session_state",
    "read_session_state",
    "replace_session_state",
    "session_version",
]
