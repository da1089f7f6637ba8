"""The state engine between runs and storage: checkout, commit, rebase.

A run *checks out* a session's state: one merged, tracked dict holding the session's own
keys, the user's `user:` keys and the app's `app:` keys. Code mutates it freely; the
recorder logs every change as ops. At each commit point the ops are split by scope and
committed with a compare-and-swap on each scope's version. When another writer got there
first, the ops are rebased onto the latest stored state (commuting ops merge, true
conflicts go by the key's rule and are recorded) and the commit is tried again.

Writers do not call `checkout`/`commit`/`release` themselves: they open a transaction
(`StateStore.begin` / `abegin`, see `statewise.db.transaction`), which owns that lifecycle.

This module is the I/O half. The pure parts live beside it: `planning` (scopes, commit
planning, rebase attribution, identity rules), `state_codec` (the one place state is
encoded for storage and decoded from it), `cache` (checked-in trees) and `working`
(the checked-out tree, TTL).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from statewise.db import _codec
from statewise.db._group import session_turns
from statewise.db.base import BaseDb, ProbedTails, on_private_loop, validate_id
from statewise.db.cache import cache_for
from statewise.db.planning import (
    ANONYMOUS_USER,
    APP_PREFIX,
    SCOPE_PREFIX,
    TEMP_PREFIX,
    TTL_KEY,
    USER_PREFIX,
    PendingCommit,
    SessionMode,
    SessionSpec,
    check_identity,
    is_contiguous,
    owned_spec,
    rebase_scope,
    resplit,
    scope_of,
)
from statewise.db.records import (
    Commit,
    CommitResult,
    DeltaRecord,
    DeltaSegment,
    NewEvent,
    RunRecord,
    ScopeKey,
    ScopeWrite,
    SessionRecord,
)
from statewise.db.replay import apply_segments
from statewise.db.retention import (
    check_commit_id,
    compact_after_commit,
    is_old_id,
    require_retained,
)
from statewise.db.state_codec import StateCodec
from statewise.db.transaction import AsyncTransaction, Transaction, checkout_at
from statewise.db.working import (
    ScopeSizes,
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
    StateOpError,
    StateValidationError,
    VersionConflict,
)
from statewise.state.merge import Rules
from statewise.state.ops import Op, apply_ops
from statewise.state.schema import StateSchema
from statewise.state.secrets import REGISTRY_KEY, Cipher, registered_secrets
from statewise.state.tracked import Recorder, TrackedDict, track

COMMIT_RETRY_SECONDS = 30.0  # how long a commit keeps rebasing before it gives up
CATCH_UP_DELTAS = 64  # a cached tree further behind than this is reloaded instead
CONTENDED_KEPT = 1024  # sessions remembered as contended, then all forgotten at once


SNAPSHOT_MIN_BYTES = 32 * 1024


@dataclass(kw_only=True, slots=True)
class CommitPolicy:
    """What a commit is committing to (see `SessionMode`), and the version of the
    session's own scope it requires (`If-Match`): with `expected_version`, a lost race on
    that scope fails with `StaleStateVersionError` instead of rebasing."""

    mode: SessionMode = "open"
    expected_version: int | None = None


class StateStore:
    """Session state on one database, with one agent's (or workflow's) rules.

    `rules` decide true conflicts per key, `schema` validates every commit, `secret_keys`
    are encrypted at rest with `cipher`.
    """

    def __init__(
        self,
        db: BaseDb,
        *,
        rules: Rules | None = None,
        schema: StateSchema | None = None,
        secret_keys: Iterable[str] = (),
        cipher: Cipher | None = None,
    ) -> None:
        self.db = db
        self.rules = rules or Rules()
        self.schema = schema
        self.codec = StateCodec(
            frozenset(secret_keys) | (schema.secret_keys() if schema else frozenset()), cipher
        )
        self.cache = cache_for(db)
        self._registries: dict[str, tuple[int, frozenset[str]]] = {}
        # Sessions where a commit with writes lost a race lately: their checkouts probe
        # and read what moved in one go (`_probe_contended`) and, where the database
        # queues rebased commits, their commits queue at once (`_queues_at_once`).
        self._contended: set[str] = set()
        self._turns = session_turns(db)  # (group commit)

    @property
    def secret_keys(self) -> frozenset[str]:
        return self.codec.secret_keys

    @property
    def cipher(self) -> Cipher:
        return self.codec.cipher

    # ---- which keys are secret: declared here, or recorded in the data -------------------

    def secret_keys_in(self, state: Mapping[str, Any]) -> frozenset[str]:
        """The secret keys of a checked-out (merged) state: the ones this store declares
        and the ones its app's registry records (any agent of the app declared them)."""
        return self.codec.secrets_in(state)

    def app_secret_keys(self, app_name: str) -> frozenset[str]:
        """The secret keys of every session of `app_name` (for readers without a checkout:
        the HTTP API redacts with these)."""
        key = ScopeKey("app", app_name)
        version = self.db.probe("-", [key])[1][key]
        cached = self._registries.get(app_name)
        if cached is None or cached[0] != version:
            data = self.db.load_scopes([key])[key].data
            cached = (version, registered_secrets({REGISTRY_KEY: data.get("__secrets__")}))
            self._registries[app_name] = cached
        return self.secret_keys | cached[1]

    def _register_secrets(self, ws: WorkingState) -> None:
        """Record this store's declared secret keys in the app's registry (once per app),
        so agents that declare nothing encrypt them too. Appends merge with concurrent
        writers, so no agent's names are lost."""
        if not self.secret_keys or not ws.recorder.ops:
            return
        missing = self.secret_keys - registered_secrets(ws.root)
        if not missing:
            return
        ws.mark("commit")
        with ws.root.engine_writes():
            registry = ws.root.get(REGISTRY_KEY)
            if not isinstance(registry, list):
                ws.root[REGISTRY_KEY] = sorted(missing)
            else:
                registry.extend(sorted(missing))
        ws.mark("engine:secret_keys")

    def plain_scope_at(self, key: ScopeKey, version: int) -> dict[str, Any]:
        """A scope's state at `version`, names relative to the scope, secrets decrypted."""
        prefix = SCOPE_PREFIX[key.kind]
        decoded = self.codec.decode_scope(key, self.scope_at(key, version))
        return {full[len(prefix) :]: value for full, value in decoded.items()}

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
    ) -> Transaction:
        """Open a transaction on a session (blocking I/O); see `SessionMode`.

        `expected_version` is the session scope's version the caller based its writes on
        (HTTP `If-Match`): checked when the transaction begins and again, atomically, by
        each commit, which then fails with `StaleStateVersionError` instead of rebasing.

        `at_versions` opens the state as it was at those scope versions (what a frontend
        last saw): commits are based on them and rebase onto whatever landed since.
        """
        policy = CommitPolicy(mode=mode, expected_version=expected_version)
        return Transaction(self, self._open(spec, policy, at_versions), policy)

    async def abegin(
        self,
        spec: SessionSpec,
        *,
        mode: SessionMode = "open",
        expected_version: int | None = None,
        at_versions: Mapping[ScopeKey, int] | None = None,
    ) -> AsyncTransaction:
        """`begin` for async callers: network databases are reached from a worker thread,
        so the event loop never waits on a round trip."""
        policy = CommitPolicy(mode=mode, expected_version=expected_version)
        if on_private_loop():  # (every database runs inline there: see `BaseDb._run_async`)
            working = self._open(spec, policy, at_versions)
        else:
            working = await self.db._run_async(self._open, spec, policy, at_versions)
        return AsyncTransaction(self, working, policy)

    def _open(
        self,
        spec: SessionSpec,
        policy: CommitPolicy,
        at_versions: Mapping[ScopeKey, int] | None = None,
    ) -> WorkingState:
        if at_versions is None:
            working = self.checkout(spec)
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
            self.release(working, keep=False)
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
        working = self.checkout(spec)
        try:
            if working.is_new:
                raise SessionNotFoundError(f"no session {spec.session_id!r}")
            return working.plain(), working.versions.get(ScopeKey("session", spec.session_id), 0)
        finally:
            self.release(working, keep=not working.has_changes)

    def delete_session(self, session_id: str) -> bool:
        """Delete a session for good: a run still writing it fails its next commit."""
        found = self.db.delete_session(session_id)
        self.cache.drop(session_id)
        return found

    # ---- checkout / release ------------------------------------------------------------

    def checkout(self, spec: SessionSpec) -> WorkingState:
        validate_id(spec.session_id, "session_id")
        if spec.user_id is not None:
            validate_id(spec.user_id, "user_id")
        cached = self.cache.take(spec.session_id) if spec.session_id in self._contended else None
        probed = self._probe_contended(spec, cached)
        if probed is not None:
            spec, (record, versions, tails) = probed
        else:
            spec, record, versions = self._probe_owned(spec)
            tails = None
            cached = cached or self.cache.take(spec.session_id)
        keys = spec.scope_keys()
        recorder = Recorder()
        if cached is not None and cached.spec.scope_keys() == keys:
            stale = (
                [k for k in keys if cached.versions.get(k) != versions[k]]
                if cached.versions != versions
                else ()
            )
            ws = cached
            ws.recorder = recorder
            ws.root.set_recorder(recorder)
            ws.record = record
            ws.marks = []
            ws.clean = recorder.savepoint()
            ws.spec = spec
            if stale:
                self._catch_up(ws, stale, versions, tails)
            expire_keys(ws)
            return ws
        loaded = self.db.load_scopes(keys)
        data: dict[str, Any] = {}
        sizes = {}
        for key in keys:
            scope = loaded[key]
            data.update(self.codec.decode_scope(key, scope.data))
            versions[key] = scope.version
            sizes[key] = ScopeSizes(
                snapshot_bytes=scope.snapshot_bytes, tail_bytes=scope.tail_bytes
            )
        self._check_schema_on_load(spec, data, new=record is None)
        root = track(data, recorder)
        ws = WorkingState(
            spec=spec, record=record, versions=versions, root=root, recorder=recorder, sizes=sizes
        )
        ws.clean = recorder.savepoint()
        expire_keys(ws)
        return ws

    def _check_schema_on_load(
        self, spec: SessionSpec, data: Mapping[str, Any], *, new: bool = False
    ) -> None:
        """A stored state that no longer fits the schema (the schema changed) is reported
        with the session and what to do, instead of failing somewhere later. A session
        that does not exist yet has stored nothing: only the shared keys it sees (`user:`,
        `app:`) are checked, and its required keys at its first commit (`validate`)."""
        if self.schema is None or not data:
            return
        if new:
            try:
                self.schema.validate_keys(data, [k for k in data if k != TTL_KEY])
            except StateValidationError as exc:
                raise StateValidationError(
                    exc.key,
                    f"{exc.reason} (a shared key the new session {spec.session_id!r} sees; "
                    "it no longer fits state_schema)",
                ) from exc
            return
        try:
            self.schema.validate_all({k: v for k, v in data.items() if k != TTL_KEY})
        except StateValidationError as exc:
            raise StateValidationError(
                exc.key,
                f"{exc.reason} (stored in session {spec.session_id!r}, which no longer fits "
                f"state_schema; migrate it, e.g. agent.update_session_state({{...}}, "
                f"session_id={spec.session_id!r}) with a schema-free Agent, or give the field "
                f"a default)",
            ) from exc

    def release(self, ws: WorkingState, *, keep: bool = True) -> None:
        """Return a checked-out state. Uncommitted changes are dropped, temp: keys too."""
        for key in [k for k in ws.root if k.startswith(TEMP_PREFIX)]:
            dict.pop(ws.root, key)
        if ws.has_changes or not keep or ws.record is None:
            self.cache.drop(ws.spec.session_id)
            return
        self.cache.give(ws)

    def _probe_owned(
        self, spec: SessionSpec
    ) -> tuple[SessionSpec, SessionRecord | None, dict[ScopeKey, int]]:
        """The session's record and scope versions, and the spec with its owner's scopes
        (probed again when the owner makes them other than `spec`'s)."""
        keys = spec.scope_keys()
        record, versions = self.db.probe(spec.session_id, keys)
        owned = spec if record is None else owned_spec(spec, record)
        if owned is not spec and owned.scope_keys() != keys:
            record, versions = self.db.probe(spec.session_id, owned.scope_keys())
        return owned, record, versions

    def _probe_contended(
        self, spec: SessionSpec, cached: WorkingState | None
    ) -> tuple[SessionSpec, ProbedTails] | None:
        """On a session other writers keep moving (we lost a race on it lately), a cached
        tree is nearly always behind at checkout: probe it and read what it misses in one
        round trip (`probe_tails` from the tree's versions) instead of a probe, then the
        tails. Bounded by `CATCH_UP_DELTAS`: a tree further behind is reloaded anyway.
        None (probe as usual) without such a tree, or when the session's owner makes its
        scopes other than the tree's."""
        if cached is None:
            return None
        keys = cached.spec.scope_keys()
        bases = {key: cached.versions.get(key, 0) for key in keys}
        try:
            probed = self.db.probe_tails(spec.session_id, bases, limit=CATCH_UP_DELTAS)
        except BaseException:
            self.cache.give(cached)  # (unchanged: as if never taken)
            raise
        record = probed[0]
        owned = spec if record is None else owned_spec(spec, record)
        if owned.scope_keys() != keys:
            return None
        return owned, probed

    def _catch_up(
        self,
        ws: WorkingState,
        stale: Sequence[ScopeKey],
        versions: Mapping[ScopeKey, int],
        tails: Mapping[ScopeKey, Sequence[DeltaRecord]] | None = None,
    ) -> None:
        """Bring a cached tree up to what other writers landed since: their deltas
        applied to it (one read, O(change)), as the in-memory rebase does, or the stale
        scopes reloaded when the gap is long (more than `CATCH_UP_DELTAS`), does not start
        from the tree's versions, or does not apply. On a session many processes write,
        every run finds its tree stale: 16 processes on one PostgreSQL session spent
        1.4 ms of each run's CPU reloading a few hundred items."""
        bases = {key: ws.versions.get(key, 0) for key in stale}
        if any(not 0 < versions[key] - after <= CATCH_UP_DELTAS for key, after in bases.items()):
            self._reload(ws, stale)
            return
        now: Mapping[ScopeKey, int] = versions
        if tails is None:  # (else read with the versions, from the tree's: see checkout)
            _record, now, tails = self.db.probe_tails(ws.spec.session_id, bases)
        if not all(
            now[key] > after and is_contiguous(after, now[key], tails.get(key, ()))
            for key, after in bases.items()
        ):
            self._reload(ws, stale)
            return
        tail_bytes = _tail_bytes(tails)
        if any(_snapshot_due(ws.sizes.get(key), n) for key, n in tail_bytes.items()):
            # Our next write would snapshot on a count that misses any snapshot another
            # writer took meanwhile: the reload reads the scope's real sizes (once per
            # snapshot's worth of deltas, not every writer on every catch-up).
            self._reload(ws, stale)
            return
        theirs = {key.kind: self.codec.decode_ops(key, tails[key]) for key in stale if key in tails}
        with _unrecorded(ws) as scratch:
            try:
                for ops in theirs.values():
                    apply_ops(ws.root, ops)
            except StateOpError:
                scratch.undoer()()
                self._reload(ws, stale)
                return
        _note_tails(ws, now, tail_bytes)

    def _reload(self, ws: WorkingState, keys: Sequence[ScopeKey]) -> None:
        loaded = self.db.load_scopes(keys)
        data = {
            k: v for k, v in dict.items(ws.root) if scope_of(k)[0] not in {k.kind for k in keys}
        }
        for key in keys:
            scope = loaded[key]
            data.update(self.codec.decode_scope(key, scope.data))
            ws.versions[key] = scope.version
            ws.sizes[key] = ScopeSizes(
                snapshot_bytes=scope.snapshot_bytes, tail_bytes=scope.tail_bytes
            )
        ws.root.replace_contents(data)

    # ---- reading state at a version ---------------------------------------------------------

    def state_loader(self, ws: WorkingState) -> StateLoader:
        """A function that returns the state as `ws` is now, even after later runs."""
        return StateLoader(self, ws.spec, dict(ws.versions))

    def state_at(self, spec: SessionSpec, versions: Mapping[ScopeKey, int]) -> dict[str, Any]:
        cached = self.cache.plain_if_current(spec.session_id, versions)
        if cached is not None:
            return cached
        out: dict[str, Any] = {}
        for key in spec.scope_keys():
            out.update(self.codec.decode_scope(key, self.scope_at(key, versions.get(key, 0))))
        return visible_state(out)

    def scope_at(self, key: ScopeKey, version: int) -> dict[str, Any]:
        """A scope's plain stored state at `version`: nearest snapshot, then deltas."""
        if version <= 0:
            return {}
        snapshot_version, data = self.db.read_snapshot(key, version)
        deltas = self.db.read_deltas(key, after_version=snapshot_version, upto_version=version)
        if (deltas[0].version if deltas else version + 1) != snapshot_version + 1:
            # A gap: history below a retention horizon was compacted away.
            require_retained(self.db, key.id, version)
        for delta in deltas:
            apply_segments(key, delta.version, data, delta.segments)
        return data

    # ---- commit ----------------------------------------------------------------------------

    def validate(self, ws: WorkingState, keys: Iterable[str]) -> None:
        """Check `keys` against the schema (O(change)); raises StateValidationError. The
        commit that creates a session also needs every key the schema requires."""
        if self.schema is None:
            return
        touched = {k for k in keys if not k.startswith(TEMP_PREFIX)}
        if ws.is_new:
            missing = self.schema.missing_required(ws.root)
            if missing:
                raise StateValidationError(
                    missing[0],
                    f"missing in the new session {ws.spec.session_id!r}, and state_schema "
                    "requires it: give the field a default in state_schema, or "
                    f"pass it in session_state={{{missing[0]!r}: ...}} (on the agent, for "
                    "every new session, or on the run)",
                )
        if touched:
            self.schema.validate_keys(ws.root, touched)

    def commit(
        self,
        ws: WorkingState,
        events: Sequence[NewEvent] = (),
        run: RunRecord | None = None,
        run_id: str | None = None,
        step: int | None = None,
        source: str = "unattributed",
        commit_id: str | None = None,
        policy: CommitPolicy | None = None,
    ) -> Committed:
        """Persist the pending ops with `events` (and `run`), rebasing on lost races.

        Transactions call this; see `Transaction.commit` for the parameters. The common
        case (the first attempt lands) builds one `Commit` and nothing else: what a rebase
        needs (`PendingCommit`) is made only when a race was lost.
        """
        attempt = self.first_attempt(ws, events, run, run_id, step, source, commit_id)
        return self.land(ws, attempt, policy)

    async def aland(
        self, ws: WorkingState, attempt: CommitAttempt, policy: CommitPolicy | None
    ) -> Committed:
        """`land` from a shared event loop (for `AsyncTransaction.commit`, which builds the
        attempt on the loop: it is CPU only, and built in a worker thread it would wait for
        the loop's thread to hand over the interpreter lock). The write goes through the
        database's async commit (a worker thread, or the async driver on this loop), and
        what a lost race or a replayed commit reads goes to a worker thread.

        The landing runs to its end even if our caller is cancelled meanwhile: a write
        that landed but was not recorded in the working state would be rebased onto
        itself by the transaction's next commit, applying it twice."""
        landing = asyncio.ensure_future(self._aland(ws, attempt, policy))
        landing.add_done_callback(_retrieve)  # (an outcome nobody awaits any more)
        return await asyncio.shield(landing)

    async def _aland(
        self, ws: WorkingState, attempt: CommitAttempt, policy: CommitPolicy | None
    ) -> Committed:
        """`_aland_once`, with the retention policy's checks around it (see `land`)."""
        session_id = ws.spec.session_id
        if is_old_id(attempt.commit_id):
            await self.db.run_io(check_commit_id, self.db, session_id, attempt.commit_id)
        committed = await self._aland_once(ws, attempt, policy)
        if self._compaction_due(attempt, committed, session_id):
            await self.db.run_io(compact_after_commit, self.db, session_id)
        return committed

    async def _aland_once(
        self, ws: WorkingState, attempt: CommitAttempt, policy: CommitPolicy | None
    ) -> Committed:
        """The common case (the write lands at the first try) is recorded on the loop; a
        lost race and a replay read, so they leave it."""
        if self._queues_at_once(ws, attempt):
            return await self.db.run_io(self._after_lost_race, ws, attempt, policy)
        try:
            result = await self.db.acommit(attempt.commit)
        except VersionConflict:
            self._note_lost_race(ws)
            return await self.db.run_io(self._after_lost_race, ws, attempt, policy)
        if result.replayed:
            return await self.db.run_io(self._landed, ws, attempt, result)
        return self._landed(ws, attempt, result)

    def first_attempt(
        self,
        ws: WorkingState,
        events: Sequence[NewEvent],
        run: RunRecord | None,
        run_id: str | None,
        step: int | None,
        source: str,
        commit_id: str | None,
    ) -> CommitAttempt:
        """The commit of everything pending, as first tried (no I/O; `land` or `aland`
        writes it)."""
        if commit_id is None:
            commit_id = new_id()
        else:
            validate_id(commit_id, "commit_id")
        recorder = ws.recorder
        if recorder.ops:
            if self.schema is not None:
                self.validate(ws, {str(op.path[0]) for op in recorder.ops})
            self._register_secrets(ws)
        undo = recorder.undoer()
        segments = ws.take_segments(source)
        commit, changes = self._build_commit(ws, segments, (), commit_id, events, run, run_id, step)
        return CommitAttempt(commit_id, segments, undo, events, commit, changes)

    def land(
        self, ws: WorkingState, attempt: CommitAttempt, policy: CommitPolicy | None
    ) -> Committed:
        """Write `attempt`, rebasing it if it lost a race, and record what landed.

        Under a retention policy, a commit whose id the session may have forgotten is
        refused first, and a commit that takes the session past its policy's slack is
        followed by a compaction, in a transaction of its own (its failure is logged: the
        commit landed, and a later commit compacts)."""
        session_id = ws.spec.session_id
        check_commit_id(self.db, session_id, attempt.commit_id)
        committed = self._land_once(ws, attempt, policy)
        if self._compaction_due(attempt, committed, session_id):
            compact_after_commit(self.db, session_id)
        return committed

    def _compaction_due(
        self, attempt: CommitAttempt, committed: Committed, session_id: str
    ) -> bool:
        retention = self.db.retention
        return (
            retention is not None
            and not committed.replayed
            and retention.due(
                committed.versions.get(ScopeKey("session", session_id)),
                committed.last_seq,
                len(attempt.events),
            )
        )

    def _land_once(
        self, ws: WorkingState, attempt: CommitAttempt, policy: CommitPolicy | None
    ) -> Committed:
        if self._queues_at_once(ws, attempt):
            return self._after_lost_race(ws, attempt, policy)
        try:
            result = self.db.commit(attempt.commit)
        except VersionConflict:
            self._note_lost_race(ws)
            return self._after_lost_race(ws, attempt, policy)
        return self._landed(ws, attempt, result)

    def _queues_at_once(self, ws: WorkingState, attempt: CommitAttempt) -> bool:
        """Whether `attempt` skips its first try and queues for the session's lock: it
        writes state to a session whose last such commit lost a race. The first try
        would mostly lose again (every writer of a busy session holds the version it read
        when its run began), and a lost try costs a round trip and a turn in the lock's
        queue: 16 processes on one PostgreSQL session ran 186-190 runs/s trying first,
        218-219 queuing at once (same machine, alternating). The writers of this process
        take turns there and land together (`db._group`), on every backend. Commits without writes
        cannot lose and always go straight to `commit`."""
        return bool(attempt.commit.writes) and ws.spec.session_id in self._contended

    def _note_lost_race(self, ws: WorkingState) -> None:
        if len(self._contended) >= CONTENDED_KEPT:
            self._contended.clear()
        self._contended.add(ws.spec.session_id)

    def _after_lost_race(
        self, ws: WorkingState, attempt: CommitAttempt, policy: CommitPolicy | None
    ) -> Committed:
        pending = PendingCommit(
            segments=attempt.segments, commit_id=attempt.commit_id, undo=attempt.undo
        )
        first = attempt.commit  # (the run and step it names stay the same when rebased)
        commit, changes, result = self._commit_rebased(
            ws,
            pending,
            attempt.events,
            first.run,
            first.run_id,
            first.step,
            policy or CommitPolicy(),
        )
        rebased = replace(attempt, commit=commit, changes=changes)
        return self._landed(ws, rebased, result, pending.conflicts)

    def _landed(
        self,
        ws: WorkingState,
        attempt: CommitAttempt,
        result: CommitResult,
        conflicts: list[dict[str, Any]] | None = None,
    ) -> Committed:
        """Bring the working state up to the commit that landed; what it wrote."""
        commit = attempt.commit
        writes = commit.writes
        if result.replayed:
            # An earlier attempt of this very commit landed (its reply was lost): nothing
            # was applied again. The tree in memory may be rebased differently from what
            # landed, so take the stored state.
            record, _versions = self.db.probe(ws.spec.session_id, ())
            ws.record = record or ws.record
            self._reload(ws, ws.spec.scope_keys())
        else:
            for write in writes:
                ws.versions[write.key] = result.versions[write.key]
                size = ws.sizes.setdefault(write.key, ScopeSizes())
                if write.snapshot is not None:
                    size.snapshot_bytes = write.snapshot_bytes
                    size.tail_bytes = 0
                else:
                    size.tail_bytes += write.delta_bytes
            if ws.record is None:
                ws.record = replace(commit.session, created_at=result.committed_at)
        if ws.record is not None:
            ws.record.last_seq = result.last_seq
        if conflicts:
            secrets = self.secret_keys_in(ws.root)
            conflicts = [self.codec.conflict_record(c, secrets) for c in conflicts]
        return Committed(
            versions={w.key: result.versions[w.key] for w in writes if w.key in result.versions}
            if writes
            else {},
            last_seq=result.last_seq,
            changes=attempt.changes,
            conflicts=conflicts or [],
            commit_id=attempt.commit_id,
            replayed=result.replayed,
        )

    def _build_commit(
        self,
        ws: WorkingState,
        segments: Sequence[tuple[str, Sequence[Op]]],
        pending_conflicts: Sequence[dict[str, Any]],
        commit_id: str,
        events: Sequence[NewEvent],
        run: RunRecord | None,
        run_id: str | None,
        step: int | None,
    ) -> tuple[Commit, list[dict[str, Any]]]:
        """The commit of `segments` (and the conflicts a rebase resolved) with `events`,
        and the state changes it makes (secrets redacted) for whoever reports them.

        Secret values are masked by value here, in every event and in the run record,
        from the commit that makes them secret on (`mask_commit`): a value the model
        passed as a tool argument and a tool stored under a secret key leaves the engine
        as the marker in the same step's messages, tool arguments and results, and in
        later messages that echo it."""
        events, run = self.codec.mask_commit(ws.root, events, run)
        spec = ws.spec
        record = ws.record
        session = record or SessionRecord(
            session_id=spec.session_id,
            user_id=spec.user_id,
            app_name=spec.app_name,
            kind=spec.kind,
        )
        if not segments and not pending_conflicts:
            # A run's start and end commits usually write no state: nothing to encode.
            return Commit(
                session=session,
                commit_id=commit_id,
                create_session=record is None,
                events=events if type(events) is list else list(events),
                run=run,
                run_id=run_id,
                step=step,
            ), []
        codec = self.codec
        secrets = codec.secrets_in(ws.root)
        by_scope: dict[str, list[DeltaSegment]] = {}
        for source, ops in segments:
            split: dict[str, list[dict[str, Any]]] = {}
            for op in ops:
                kind = scope_of(str(op.path[0]))[0]
                if kind != "temp":
                    split.setdefault(kind, []).append(codec.encode_op(op, ws.root, kind, secrets))
            for kind, encoded in split.items():
                by_scope.setdefault(kind, []).append(DeltaSegment(source=source, ops=encoded))
        writes = []
        all_events = list(events)
        changes: list[dict[str, Any]] = []
        for key in spec.scope_keys() if by_scope else ():
            scope_segments = by_scope.get(key.kind)
            if not scope_segments:
                continue
            segments_text = _codec.dumps([s.to_dict() for s in scope_segments])
            delta_bytes = len(segments_text)
            size = ws.sizes.setdefault(key, ScopeSizes())
            snapshot = None
            if _snapshot_due(size, delta_bytes):
                snapshot = codec.encode_snapshot(ws.root, key, secrets)
            write = ScopeWrite(
                key=key,
                base_version=ws.versions.get(key, 0),
                segments=scope_segments,
                conflicts=[
                    codec.conflict_record(c, secrets)
                    for c in pending_conflicts
                    if c["scope"] == key.kind
                ]
                if pending_conflicts
                else [],
                snapshot=snapshot,
                delta_bytes=delta_bytes,
                _segments_text=segments_text,  # what backends store: encoded once
            )
            writes.append(write)
            redacted = [codec.redact_segment(s, key.kind, secrets) for s in scope_segments]
            all_events.append(
                NewEvent(
                    type="state_delta",
                    run_id=run_id,
                    data={
                        "scope": key.kind,
                        "scope_id": key.id,
                        "version": write.base_version + 1,
                        "step": step,
                        "segments": redacted,
                    },
                )
            )
            changes.extend({"scope": key.kind, **op} for seg in redacted for op in seg["ops"])
        for conflict in pending_conflicts:
            all_events.append(
                NewEvent(
                    type="conflict_resolved",
                    run_id=run_id,
                    data=codec.conflict_record(conflict, secrets),
                )
            )
        return Commit(
            session=session,
            commit_id=commit_id,
            create_session=record is None,
            writes=writes,
            events=all_events,
            run=run,
            run_id=run_id,
            step=step,
        ), changes

    def _commit_rebased(
        self,
        ws: WorkingState,
        pending: PendingCommit,
        events: Sequence[NewEvent],
        run: RunRecord | None,
        run_id: str | None,
        step: int | None,
        policy: CommitPolicy,
    ) -> tuple[Commit, list[dict[str, Any]], CommitResult]:
        """After a lost race: rebase onto what landed and commit again, until it lands.

        The database reads the other writers' deltas and commits what we make of them
        (`BaseDb.commit_rebased`); where it holds the session's lock meanwhile, this lands
        at the first try. Where it cannot (or a writer of a shared `user:`/`app:` scope got
        in), a fixed number of attempts would run out in seconds under heavy contention:
        a time budget with full-jitter exponential backoff (capped at 50 ms) spreads the
        writers out so each one lands. The jitter comes before the first locked try too:
        losers that all queued on the lock at once held it back to back (16 writers on one
        session: 172 runs/s without it, 191 with it, same invocation)."""
        built: list[tuple[Commit, list[dict[str, Any]]]] = []

        def build(probed: ProbedTails) -> Commit:
            if not self._rebase(ws, pending, policy, probed) and not self._turns.busy(
                ws.spec.session_id
            ):
                # Nobody landed before us, nobody of ours waits: the session is quiet again.
                self._contended.discard(ws.spec.session_id)
            built.append(
                self._build_commit(
                    ws,
                    pending.segments,
                    pending.conflicts,
                    pending.commit_id,
                    events,
                    run,
                    run_id,
                    step,
                )
            )
            return built[-1][0]

        give_up_at = time.monotonic() + COMMIT_RETRY_SECONDS
        turn = self._turns.of(ws.spec.session_id)
        keys = ws.spec.scope_keys()

        def bases() -> dict[ScopeKey, int]:
            return {key: ws.versions.get(key, 0) for key in keys}

        for attempt in itertools.count(1):
            if attempt > 1 or not turn.locked():
                # Nobody of this process is ahead in the queue: spread out from writers
                # of other processes (a writer of ours waiting for its turn need not).
                time.sleep(random.uniform(0, min(0.05, 0.0005 * 2 ** min(attempt, 10))))
            try:
                result = self._turns.commit(
                    self.db,
                    ws.spec.session_id,
                    bases,
                    build,
                    alone=pending.undo is None,
                )
            except VersionConflict:
                if time.monotonic() >= give_up_at:
                    raise
                continue
            return built[-1][0], built[-1][1], result
        raise AssertionError("unreachable")  # pragma: no cover

    def _rebase(
        self, ws: WorkingState, pending: PendingCommit, policy: CommitPolicy, probed: ProbedTails
    ) -> bool:
        """Re-apply our pending ops on the latest stored state of every scope that moved,
        given what `probe_tails` read from the versions the tree holds. False when no
        scope had moved."""
        keys = ws.spec.scope_keys()
        record, versions, tails = probed
        check_identity(policy.mode, ws.spec, ws.record, record)
        if ws.record is None:
            ws.record = record
        session_key = keys[0]
        if policy.expected_version is not None and versions[session_key] != ws.versions.get(
            session_key, 0
        ):
            raise StaleStateVersionError(
                ws.spec.session_id, ws.versions.get(session_key, 0), versions[session_key]
            )
        moved = [k for k in keys if versions[k] != ws.versions.get(k, 0)]
        if not moved:
            return False
        if self._rebase_in_memory(ws, pending, moved, versions, tails):
            return True
        pending.undo = None  # the tree is reloaded: what it undid is gone
        loaded = self.db.load_scopes(moved)
        moved_kinds = {k.kind for k in moved}
        rebased: dict[str, list[Op]] = {}
        latest_data: dict[str, Any] = {}
        for key in moved:
            theirs = self.codec.decode_ops(
                key, self.db.read_deltas(key, after_version=ws.versions.get(key, 0))
            )
            latest = self.codec.decode_scope(key, loaded[key].data)
            secrets = self.codec.secrets_in(ws.root) | self.codec.secrets_in(latest)
            ops = rebase_scope(key.kind, latest, theirs, pending, self.rules, secrets)
            if ops is not None:
                rebased[key.kind] = ops
            ws.versions[key] = loaded[key].version
            ws.sizes[key] = ScopeSizes(
                snapshot_bytes=loaded[key].snapshot_bytes, tail_bytes=loaded[key].tail_bytes
            )
            latest_data.update(latest)
        pending.segments = resplit(pending.segments, rebased)
        data = {k: v for k, v in dict.items(ws.root) if scope_of(k)[0] not in moved_kinds}
        data.update(latest_data)
        ws.root.replace_contents(data)
        return True

    def _rebase_in_memory(
        self,
        ws: WorkingState,
        pending: PendingCommit,
        moved: Sequence[ScopeKey],
        versions: Mapping[ScopeKey, int],
        tails: Mapping[ScopeKey, Sequence[DeltaRecord]],
    ) -> bool:
        """Rebase on the tree itself, in O(change): our ops come off it (`pending.undo`),
        the other writers' deltas (`tails`, read with `versions`) go on, and our ops are
        rebased onto that. Nothing is copied, so a rebase costs the same with 100 items in
        state as with 100,000: it runs while PostgreSQL holds the session's lock. False,
        changing nothing, when the deltas do not take our base to `versions` (then the
        caller reloads).

        If anything raises (a `strict` key both sides set), the tree is left as our ops
        found it, at the versions it still names, without them."""
        if pending.undo is None:
            return False
        for key in moved:
            if not is_contiguous(ws.versions.get(key, 0), versions[key], tails.get(key, ())):
                return False
        theirs: dict[str, list[Op]] = {
            key.kind: self.codec.decode_ops(key, tails[key]) for key in moved
        }
        root = ws.root
        with _unrecorded(ws) as scratch:
            pending.undo()
            pending.undo = None
            undo_theirs: Callable[[], None] | None = None
            try:
                for ops in theirs.values():
                    apply_ops(root, ops)
                undo_theirs = scratch.undoer()
                scratch.drain()
                rebased = self._replay_ours(root, pending, theirs)
            except BaseException:
                scratch.undoer()()
                if undo_theirs is not None:
                    undo_theirs()
                raise
            pending.undo = scratch.undoer()
        _note_tails(ws, versions, _tail_bytes({key: tails[key] for key in moved}))
        pending.segments = resplit(pending.segments, rebased)
        return True

    def _replay_ours(
        self, root: TrackedDict, pending: PendingCommit, theirs: Mapping[str, Sequence[Op]]
    ) -> dict[str, list[Op]]:
        """Our pending ops again, on a tree that has the other writers' ops: rebased in
        the scopes they moved (the rebased ops, by scope), as they were everywhere else."""
        rebased: dict[str, list[Op]] = {}
        secrets = self.codec.secrets_in(root)
        for kind, their_ops in theirs.items():
            ops = rebase_scope(kind, root, their_ops, pending, self.rules, secrets)
            if ops is not None:
                rebased[kind] = ops
        apply_ops(
            root,
            [
                op
                for _source, ops in pending.segments
                for op in ops
                if scope_of(str(op.path[0]))[0] not in theirs
            ],
        )
        return rebased


@contextmanager
def _unrecorded(ws: WorkingState) -> Iterator[Recorder]:
    """Change the tree without recording: what happens inside is the other writers'
    ops (or ours again, rebased), not changes to commit. The recorder it yields holds
    their undo; reserved keys (`__ttl__`, ...) may be written."""
    scratch = Recorder()
    ws.root.set_recorder(scratch)
    try:
        with scratch.engine():
            yield scratch
    finally:
        ws.root.set_recorder(ws.recorder)


def _tail_bytes(tails: Mapping[ScopeKey, Sequence[DeltaRecord]]) -> dict[ScopeKey, int]:
    """How many bytes each scope's tail grew by with `tails`: their stored segments'
    length, as read (encoded again only for a delta that was not read from storage)."""
    return {
        key: sum(
            d.stored_bytes
            if d.stored_bytes is not None
            else len(_codec.dumps([s.to_dict() for s in d.segments]))
            for d in deltas
        )
        for key, deltas in tails.items()
    }


def _snapshot_due(size: ScopeSizes | None, more: int) -> bool:
    """Whether a scope's next write snapshots it once its tail grows by `more` bytes."""
    size = size or ScopeSizes()
    return size.tail_bytes + more > max(size.snapshot_bytes, SNAPSHOT_MIN_BYTES)


def _note_tails(
    ws: WorkingState, versions: Mapping[ScopeKey, int], tail_bytes: Mapping[ScopeKey, int]
) -> None:
    """The tree now holds the tails of `tail_bytes` (applied to it): it is at `versions`
    of those scopes, and their tails grew by that much."""
    for key, grown in tail_bytes.items():
        ws.versions[key] = versions[key]
        ws.sizes.setdefault(key, ScopeSizes()).tail_bytes += grown


@dataclass(frozen=True, slots=True)
class StateLoader:
    """Loads a session's state as it was at `versions`, when asked."""

    store: StateStore
    spec: SessionSpec
    versions: dict[ScopeKey, int]

    def __call__(self) -> dict[str, Any]:
        return self.store.state_at(self.spec, self.versions)

    def if_cached(self) -> dict[str, Any] | None:
        """The state if the session's cached tree is still at `versions` (no read); else
        None."""
        return self.store.cache.plain_if_current(self.spec.session_id, self.versions)


def _retrieve(landing: asyncio.Future[Any]) -> None:
    """Mark a landing's error as seen: once its caller was cancelled nobody awaits it,
    and asyncio would log the error as never retrieved."""
    if not landing.cancelled():
        landing.exception()


@dataclass(slots=True)
class CommitAttempt:
    """A commit as built for one attempt, and what a rebase of it would need."""

    commit_id: str
    segments: list[tuple[str, list[Op]]]
    undo: Callable[[], None]
    events: Sequence[NewEvent]  # the caller's (the commit adds its state deltas to them)
    commit: Commit
    changes: list[dict[str, Any]]


@dataclass(kw_only=True)
class Committed:
    """What a commit wrote: new scope versions, the ops (secrets redacted), conflicts,
    and its commit id (`replayed`: the id had landed before, nothing was applied again)."""

    versions: dict[ScopeKey, int]
    last_seq: int
    changes: list[dict[str, Any]]
    conflicts: list[dict[str, Any]]
    commit_id: str = ""
    replayed: bool = False


_RANDOM_BATCH = 64
_random_halves: list[str] = []  # hex strings of 64 random bits each, taken from the end


def _refill_random_halves() -> None:
    text = os.urandom(8 * _RANDOM_BATCH).hex()
    _random_halves.extend(text[i : i + 16] for i in range(0, len(text), 16))


# A forked child must not hand out the ids its parent will also hand out.
os.register_at_fork(after_in_child=_random_halves.clear)


def new_id() -> str:
    """A fresh id: 32 hex digits, the time in nanoseconds then 64 random bits.

    Time first, so ids made one after another sort one after another: the database
    indexes keyed by run and commit ids then grow at their end instead of at a random
    page, and a commit rewrites fewer pages. The random half keeps ids unique across
    processes and unguessable; it comes from the OS's generator in batches, because a
    system call per id was a noticeable part of a small run (a run takes four ids).
    `list.pop` and `list.extend` are atomic, so threads never share a half; a thread
    whose refill other threads emptied before it could take one refills again.
    """
    while True:
        try:
            half = _random_halves.pop()
        except IndexError:
            _refill_random_halves()
        else:
            return f"{time.time_ns():016x}{half}"


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
