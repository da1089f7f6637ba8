"""`StateStore`'s read half: its secrets registry, checkout and release through the
session cache, catching a cached tree up, and reading state at a version (time travel).

`StateStore` is built in layers, one concern each (see `statewise.db.store`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from statewise.db import _codec
from statewise.db._group import session_turns
from statewise.db.base import BaseDb, ProbedTails, validate_id
from statewise.db.cache import cache_for
from statewise.db.planning import (
    SCOPE_PREFIX,
    TEMP_PREFIX,
    TTL_KEY,
    SessionSpec,
    is_contiguous,
    owned_spec,
    scope_of,
)
from statewise.db.rebuild import apply_segments
from statewise.db.records import (
    DeltaRecord,
    ScopeKey,
    ScopeState,
    SessionRecord,
)
from statewise.db.retention import (
    require_retained,
)
from statewise.db.state_codec import StateCodec
from statewise.db.working import (
    ScopeSizes,
    WorkingState,
    expire_keys,
    visible_state,
)
from statewise.exceptions import (
    StateOpError,
    StateValidationError,
)
from statewise.state.merge import Rules
from statewise.state.ops import apply_ops
from statewise.state.schema import StateSchema
from statewise.state.secrets import REGISTRY_KEY, Cipher, registered_secrets
from statewise.state.tracked import Recorder, track

CATCH_UP_DELTAS = 64  # a cached tree further behind than this is reloaded instead


SNAPSHOT_MIN_BYTES = 32 * 1024


class StoreCheckout:
    """The bottom layer of `StateStore` (see there): its configuration, secrets registry,
    checkout, release, catch-up and reads at a version."""

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
        self._landed = self._turns.landed  # (what this process wrote: catch-ups need not read it)

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

    # ---- checkout / release ------------------------------------------------------------

    def _checkout(self, spec: SessionSpec) -> WorkingState:
        """A session's state, checked out for one transaction (`StateStore.begin`)."""
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
        data, sizes = self._stored(spec, record, versions)
        root = track(data, recorder)
        ws = WorkingState(
            spec=spec, record=record, versions=versions, root=root, recorder=recorder, sizes=sizes
        )
        ws.clean = recorder.savepoint()
        expire_keys(ws)
        return ws

    def _stored(
        self, spec: SessionSpec, record: SessionRecord | None, versions: dict[ScopeKey, int]
    ) -> tuple[dict[str, Any], dict[ScopeKey, ScopeSizes]]:
        """The stored state of `spec`'s scopes at the probed `versions` (updated to the
        versions loaded), decoded, and their sizes.

        A scope at version 0 was never written: there is nothing to read (a new session's
        first run makes one round trip fewer). One written meanwhile makes the first
        commit's compare-and-swap fail and rebase, as any race does."""
        keys = spec.scope_keys()
        written = [key for key in keys if versions[key]]
        loaded = self.db.load_scopes(written) if written else {}
        data: dict[str, Any] = {}
        sizes = {}
        for key in keys:
            scope = loaded.get(key) or ScopeState(key=key)
            data.update(self.codec.decode_scope(key, scope.data))
            versions[key] = scope.version
            sizes[key] = ScopeSizes(
                snapshot_bytes=scope.snapshot_bytes, tail_bytes=scope.tail_bytes
            )
        self._check_schema_on_load(spec, data, new=record is None)
        return data, sizes

    def _assume_new(
        self, spec: SessionSpec, initialize: Callable[[WorkingState], None]
    ) -> WorkingState | None:
        """A state for a session this process holds nothing of, assumed not to exist
        (nothing read), with `initialize` applied: its first commit lands only if that
        holds (`BaseDb.commit_new`, which reads what is stored in the same round trip),
        and otherwise checks the session out for real and applies `initialize` again
        (`_settle`). None where a session is better read first: one this process holds
        or read lately, one its writers race on, or a store with a schema (a new
        session's first commit is validated whole, against what is stored)."""
        sid = spec.session_id
        if self.schema is not None or sid in self._contended or self.cache.spec_of(sid):
            return None
        validate_id(sid, "session_id")
        if spec.user_id is not None:
            validate_id(spec.user_id, "user_id")
        recorder = Recorder()
        ws = WorkingState(
            spec=spec,
            record=None,
            versions=dict.fromkeys(spec.scope_keys(), 0),
            root=track({}, recorder),
            recorder=recorder,
            assumed_new=initialize,
        )
        initialize(ws)
        return ws

    def _settle(
        self,
        ws: WorkingState,
        probed: tuple[SessionRecord | None, dict[ScopeKey, int]] | None = None,
    ) -> None:
        """A state assumed new turns out to be stored (or a shared scope of it written):
        the state read (`probed`: what the first commit's probe found; None: probe now)
        replaces it in place, uncommitted changes dropped, and its `initialize` is
        applied again. The run holding it sees the same tree, now what is stored."""
        initialize = ws.assumed_new
        if initialize is None:
            return
        if probed is None or (
            probed[0] is not None
            and owned_spec(ws.spec, probed[0]).scope_keys() != ws.spec.scope_keys()
        ):
            spec, record, versions = self._probe_owned(ws.spec)
        else:
            record, versions = probed
            spec = ws.spec if record is None else owned_spec(ws.spec, record)
        data, sizes = self._stored(spec, record, versions)
        recorder = Recorder()
        ws.root.set_recorder(recorder)
        ws.root.replace_contents(data)
        ws.recorder, ws.marks, ws.clean = recorder, [], recorder.savepoint()
        ws.spec, ws.record, ws.versions, ws.sizes = spec, record, versions, sizes
        ws.assumed_new = None
        expire_keys(ws)
        initialize(ws)

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

    def _release(self, ws: WorkingState, *, keep: bool = True) -> None:
        """Return a checked-out state (a transaction's close). Uncommitted changes are dropped, temp: keys too."""
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
            probed = self._probe_tails(spec.session_id, bases, limit=CATCH_UP_DELTAS)
        except BaseException:
            self.cache.give(cached)  # (unchanged: as if never taken)
            raise
        record = probed[0]
        owned = spec if record is None else owned_spec(spec, record)
        if owned.scope_keys() != keys:
            return None
        return owned, probed

    def _probe_tails(
        self, session_id: str, bases: Mapping[ScopeKey, int], *, limit: int | None = None
    ) -> ProbedTails:
        """`BaseDb.probe_tails`, reading from storage only the deltas this process did not
        land itself (`LandedDeltas`): on a session its own writers keep busy, nearly none."""
        known = self._landed.after(bases)
        if not known:
            return self.db.probe_tails(session_id, bases, limit=limit)
        reads_from = {key: base + len(known.get(key, ())) for key, base in bases.items()}
        read: Mapping[ScopeKey, list[DeltaRecord]]
        if self._landed.shared(session_id):
            # Other processes write it too: what they landed comes with the probe.
            record, versions, read = self.db.probe_tails(session_id, reads_from, limit=limit)
            if not any(read.values()):
                self._landed.mark_shared(session_id, False)
        else:
            # What this process landed is likely all there is: a plain probe (a cheaper
            # statement) tells, and what another process landed since is read after it
            # (the unfused `probe_tails` every backend inherits).
            record, versions, read = BaseDb.probe_tails(
                self.db, session_id, reads_from, limit=limit
            )
            if any(read.values()):
                self._landed.mark_shared(session_id, True)
        if record is not None and any(
            d.created_at < record.created_at for kept in known.values() for d in kept
        ):
            # Kept from before the session was made anew (deleted elsewhere): not its own.
            return self.db.probe_tails(session_id, bases, limit=limit)
        tails: dict[ScopeKey, list[DeltaRecord]] = {}
        for key, base in bases.items():
            version = versions[key]
            if version != base:
                kept = [d for d in known.get(key, ()) if d.version <= version]
                tails[key] = kept + read.get(key, [])
        return record, versions, tails

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
            _record, now, tails = self._probe_tails(ws.spec.session_id, bases)
        if not all(
            now[key] > after and is_contiguous(after, now[key], tails.get(key, ()))
            for key, after in bases.items()
        ):
            self._reload(ws, stale)
            return
        tail_bytes = bytes_of_tails(tails)
        if any(snapshot_due(ws.sizes.get(key), n) for key, n in tail_bytes.items()):
            # Our next write would snapshot on a count that misses any snapshot another
            # writer took meanwhile: the reload reads the scope's real sizes (once per
            # snapshot's worth of deltas, not every writer on every catch-up).
            self._reload(ws, stale)
            return
        theirs = {key.kind: self.codec.decode_ops(key, tails[key]) for key in stale if key in tails}
        with unrecorded(ws) as scratch:
            try:
                for ops in theirs.values():
                    apply_ops(ws.root, ops)
            except StateOpError:
                scratch.undoer()()
                self._reload(ws, stale)
                return
        note_tails(ws, now, tail_bytes)

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


@contextmanager
def unrecorded(ws: WorkingState) -> Iterator[Recorder]:
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


def bytes_of_tails(tails: Mapping[ScopeKey, Sequence[DeltaRecord]]) -> dict[ScopeKey, int]:
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


def snapshot_due(size: ScopeSizes | None, more: int) -> bool:
    """Whether a scope's next write snapshots it once its tail grows by `more` bytes."""
    size = size or ScopeSizes()
    return size.tail_bytes + more > max(size.snapshot_bytes, SNAPSHOT_MIN_BYTES)


def note_tails(
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

    store: StoreCheckout
    spec: SessionSpec
    versions: dict[ScopeKey, int]

    def __call__(self) -> dict[str, Any]:
        return self.store.state_at(self.spec, self.versions)

    def if_cached(self) -> dict[str, Any] | None:
        """The state if the session's cached tree is still at `versions` (no read); else
        None."""
        return self.store.cache.plain_if_current(self.spec.session_id, self.versions)
