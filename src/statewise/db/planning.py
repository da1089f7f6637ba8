"""The pure half of a commit: which scope a key belongs to, how pending ops split into
per-scope delta segments, how a rebase keeps each op attributed to the source that made
it, and the identity rules a retried commit must obey. No I/O, no encryption, no cache:
everything here is a function of its arguments.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from statewise.db.records import DeltaRecord, ScopeKey, SessionRecord
from statewise.exceptions import SessionDeletedError, SessionExistsError, StateConflictError
from statewise.state.merge import Rules, rebase
from statewise.state.ops import Op
from statewise.state.secrets import REDACTED

USER_PREFIX = "user:"
APP_PREFIX = "app:"
TEMP_PREFIX = "temp:"
TTL_KEY = "__ttl__"  # {key: unix time it expires}; hidden from reads and prompts
ANONYMOUS_USER = "_anonymous"
SCOPE_PREFIX = {"session": "", "user": USER_PREFIX, "app": APP_PREFIX}

SessionMode = Literal["open", "create", "existing"]
"""What a transaction commits to:

- `"open"`: the session is created by the first commit if it does not exist yet (what a
  run does). If another writer creates it first, the commit goes on in that session only
  when it has the same owner (user and app); a session of another owner is never written.
- `"create"`: the session must be new. If it exists when the transaction begins, or
  another writer creates it before this commit lands, the commit fails with
  `SessionExistsError` and writes nothing (a fork target, an explicit create).
- `"existing"`: the session must exist (`SessionNotFoundError` otherwise).

In every mode a session that existed when the transaction saw it and is deleted before a
commit lands stays deleted: the commit fails with `SessionDeletedError`.
"""


def scope_of(key: str) -> tuple[str, str]:
    """Which scope a top-level key belongs to, and its name inside that scope."""
    if key.startswith(USER_PREFIX):
        return "user", key[len(USER_PREFIX) :]
    if key.startswith(APP_PREFIX):
        return "app", key[len(APP_PREFIX) :]
    if key.startswith(TEMP_PREFIX):
        return "temp", key
    return "session", key


@dataclass(kw_only=True, slots=True)
class SessionSpec:
    """Who a run is for: the session, its user and its app.

    `owner_required`: the session may only be opened if it is `user_id`'s (or new). A
    caller that names the user it runs for (a server acting for a principal) sets it; it
    is checked each time the transaction reads the session record (at checkout, and again
    after a lost race), so no timing lets a run write into another user's session. Without
    it an existing session is opened as its owner's (library code is trusted)."""

    session_id: str
    user_id: str | None = None
    app_name: str = "default"
    kind: str = "agent"
    owner_required: bool = False

    def scope_keys(self) -> tuple[ScopeKey, ScopeKey, ScopeKey]:
        return _scope_keys(self.session_id, self.user_id or ANONYMOUS_USER, self.app_name)


@functools.lru_cache(maxsize=4096)
def _scope_keys(
    session_id: str, user_id: str, app_name: str
) -> tuple[ScopeKey, ScopeKey, ScopeKey]:
    """A run asks for its scope keys at every commit: made once per session, not per ask."""
    return ScopeKey("session", session_id), ScopeKey("user", user_id), ScopeKey("app", app_name)


@dataclass(kw_only=True)
class PendingCommit:
    """Ops drained for a commit that may need rebasing before it lands. `commit_id` stays
    the same across every attempt, so a retry of an attempt that landed is recognised.

    A lost race is rebased on the tree itself: `undo` takes the tree back to the state
    the ops (as last rebased) were made on; None once the tree was reloaded instead."""

    segments: list[tuple[str, list[Op]]]
    commit_id: str
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    undo: Callable[[], None] | None = None
    # Scopes the tree must reload at the next rebase: a rebase applied deltas to them that
    # did not land (see `BaseDb.commit_rebased_together`).
    stale: set[ScopeKey] = field(default_factory=set)


def ops_of_scope(segments: Sequence[tuple[str, list[Op]]], kind: str) -> list[Op]:
    return [op for _s, ops in segments for op in ops if scope_of(str(op.path[0]))[0] == kind]


def rebase_scope(
    kind: str,
    latest: dict[str, Any],
    theirs: Sequence[Op],
    pending: PendingCommit,
    rules: Rules,
    secrets: frozenset[str] = frozenset(),
) -> list[Op] | None:
    """Rebase our pending ops of one scope onto `latest` (in place). Conflicts are added
    to `pending.conflicts`; returns the rebased ops, or None when we had none there. A
    `strict` conflict on one of `secrets` raises without the values (its text goes
    wherever errors go: responses, run records, logs, spans)."""
    mine = ops_of_scope(pending.segments, kind)
    if not mine:
        return None
    try:
        result = rebase(latest, theirs, mine, rules)
    except StateConflictError as exc:
        if exc.key in secrets:
            raise exc.masked(REDACTED) from None
        raise
    for conflict in result.conflicts:
        pending.conflicts.append({"scope": kind, **conflict.to_json()})
    return list(result.ops)


def is_contiguous(after: int, upto: int, deltas: Sequence[DeltaRecord]) -> bool:
    """Whether `deltas` are exactly the versions after..upto, in order: only then do they
    take a state at `after` to the state at `upto`."""
    return [d.version for d in deltas] == list(range(after + 1, upto + 1))


def resplit(
    segments: list[tuple[str, list[Op]]], rebased: dict[str, list[Op]]
) -> list[tuple[str, list[Op]]]:
    """Put rebased ops back under the sources that made them. Rebase keeps op order and
    usually one op per op; when it dropped or merged some, a scope's ops are attributed to
    all of its sources together."""
    counts: dict[str, int] = {}
    for _source, ops in segments:
        for op in ops:
            kind = scope_of(str(op.path[0]))[0]
            counts[kind] = counts.get(kind, 0) + 1
    uneven = [kind for kind, ops in rebased.items() if len(ops) != counts.get(kind, 0)]
    if uneven:
        sources = "+".join(dict.fromkeys(s for s, _ops in segments))
        kept = [
            (s, [op for op in ops if scope_of(str(op.path[0]))[0] not in uneven])
            for s, ops in segments
        ]
        merged = [op for kind in uneven for op in rebased.pop(kind)]
        segments = [(s, ops) for s, ops in kept if ops]
        tail = [(sources, merged)] if merged else []
    else:
        tail = []
    queues = {kind: iter(ops) for kind, ops in rebased.items()}
    out = []
    for source, ops in segments:
        new_ops = []
        for op in ops:
            kind = scope_of(str(op.path[0]))[0]
            if kind in queues:
                replacement = next(queues[kind], None)
                if replacement is not None:
                    new_ops.append(replacement)
            else:
                new_ops.append(op)
        if new_ops:
            out.append((source, new_ops))
    return out + tail


def owned_spec(spec: SessionSpec, record: SessionRecord) -> SessionSpec:
    """`spec` as the stored session has it: an existing session's owner, app and kind
    are its own, whoever reads it. `spec` itself when they already agree.
    `SessionExistsError` when `spec` requires its owner and the session is another's."""
    if spec.owner_required and (record.user_id or None) != (spec.user_id or None):
        raise SessionExistsError(
            f"session {spec.session_id!r} belongs to another user; nothing was written to it"
        )
    user_id = record.user_id or spec.user_id
    app_name = record.app_name or spec.app_name
    if user_id == spec.user_id and app_name == spec.app_name and record.kind == spec.kind:
        return spec
    return replace(spec, user_id=user_id, app_name=app_name, kind=record.kind)


def check_identity(
    mode: SessionMode,
    spec: SessionSpec,
    seen: SessionRecord | None,
    now: SessionRecord | None,
) -> None:
    """Whether a commit may go on after losing a race, given the session record it saw
    (`seen`, None when it saw no session) and the one stored now (`now`)."""
    sid = spec.session_id
    if seen is not None:
        replaced = (
            now is not None
            and seen.created_at > 0
            and now.created_at > 0
            and abs(now.created_at - seen.created_at) > 1e-3
        )
        if now is None or replaced:
            raise SessionDeletedError(
                f"session {sid!r} was deleted while this run was writing it; "
                "nothing more was committed (deleting a session is final)"
            )
        return
    if now is None:
        return
    if mode == "create":
        raise SessionExistsError(
            f"session {sid!r} already exists: another writer created it first; nothing was written"
        )
    if (now.user_id or None) != (spec.user_id or None) or (
        now.app_name is not None and now.app_name != spec.app_name
    ):
        raise SessionExistsError(
            f"session {sid!r} was just created by another user or app; nothing was written to it"
        )
