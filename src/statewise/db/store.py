"""The state engine between runs and storage: checkout, commit, rebase.

A run *checks out* a session's state: one merged, tracked dict holding the session's own
keys, the user's `user:` keys and the app's `app:` keys. Code mutates it freely; the
recorder logs every change as ops. At each commit point the ops are split by scope and
committed with a compare-and-swap on each scope's version. When another writer got there
first, the ops are rebased onto the latest stored state (commuting ops merge, true
conflicts go by the key's rule and are recorded) and the commit is tried again.

The transaction is the only write API: a writer opens one (`StateStore.begin` / `abegin`,
see `statewise.db.transaction`), which owns the lifecycle; checkout, commit and release
are the store's private methods, called only by the transaction.

`StateStore` is built in layers, one concern each, as a chain of base classes (each
layer's methods call the layers below through `self`, as they did in one class; the
class a caller holds is unchanged): `_store_checkout.StoreCheckout` (secrets registry,
checkout and cache, reads at a version), `_store_commit.StoreCommits` (validation, commit,
contention and rebase), and here `StateStore` itself (transactions, whole-session
operations).

This module is the I/O half. The pure parts live beside it: `planning` (scopes, commit
planning, rebase attribution, identity rules), `state_codec` (the one place state is
encoded for storage and decoded from it), `cache` (checked-in trees) and `working`
(the checked-out tree, TTL).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from statewise.db._commit_attempt import CommitAttempt as CommitAttempt
from statewise.db._commit_attempt import CommitPolicy, Committed
from statewise.db._store_checkout import CATCH_UP_DELTAS as CATCH_UP_DELTAS
from statewise.db._store_checkout import SNAPSHOT_MIN_BYTES as SNAPSHOT_MIN_BYTES
from statewise.db._store_checkout import StateLoader
from statewise.db._store_commit import COMMIT_RETRY_SECONDS as COMMIT_RETRY_SECONDS
from statewise.db._store_commit import CONTENDED_KEPT as CONTENDED_KEPT
from statewise.db._store_commit import StoreCommits
from statewise.db.base import BaseDb
from statewise.db.ids import new_id as new_id
from statewise.db.planning import (
    ANONYMOUS_USER,
    APP_PREFIX,
    TEMP_PREFIX,
    TTL_KEY,
    USER_PREFIX,
    SessionMode,
    SessionSpec,
    owned_spec,
    scope_of,
)
from statewise.db.records import ScopeKey
from statewise.db.transaction import AsyncTransaction, Transaction, checkout_at
from statewise.db.working import (
    WorkingState,
    clear_expiry,
    expire_keys,
    set_expiry,
    visible_state,
)
from statewise.exceptions import (
    SessionExistsError,
    SessionNotFoundError,
    StaleStateVersionError,
)


class StateStore(StoreCommits):
    """Session state on one database, with one agent's (or workflow's) rules.

    `rules` decide true conflicts per key, `schema` validates every commit, `secret_keys`
    are encrypted at rest with `cipher`.
    """

    def on(self, db: BaseDb) -> StateStore:
        """The same rules, schema and secrets on another database."""
        return StateStore(
            db,
            rules=self.rules,
            schema=self.schema,
            secret_keys=self.secret_keys,
            cipher=self.codec.configured_cipher,
        )

    # ---- transactions (what writers use) ------------------------------------------------

    def begin(
        self,
        spec: SessionSpec,
        *,
        mode: SessionMode = "open",
        expected_version: int | None = None,
        at_versions: Mapping[ScopeKey, int] | None = None,
        initialize: Callable[[WorkingState], None] | None = None,
    ) -> Transaction:
        """Open a transaction on a session (blocking I/O); see `SessionMode`.

        `expected_version` is the session scope's version the caller based its writes on
        (HTTP `If-Match`): checked when the transaction begins and again, atomically, by
        each commit, which then fails with `StaleStateVersionError` instead of rebasing.

        `at_versions` opens the state as it was at those scope versions (what a frontend
        last saw): commits are based on them and rebase onto whatever landed since.

        `initialize` makes the state the caller starts from (an agent run's default state
        and input), applied here. A caller that reads nothing else of the state before its
        first commit passes it, and the store may then skip reading a session it holds
        nothing of: it assumes the session new, and the first commit, which reads what is
        stored in the same round trip, lands only if that holds; else the state is
        checked out and `initialize` applied again (see `_assume_new`), before the commit
        is built anew. A caller whose first commit may not come (a durable run replaying
        its start) calls `settle()` first.
        """
        policy = CommitPolicy(mode=mode, expected_version=expected_version)
        return Transaction(self, self._open(spec, policy, at_versions, initialize), policy)

    async def abegin(
        self,
        spec: SessionSpec,
        *,
        mode: SessionMode = "open",
        expected_version: int | None = None,
        at_versions: Mapping[ScopeKey, int] | None = None,
        initialize: Callable[[WorkingState], None] | None = None,
    ) -> AsyncTransaction:
        """`begin` for async callers: network databases are reached from a worker thread,
        so the event loop never waits on a round trip."""
        policy = CommitPolicy(mode=mode, expected_version=expected_version)
        working = await self.db.run_io(self._open, spec, policy, at_versions, initialize)
        return AsyncTransaction(self, working, policy)

    def _open(
        self,
        spec: SessionSpec,
        policy: CommitPolicy,
        at_versions: Mapping[ScopeKey, int] | None = None,
        initialize: Callable[[WorkingState], None] | None = None,
    ) -> WorkingState:
        if initialize is not None:
            if policy.mode != "open" or policy.expected_version is not None or at_versions:
                raise ValueError("initialize= is for a plain open (an agent run's start)")
            assumed = self._assume_new(spec, initialize)
            if assumed is not None:
                return assumed
            working = self._checkout(spec)
            try:
                initialize(working)
            except BaseException:
                self._release(working, keep=False)
                raise
            return working
        if at_versions is None:
            working = self._checkout(spec)
        else:
            working = checkout_at(self, spec, at_versions)
        try:
            sid = spec.session_id
            if policy.mode == "create" and not working.is_new:
                raise SessionExistsError(f"session {sid!r} already exists")
            if policy.mode == "existing" and working.is_new:
                raise SessionNotFoundError(f"no session {sid!r}")
            if policy.expected_version is not None:
                current = working.versions.get(ScopeKey("session", sid), 0)
                if current != policy.expected_version:
                    raise StaleStateVersionError(sid, policy.expected_version, current)
        except BaseException:
            self._release(working, keep=False)
            raise
        return working

    # ---- façade: whole-session operations ------------------------------------------------

    def session_version(self, session_id: str) -> int:
        """The version of a session's own state scope; SessionNotFoundError if absent."""
        key = ScopeKey("session", session_id)
        record, versions = self.db.probe(session_id, [key])
        if record is None:
            raise SessionNotFoundError(f"no session {session_id!r}")
        return versions[key]

    def read_state(self, spec: SessionSpec) -> tuple[dict[str, Any], int]:
        """A session's visible state and the session scope's version of exactly that
        state (read together, so an ETag always names the state it comes with)."""
        working = self._checkout(spec)
        try:
            if working.is_new:
                raise SessionNotFoundError(f"no session {spec.session_id!r}")
            return working.plain(), working.versions.get(ScopeKey("session", spec.session_id), 0)
        finally:
            self._release(working, keep=not working.has_changes)

    def delete_session(self, session_id: str) -> bool:
        """Delete a session for good: a run still writing it fails its next commit."""
        found = self.db.delete_session(session_id)
        self.cache.drop(session_id)
        self._landed.forget_session(session_id)
        return found


__all__ = [
    "ANONYMOUS_USER",
    "APP_PREFIX",
    "TEMP_PREFIX",
    "TTL_KEY",
    "USER_PREFIX",
    "CommitPolicy",
    "Committed",
    "SessionMode",
    "SessionSpec",
    "StateLoader",
    "StateStore",
    "WorkingState",
    "clear_expiry",
    "expire_keys",
    "new_id",
    "owned_spec",
    "scope_of",
    "set_expiry",
    "visible_state",
]
