"""Session transactions: the one lifecycle every writer of session state goes through.

    with store.begin(spec) as txn:              # checkout (sync shell)
        txn.state["n"] = 1                      # recorded as ops
        sp = txn.savepoint()
        try: risky(txn.state)
        except Exception: txn.rollback(sp)      # undo back to sp (or the last commit)
        txn.commit(source="api")                # CAS + rebase on lost races, exactly once

    async with await store.abegin(spec) as txn: # the async shell: same core
        await txn.commit(...)

    with store.begin(spec, at_versions=seen) as txn:   # edits made against older versions
        txn.state["note"] = "x"                 # (a frontend's copy): the state as it was,
        txn.commit(source="ui")                 # rebased onto what landed since

A transaction owns checkout, nested savepoints, commits (each with a commit id stored in
the same database transaction as the commit, so a retry never applies twice), retry and
rebase, and release. Leaving the `with` block with an exception undoes what was not
committed and drops the cached tree; leaving it normally keeps the tree cached for the
session's next transaction. Agent runs, team members, workflow steps, the state API,
time travel, the HTTP server and the CLI all write through it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from statewise.db.base import validate_id
from statewise.db.planning import SessionSpec
from statewise.db.records import NewEvent, RunRecord, ScopeKey, SessionRecord
from statewise.db.working import WorkingState
from statewise.exceptions import InvalidInputError, StateError
from statewise.state.tracked import Recorder, TrackedDict, to_plain, track

if TYPE_CHECKING:
    # The store is typed as its commit layer, which never imports this module: `store`
    # builds transactions, so naming `StateStore` here would make a circle.
    from statewise.db._commit_attempt import CommitAttempt, CommitPolicy, Committed
    from statewise.db._store_checkout import StateLoader
    from statewise.db._store_commit import StoreCommits


class TransactionCore:
    """What both shells share: the checked-out state, marks, savepoints and release."""

    def __init__(
        self,
        store: StoreCommits,
        working: WorkingState,
        policy: CommitPolicy,
        *,
        detached: bool = False,
    ) -> None:
        self.store = store
        self.working = working
        self.policy = policy
        self.closed = False
        self.detached = detached  # a branch: never committed, never cached

    # ---- the state -----------------------------------------------------------------------

    @property
    def state(self) -> TrackedDict:
        """The live merged state (session keys, `user:`, `app:`, `temp:`)."""
        return self.working.root

    @property
    def spec(self) -> SessionSpec:
        return self.working.spec

    @property
    def record(self) -> SessionRecord | None:
        return self.working.record

    @property
    def is_new(self) -> bool:
        """True until the session exists in the database."""
        return self.working.is_new

    @property
    def has_changes(self) -> bool:
        return self.working.has_changes

    @property
    def versions(self) -> dict[ScopeKey, int]:
        return self.working.versions

    @property
    def version(self) -> int:
        """The session scope's version the state is at (0 before its first commit)."""
        return self.working.versions.get(ScopeKey("session", self.working.spec.session_id), 0)

    def plain(self) -> dict[str, Any]:
        """The visible state as a plain dict (no `temp:` keys, no TTL bookkeeping)."""
        return self.working.plain()

    def mark(self, source: str) -> None:
        """Attribute every change since the previous mark to `source` (a tool, a hook)."""
        self.working.mark(source)

    # ---- savepoints ----------------------------------------------------------------------

    def savepoint(self) -> int:
        """A point to `rollback` to. It stays valid across commits: rolling back to a
        savepoint taken before a commit undoes back to that commit (committed work stays)."""
        return self.working.recorder.savepoint()

    def rollback(self, savepoint: int) -> None:
        self.working.rollback_to(savepoint)

    def discard(self) -> None:
        """Undo everything not committed yet."""
        self.working.discard_uncommitted()

    # ---- commit (the core; the shells call it directly or from a worker thread) ---------

    def _commit(
        self,
        events: Sequence[NewEvent],
        run: RunRecord | None,
        run_id: str | None,
        step: int | None,
        source: str,
        commit_id: str | None,
    ) -> Committed:
        attempt = self._attempt(events, run, run_id, step, source, commit_id)
        return self.store._land(self.working, attempt, self.policy)

    def _attempt(
        self,
        events: Sequence[NewEvent],
        run: RunRecord | None,
        run_id: str | None,
        step: int | None,
        source: str,
        commit_id: str | None,
    ) -> CommitAttempt:
        """The commit of what changed, built (no I/O), for either shell to land."""
        if self.closed:
            raise StateError("this session transaction is closed")
        if self.detached:
            raise StateError("a branch of a session transaction cannot commit")
        return self.store._first_attempt(self.working, events, run, run_id, step, source, commit_id)

    def state_loader(self) -> StateLoader:
        """A function returning the state as it is now, even after later commits."""
        return self.store.state_loader(self.working)

    # ---- release ---------------------------------------------------------------------------

    def close(self, *, keep: bool = True) -> None:
        """Release the state: uncommitted changes are dropped; with `keep` the tree stays
        cached for the session's next transaction. Closing twice does nothing."""
        if self.closed:
            return
        self.closed = True
        if not keep:
            self.working.discard_uncommitted()
        if not self.detached:
            self.store._release(self.working, keep=keep)

    def _exit(self, failed: bool) -> None:
        if failed:
            self.working.discard_uncommitted()
        self.close(keep=not failed)


_COMMIT_DOC = """Persist everything changed since the last commit, with `events` and `run`.

        Lost races are rebased (commuting ops merge, conflicts go by the key's rule and are
        recorded) within the transaction's session mode and `expected_version`.

        `commit_id` names this commit for exactly-once delivery. The database stores it in
        the same transaction as the commit; a commit whose id already landed is not applied
        again: the call returns the stored result with `already_landed=True`. Leave it out and a
        fresh id is used (retries inside this call keep it). Pass a deterministic id (e.g.
        f"{run_id}:{step}") when the same logical commit may be re-executed by another
        process, such as a durable-execution engine replaying a workflow step: the second
        execution then cannot apply its state changes twice. Ids are unique per session.
        """


class Transaction(TransactionCore):
    """A session transaction for synchronous callers (blocking I/O)."""

    def commit(
        self,
        events: Sequence[NewEvent] = (),
        *,
        run: RunRecord | None = None,
        run_id: str | None = None,
        step: int | None = None,
        source: str = "unattributed",
        commit_id: str | None = None,
    ) -> Committed:
        return self._commit(events, run, run_id, step, source, commit_id)

    commit.__doc__ = _COMMIT_DOC

    def prepare(self, events: Sequence[NewEvent] = (), *, source: str) -> CommitAttempt:
        """The commit of what changed, built but not written (no I/O): for a writer that
        stores it another way (a fork imports it with the runs it copies, in one
        database transaction), or hands it back to `land`."""
        attempt = self._attempt(events, None, None, None, source, None)
        self.store.build_attempt(self.working, attempt)
        return attempt

    def land(self, attempt: CommitAttempt) -> Committed:
        """Write a commit `prepare` built, as `commit` would have."""
        return self.store._land(self.working, attempt, self.policy)

    def __enter__(self) -> Transaction:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._exit(exc_type is not None)


class AsyncTransaction(TransactionCore):
    """A session transaction for async callers: I/O goes through the database's async
    policy (inline on a sync call's private loop; on a shared one, a worker thread or the
    database's async driver). A commit is built on the loop and written through the
    database's async commit."""

    async def commit(
        self,
        events: Sequence[NewEvent] = (),
        *,
        run: RunRecord | None = None,
        run_id: str | None = None,
        step: int | None = None,
        source: str = "unattributed",
        commit_id: str | None = None,
    ) -> Committed:
        attempt = self._attempt(events, run, run_id, step, source, commit_id)
        return await self.store._aland(self.working, attempt, self.policy)

    commit.__doc__ = _COMMIT_DOC

    async def settle(self) -> None:
        """Make a state assumed new (`StateStore.abegin` with `initialize`) what is stored,
        for a caller about to use it without committing first (a durable run whose start
        was replayed, not run); nothing for any other state."""
        if self.working.assumed_new is not None:
            await self.store.db.run_io(self.store._settle, self.working)

    def branch(self) -> AsyncTransaction:
        """A detached copy of the current state for a parallel line of execution: its
        changes are recorded but never committed or cached by the branch itself (the
        caller merges what it wants back into this transaction)."""
        parent = self.working
        recorder = Recorder()
        data = {k: to_plain(v) for k, v in dict.items(parent.root)}
        working = WorkingState(
            spec=parent.spec,
            record=parent.record,
            versions=dict(parent.versions),
            root=track(data, recorder),
            recorder=recorder,
        )
        return AsyncTransaction(self.store, working, self.policy, detached=True)

    async def __aenter__(self) -> AsyncTransaction:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._exit(exc_type is not None)


def checkout_at(
    store: StoreCommits, spec: SessionSpec, versions: Mapping[ScopeKey, int]
) -> WorkingState:
    """A session's state as it was at `versions` (a scope not named: as it is now),
    checked out for commits based on those versions. Whoever saw that state (a frontend's
    copy, a reply computed from it) writes like any other writer that lost a race: each
    commit rebases its ops onto what landed since, under the keys' rules, with conflicts
    recorded. Not cached on the way in: the cached tree is the latest one."""
    validate_id(spec.session_id, "session_id")
    keys = spec.scope_keys()
    record, current = store.db.probe(spec.session_id, keys)
    at = {key: versions.get(key, current[key]) for key in keys}
    if any(not 0 <= at[key] <= current[key] for key in keys):
        given = {key.kind: at[key] for key in keys}
        stored = {key.kind: current[key] for key in keys}
        raise InvalidInputError(
            f"session {spec.session_id!r}: the state versions given ({given}) are not versions "
            f"it had: negative, or newer than the session's ({stored})"
        )
    data: dict[str, Any] = {}
    for key in keys:
        data.update(store.codec.decode_scope(key, store.scope_at(key, at[key])))
    recorder = Recorder()
    working = WorkingState(
        spec=spec, record=record, versions=at, root=track(data, recorder), recorder=recorder
    )
    working.clean = recorder.savepoint()
    return working


__all__ = ["AsyncTransaction", "Transaction", "TransactionCore", "checkout_at"]
