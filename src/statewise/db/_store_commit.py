"""`StateStore`'s write half: validation, the commit, lost races (contention) and rebase."""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from statewise._workers import runs_inline
from statewise.db import _codec
from statewise.db._commit_attempt import CommitAttempt, CommitPolicy, Committed
from statewise.db._store_checkout import (
    StoreCheckout,
    bytes_of_tails,
    note_tails,
    snapshot_due,
    unrecorded,
)
from statewise.db.base import ProbedTails, RebasedOnUnlanded, validate_id
from statewise.db.ids import new_id
from statewise.db.planning import (
    TEMP_PREFIX,
    PendingCommit,
    check_identity,
    is_contiguous,
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
from statewise.db.retention import (
    check_commit_id,
    compact_after_commit,
    is_old_id,
)
from statewise.db.working import (
    ScopeSizes,
    WorkingState,
)
from statewise.exceptions import (
    StaleStateVersionError,
    StateValidationError,
    VersionConflict,
)
from statewise.state.ops import Op, apply_ops
from statewise.state.tracked import TrackedDict

COMMIT_RETRY_SECONDS = 30.0  # how long a commit keeps rebasing before it gives up
CONTENDED_KEPT = 1024  # sessions remembered as contended, then all forgotten at once


class StoreCommits(StoreCheckout):
    """The write layer of `StateStore` (see there): validate, commit, land, rebase."""

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

    async def _aland(
        self, ws: WorkingState, attempt: CommitAttempt, policy: CommitPolicy | None
    ) -> Committed:
        """`_land` from a shared event loop (for `AsyncTransaction.commit`, which builds the
        attempt on the loop: it is CPU only, and built in a worker thread it would wait for
        the loop's thread to hand over the interpreter lock). The write goes through the
        database's async commit (a worker thread, or the async driver on this loop), and
        what a lost race or an already-landed commit reads goes to a worker thread.

        The landing runs to its end even if our caller is cancelled meanwhile: a write
        that landed but was not recorded in the working state would be rebased onto
        itself by the transaction's next commit, applying it twice.

        On a loop a sync call drives (see `statewise._workers`), every call below would
        run inline anyway and no other task can cancel this one half-way: there the sync
        shell lands it, without a task of its own and the turn of the loop that costs."""
        if runs_inline():
            return self._land(ws, attempt, policy)
        landing = asyncio.ensure_future(self._aland_checked(ws, attempt, policy))
        landing.add_done_callback(_retrieve)  # (an outcome nobody awaits any more)
        return await asyncio.shield(landing)

    async def _aland_checked(
        self, ws: WorkingState, attempt: CommitAttempt, policy: CommitPolicy | None
    ) -> Committed:
        """`_aland_once`, with the retention policy's checks around it (see `_land`)."""
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
        lost race and an already-landed commit read, so they leave it."""
        if attempt.commit is None or ws.assumed_new is not None:
            # (it queues at once, or lands only if the session is new: both may read)
            return await self.db.run_io(self._land_once, ws, attempt, policy)
        try:
            result = await self.db.acommit(attempt.commit)
        except VersionConflict:
            self._note_lost_race(ws)
            return await self.db.run_io(self._after_lost_race, ws, attempt, policy)
        if result.already_landed:
            return await self.db.run_io(self._record_landed, ws, attempt, result)
        return self._record_landed(ws, attempt, result)

    def _first_attempt(
        self,
        ws: WorkingState,
        events: Sequence[NewEvent],
        run: RunRecord | None,
        run_id: str | None,
        step: int | None,
        source: str,
        commit_id: str | None,
    ) -> CommitAttempt:
        """The commit of everything pending, as first tried (no I/O; `_land` or `_aland`
        writes it). The common case (the first attempt lands) builds one `Commit` and
        nothing else: what a rebase needs (`PendingCommit`) is made only when a race was
        lost."""
        if commit_id is not None:
            validate_id(commit_id, "commit_id")
        elif self.db.loses_replies:
            commit_id = new_id()  # (what makes resending it after a lost reply safe)
        else:
            commit_id = ""  # (nobody can send it again: its database stores no id for it)
        recorder = ws.recorder
        if recorder.ops:
            if self.schema is not None:
                self.validate(ws, {str(op.path[0]) for op in recorder.ops})
            self._register_secrets(ws)
        undo = recorder.undoer()
        segments = ws.take_segments(source)
        attempt = CommitAttempt(commit_id, segments, undo, events, run, run_id, step, source)
        if not self._queues_at_once(ws, segments):
            self.build_attempt(ws, attempt)
        return attempt

    def build_attempt(self, ws: WorkingState, attempt: CommitAttempt) -> Commit:
        """The commit of `attempt` as first tried (its tree not rebased since)."""
        if attempt.commit is None:
            attempt.commit, attempt.changes = self._build_commit(
                ws,
                attempt.segments,
                (),
                attempt.commit_id,
                attempt.events,
                attempt.run,
                attempt.run_id,
                attempt.step,
            )
        return attempt.commit

    def _land(
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
            and not committed.already_landed
            and retention.due(
                committed.versions.get(ScopeKey("session", session_id)),
                committed.last_seq,
                len(attempt.events),
            )
        )

    def _land_once(
        self, ws: WorkingState, attempt: CommitAttempt, policy: CommitPolicy | None
    ) -> Committed:
        if ws.assumed_new is not None:
            return self._land_new(ws, attempt, policy)
        if attempt.commit is None:  # (it queues at once)
            return self._after_lost_race(ws, attempt, policy)
        try:
            result = self.db.commit(attempt.commit)
        except VersionConflict:
            self._note_lost_race(ws)
            return self._after_lost_race(ws, attempt, policy)
        return self._record_landed(ws, attempt, result)

    def _land_new(
        self, ws: WorkingState, attempt: CommitAttempt, policy: CommitPolicy | None
    ) -> Committed:
        """The first commit of a state assumed new (`_assume_new`): it lands if the session
        does not exist and none of its scopes was written, which the database tells with
        the same round trip; else the state is settled on what is stored, and this commit
        built again on it (its events, run record and id) and landed as any other."""
        try:
            record, versions, result = self.db.commit_new(
                self.build_attempt(ws, attempt), ws.spec.scope_keys()
            )
        except VersionConflict:  # (made between the probe and the commit)
            probed = None
        else:
            if result is not None:
                ws.assumed_new = None
                return self._record_landed(ws, attempt, result)
            probed = record, versions
        self._settle(ws, probed)
        again = self._first_attempt(
            ws,
            attempt.events,
            attempt.run,
            attempt.run_id,
            attempt.step,
            attempt.source,
            attempt.commit_id or None,
        )
        return self._land_once(ws, again, policy)

    def _queues_at_once(
        self, ws: WorkingState, segments: Sequence[tuple[str, Sequence[Op]]]
    ) -> bool:
        """Whether a commit of `segments` skips its first try and queues for the session's
        lock (it is then built only rebased, never as first tried): it writes state to a
        session whose last such commit lost a race. The first try
        would mostly lose again (every writer of a busy session holds the version it read
        when its run began), and a lost try costs a round trip and a turn in the lock's
        queue: 16 processes on one PostgreSQL session ran 186-190 runs/s trying first,
        218-219 queuing at once (same machine, alternating). The writers of this process
        take turns there and land together (`db._group`), on every backend. Commits without writes
        cannot lose and always go straight to `commit`."""
        return ws.spec.session_id in self._contended and any(
            scope_of(str(op.path[0]))[0] != "temp" for _source, ops in segments for op in ops
        )

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
        commit, changes, result = self._commit_rebased(
            ws,
            pending,
            attempt.events,
            attempt.run,
            attempt.run_id,
            attempt.step,
            policy or CommitPolicy(),
        )
        rebased = replace(attempt, commit=commit, changes=changes)
        return self._record_landed(ws, rebased, result, pending.conflicts)

    def _record_landed(
        self,
        ws: WorkingState,
        attempt: CommitAttempt,
        result: CommitResult,
        conflicts: list[dict[str, Any]] | None = None,
    ) -> Committed:
        """Bring the working state up to the commit that landed; what it wrote."""
        commit = attempt.commit
        assert commit is not None  # (landed, so built)
        writes = commit.writes
        if result.already_landed:
            # An earlier attempt of this very commit landed (its reply was lost): nothing
            # was applied again. The tree in memory may be rebased differently from what
            # landed, so take the stored state.
            record, _versions = self.db.probe(ws.spec.session_id, ())
            ws.record = record or ws.record
            self._reload(ws, ws.spec.scope_keys())
        else:
            if ws.spec.session_id in self._contended:
                self._landed.note(commit, result)  # (its other writers catch up from it)
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
            already_landed=result.already_landed,
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
            if snapshot_due(size, delta_bytes):
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
        # Before the last rebase, until its commit lands or loses on its own: the
        # versions, our ops and conflicts, and the scopes it applied deltas to.
        before: list[tuple[dict[ScopeKey, int], Any, list[Any], set[ScopeKey]]] = []

        def build(probed: ProbedTails) -> Commit:
            touched = {key for key, tail in probed[2].items() if tail}
            before[:] = [(dict(ws.versions), pending.segments, list(pending.conflicts), touched)]
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
        keys = ws.spec.scope_keys()

        def bases() -> dict[ScopeKey, int]:
            if before:
                # Asked again after a rebase whose deltas may not have landed (see
                # `RebasedOnUnlanded`): take it back; the scopes it touched reload.
                versions, segments, conflicts, touched = before.pop()
                ws.versions.update(versions)
                pending.segments, pending.conflicts[:] = segments, conflicts
                pending.undo = None
                pending.stale |= touched
            return {key: ws.versions.get(key, 0) for key in keys}

        for attempt in itertools.count(1):
            if attempt > 1 or not self._turns.busy(ws.spec.session_id):
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
            except VersionConflict as exc:
                if not isinstance(exc, RebasedOnUnlanded):
                    before.clear()  # (it lost on its own: the rebase stands)
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
        moved = [k for k in keys if versions[k] != ws.versions.get(k, 0) or k in pending.stale]
        pending.stale.clear()
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
            # (no tail read: the tree is not behind the scope, it holds what did not land)
            if key not in tails or not is_contiguous(
                ws.versions.get(key, 0), versions[key], tails[key]
            ):
                return False
        theirs: dict[str, list[Op]] = {
            key.kind: self.codec.decode_ops(key, tails[key]) for key in moved
        }
        root = ws.root
        with unrecorded(ws) as scratch:
            pending.undo()
            pending.undo = None
            undo_theirs: Callable[[], None] | None = None
            try:
                for ops in theirs.values():
                    apply_ops(root, ops)
                undo_theirs = scratch.undoer()
                scratch.drain()
                rebased = self._reapply_ours(root, pending, theirs)
            except BaseException:
                scratch.undoer()()
                if undo_theirs is not None:
                    undo_theirs()
                raise
            pending.undo = scratch.undoer()
        note_tails(ws, versions, bytes_of_tails({key: tails[key] for key in moved}))
        pending.segments = resplit(pending.segments, rebased)
        return True

    def _reapply_ours(
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


def _retrieve(landing: asyncio.Future[Any]) -> None:
    """Mark a landing's error as seen: once its caller was cancelled nobody awaits it,
    and asyncio would log the error as never retrieved."""
    if not landing.cancelled():
        landing.exception()
