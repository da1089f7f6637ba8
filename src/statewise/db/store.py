"""The state engine between runs and storage: checkout, commit, rebase, cache.

A run *checks out* a session's state: one merged, tracked dict holding the session's own
keys, the user's `user:` keys and the app's `app:` keys. Code mutates it freely; the
recorder logs every change as ops. At each commit point the ops are split by scope and
committed with a compare-and-swap on each scope's version. When another writer got there
first, the ops are rebased onto the latest stored state (commuting ops merge, true
conflicts go by the key's rule and are recorded) and the commit is tried again.

The checked-out tree is cached per session between runs, so an unchanged session is
neither re-read nor re-parsed: a run costs a version probe, not a load.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from statewise.db import _codec
from statewise.db.base import BaseDb, validate_id
from statewise.db.records import (
    Commit,
    DeltaSegment,
    NewEvent,
    RunRecord,
    ScopeKey,
    ScopeWrite,
    SessionRecord,
)
from statewise.db.replay import apply_segments
from statewise.exceptions import SecretsError, StateError, StateValidationError, VersionConflict
from statewise.state.merge import Rules, rebase
from statewise.state.ops import Op
from statewise.state.reserved import is_reserved
from statewise.state.schema import StateSchema
from statewise.state.secrets import (
    REGISTRY_KEY,
    Cipher,
    is_encrypted,
    redact_conflict,
    registered_secrets,
)
from statewise.state.tracked import Recorder, TrackedDict, to_plain, track

USER_PREFIX = "user:"
APP_PREFIX = "app:"
TEMP_PREFIX = "temp:"
TTL_KEY = "__ttl__"  # {key: unix time it expires}; hidden from reads and prompts
ANONYMOUS_USER = "_anonymous"
COMMIT_RETRY_SECONDS = 30.0  # how long a commit keeps rebasing before it gives up
SNAPSHOT_MIN_BYTES = 32 * 1024
CACHE_SIZE = 512


def scope_of(key: str) -> tuple[str, str]:
    """Which scope a top-level key belongs to, and its name inside that scope."""
    if key.startswith(USER_PREFIX):
        return "user", key[len(USER_PREFIX) :]
    if key.startswith(APP_PREFIX):
        return "app", key[len(APP_PREFIX) :]
    if key.startswith(TEMP_PREFIX):
        return "temp", key
    return "session", key


_PREFIX = {"session": "", "user": USER_PREFIX, "app": APP_PREFIX}


@dataclass(kw_only=True, slots=True)
class SessionSpec:
    """Who a run is for: the session, its user and its app."""

    session_id: str
    user_id: str | None = None
    app_name: str = "default"
    kind: str = "agent"

    def scope_keys(self) -> tuple[ScopeKey, ScopeKey, ScopeKey]:
        return (
            ScopeKey("session", self.session_id),
            ScopeKey("user", self.user_id or ANONYMOUS_USER),
            ScopeKey("app", self.app_name),
        )


@dataclass(kw_only=True, slots=True)
class _Sizes:
    snapshot_bytes: int = 0
    tail_bytes: int = 0


@dataclass(kw_only=True)
class WorkingState:
    """A session's state checked out for one run (or one API call).

    Every change is logged by `recorder`; `mark(source)` only notes where one source's
    changes end, so nothing loses its undo record before it is committed.
    """

    spec: SessionSpec
    record: SessionRecord | None
    versions: dict[ScopeKey, int]
    root: TrackedDict
    recorder: Recorder
    sizes: dict[ScopeKey, _Sizes] = field(default_factory=dict)
    marks: list[tuple[str, int]] = field(default_factory=list)
    clean: int = 0  # the recorder savepoint of the last commit (or checkout)

    @property
    def is_new(self) -> bool:
        return self.record is None

    def mark(self, source: str) -> None:
        """Attribute every change since the previous mark to `source`."""
        end = len(self.recorder.ops)
        if end > (self.marks[-1][1] if self.marks else 0):
            self.marks.append((source, end))

    def discard_uncommitted(self) -> None:
        """Undo everything not yet committed (a run failed between commit points)."""
        self.recorder.rollback(self.clean)
        self.marks.clear()

    @property
    def has_changes(self) -> bool:
        return bool(self.recorder.ops)

    def plain(self) -> dict[str, Any]:
        """The merged state as a plain dict, without `temp:` keys and TTL bookkeeping."""
        return visible_state(self.root)

    def take_segments(self, source: str) -> list[tuple[str, list[Op]]]:
        """Drain the pending ops as (source, ops) segments; unmarked ones go to `source`."""
        self.mark(source)
        ops = self.recorder.drain()
        self.clean = self.recorder.savepoint()
        segments, start = [], 0
        for name, end in self.marks:
            if end > start:
                segments.append((name, ops[start:end]))
            start = end
        self.marks.clear()
        return segments


def visible_state(state: Mapping[str, Any]) -> dict[str, Any]:
    """What users see of a state: no `temp:` keys, no engine bookkeeping (`__ttl__`)."""
    return {
        k: to_plain(v)
        for k, v in state.items()
        if not k.startswith(TEMP_PREFIX) and not is_reserved(k)
    }


def set_expiry(root: TrackedDict, key: str, ttl: float) -> None:
    """Make `key` vanish `ttl` seconds from now (recorded like any other write)."""
    if not ttl > 0 or ttl == float("inf"):
        raise StateError(f"ttl must be a positive number of seconds, got {ttl}")
    with root.engine_writes():
        expiries = root.setdefault(TTL_KEY, {})
        expiries[key] = time.time() + ttl


def clear_expiry(root: TrackedDict, key: str) -> None:
    """Forget `key`'s expiry time (it was set again without a ttl)."""
    expiries = root.get(TTL_KEY)
    if isinstance(expiries, dict) and key in expiries:
        with root.engine_writes():
            del expiries[key]


def expire_keys(ws: WorkingState) -> None:
    """Delete keys whose TTL passed. The deletes are ordinary recorded ops, so they are
    committed with the next commit and every reader hides the key meanwhile."""
    expiries = ws.root.get(TTL_KEY)
    if not expiries:
        return
    now = time.time()
    if not isinstance(expiries, dict):  # written by an older version: not ours to trust
        expired, broken = [], True
    else:
        expired = [k for k, at in expiries.items() if not isinstance(at, int | float) or at <= now]
        broken = False
    if not expired and not broken:
        return
    with ws.root.engine_writes():
        for key in expired:
            if isinstance(expiries[key], int | float):
                ws.root.pop(key, None)
            del expiries[key]
        if broken or not expiries:
            del ws.root[TTL_KEY]
    ws.mark("ttl_expired")


class _Cache:
    """Checked-in session trees, by session id; a bounded LRU shared by one database."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, WorkingState] = OrderedDict()

    def take(self, session_id: str) -> WorkingState | None:
        with self._lock:
            return self._entries.pop(session_id, None)

    def give(self, ws: WorkingState) -> None:
        with self._lock:
            current = self._entries.get(ws.spec.session_id)
            if current is not None and sum(current.versions.values()) > sum(ws.versions.values()):
                return
            self._entries[ws.spec.session_id] = ws
            self._entries.move_to_end(ws.spec.session_id)
            while len(self._entries) > CACHE_SIZE:
                self._entries.popitem(last=False)

    def plain_if_current(
        self, session_id: str, versions: Mapping[ScopeKey, int]
    ) -> dict[str, Any] | None:
        """A copy of the cached state if it is exactly at `versions` (copied under the lock,
        so no run can take and change it meanwhile)."""
        with self._lock:
            entry = self._entries.get(session_id)
            if entry is None or any(entry.versions.get(k) != v for k, v in versions.items()):
                return None
            return entry.plain()

    def drop(self, session_id: str) -> None:
        with self._lock:
            self._entries.pop(session_id, None)


def _cache_for(db: BaseDb) -> _Cache:
    cache: _Cache | None = getattr(db, "_statewise_cache", None)
    if cache is None:
        cache = _Cache()
        db._statewise_cache = cache  # type: ignore[attr-defined]
    return cache


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
        self.secret_keys = frozenset(secret_keys) | (
            schema.secret_keys() if schema else frozenset()
        )
        self._cipher = cipher
        self._cache = _cache_for(db)
        self._registries: dict[str, tuple[int, frozenset[str]]] = {}

    def on(self, db: BaseDb) -> StateStore:
        """The same rules, schema and secrets on another database."""
        return StateStore(
            db,
            rules=self.rules,
            schema=self.schema,
            secret_keys=self.secret_keys,
            cipher=self._cipher,
        )

    @property
    def cipher(self) -> Cipher:
        if self._cipher is None:
            self._cipher = Cipher.from_env()
        return self._cipher

    # ---- which keys are secret: declared here, or recorded in the data -------------------

    def secret_keys_in(self, state: Mapping[str, Any]) -> frozenset[str]:
        """The secret keys of a checked-out (merged) state: the ones this store declares
        and the ones its app's registry records (any agent of the app declared them)."""
        return self.secret_keys | registered_secrets(state)

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
        known = registered_secrets(ws.root)
        missing = self.secret_keys - known
        if not missing or not ws.recorder.ops:
            return
        ws.mark("commit")
        with ws.root.engine_writes():
            registry = ws.root.get(REGISTRY_KEY)
            if not isinstance(registry, list):
                ws.root[REGISTRY_KEY] = sorted(missing)
            else:
                registry.extend(sorted(missing))
        ws.mark("engine:secret_keys")

    def _decrypt(self, full: str, value: Any) -> Any:
        """An encrypted value decrypted. Any agent decrypts what it finds encrypted; one
        that did not declare the key keeps the value as stored when it has no key."""
        try:
            return self.cipher.decrypt_value(value)
        except SecretsError:
            if full in self.secret_keys:
                raise
            return value

    def plain_scope_at(self, key: ScopeKey, version: int) -> dict[str, Any]:
        """A scope's state at `version`, names relative to the scope, secrets decrypted."""
        prefix = _PREFIX[key.kind]
        decoded = self._decode_scope(key, self.scope_at(key, version))
        return {full[len(prefix) :]: value for full, value in decoded.items()}

    # ---- checkout / release ------------------------------------------------------------

    def checkout(self, spec: SessionSpec) -> WorkingState:
        validate_id(spec.session_id, "session_id")
        if spec.user_id is not None:
            validate_id(spec.user_id, "user_id")
        keys = spec.scope_keys()
        record, versions = self.db.probe(spec.session_id, keys)
        if record is not None:
            # An existing session's owner and app are its own, whoever reads it.
            owned = replace(
                spec,
                user_id=record.user_id or spec.user_id,
                app_name=record.app_name or spec.app_name,
                kind=record.kind,
            )
            if owned.scope_keys() != keys:
                spec, keys = owned, owned.scope_keys()
                record, versions = self.db.probe(spec.session_id, keys)
            spec = owned
        cached = self._cache.take(spec.session_id)
        recorder = Recorder()
        if cached is not None and cached.spec.scope_keys() == keys:
            stale = [k for k in keys if cached.versions.get(k) != versions[k]]
            ws = cached
            ws.recorder = recorder
            ws.root.set_recorder(recorder)
            ws.record = record
            ws.marks = []
            ws.clean = recorder.savepoint()
            ws.spec = spec
            if stale:
                self._reload(ws, stale)
            expire_keys(ws)
            return ws
        loaded = self.db.load_scopes(keys)
        data: dict[str, Any] = {}
        sizes = {}
        for key in keys:
            scope = loaded[key]
            data.update(self._decode_scope(key, scope.data))
            versions[key] = scope.version
            sizes[key] = _Sizes(snapshot_bytes=scope.snapshot_bytes, tail_bytes=scope.tail_bytes)
        self._check_schema_on_load(spec, data)
        root = track(data, recorder)
        ws = WorkingState(
            spec=spec, record=record, versions=versions, root=root, recorder=recorder, sizes=sizes
        )
        ws.clean = recorder.savepoint()
        expire_keys(ws)
        return ws

    def _check_schema_on_load(self, spec: SessionSpec, data: Mapping[str, Any]) -> None:
        """A stored state that no longer fits the schema (the schema changed) is reported
        with the session and what to do, instead of failing somewhere later."""
        if self.schema is None or not data:
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
            self._cache.drop(ws.spec.session_id)
            return
        self._cache.give(ws)

    def _reload(self, ws: WorkingState, keys: Sequence[ScopeKey]) -> None:
        loaded = self.db.load_scopes(keys)
        data = {
            k: v for k, v in dict.items(ws.root) if scope_of(k)[0] not in {k.kind for k in keys}
        }
        for key in keys:
            scope = loaded[key]
            data.update(self._decode_scope(key, scope.data))
            ws.versions[key] = scope.version
            ws.sizes[key] = _Sizes(snapshot_bytes=scope.snapshot_bytes, tail_bytes=scope.tail_bytes)
        ws.root.replace_contents(data)

    def _decode_scope(self, key: ScopeKey, data: dict[str, Any]) -> dict[str, Any]:
        prefix = _PREFIX[key.kind]
        out = {}
        for name, value in data.items():
            full = prefix + name
            if is_encrypted(value):
                value = self._decrypt(full, value)
            out[full] = value
        return out

    # ---- reading state at a version ---------------------------------------------------------

    def state_loader(self, ws: WorkingState) -> Callable[[], dict[str, Any]]:
        """A function that returns the state as `ws` is now, even after later runs."""
        spec, versions = ws.spec, dict(ws.versions)
        return lambda: self.state_at(spec, versions)

    def state_at(self, spec: SessionSpec, versions: Mapping[ScopeKey, int]) -> dict[str, Any]:
        cached = self._cache.plain_if_current(spec.session_id, versions)
        if cached is not None:
            return cached
        out: dict[str, Any] = {}
        for key in spec.scope_keys():
            out.update(self._decode_scope(key, self.scope_at(key, versions.get(key, 0))))
        return visible_state(out)

    def scope_at(self, key: ScopeKey, version: int) -> dict[str, Any]:
        """A scope's plain stored state at `version`: nearest snapshot, then deltas."""
        if version <= 0:
            return {}
        snapshot_version, data = self.db.read_snapshot(key, version)
        for delta in self.db.read_deltas(key, after_version=snapshot_version, upto_version=version):
            apply_segments(key, delta.version, data, delta.segments)
        return data

    # ---- commit ----------------------------------------------------------------------------

    def validate(self, ws: WorkingState, keys: Iterable[str]) -> None:
        """Check `keys` against the schema (O(change)); raises StateValidationError."""
        if self.schema is not None:
            touched = {k for k in keys if not k.startswith(TEMP_PREFIX)}
            if touched:
                self.schema.validate_keys(ws.root, touched)

    def commit(
        self,
        ws: WorkingState,
        *,
        events: Sequence[NewEvent] = (),
        run: RunRecord | None = None,
        run_id: str | None = None,
        step: int | None = None,
        source: str = "unattributed",
    ) -> Committed:
        """Persist the pending ops with `events` (and `run`), rebasing on lost races."""
        self.validate(ws, {str(op.path[0]) for op in ws.recorder.ops})
        self._register_secrets(ws)
        pending = _Pending(segments=ws.take_segments(source))
        attempt = 0
        give_up_at = time.monotonic() + COMMIT_RETRY_SECONDS
        while True:
            attempt += 1
            commit = self._build_commit(ws, pending, events, run, run_id, step)
            try:
                result = self.db.commit(commit)
            except VersionConflict:
                # Under heavy contention a fixed number of attempts runs out in seconds;
                # a time budget with full-jitter exponential backoff (capped at 50 ms)
                # spreads the writers out so each one lands.
                if time.monotonic() >= give_up_at:
                    raise
                time.sleep(random.uniform(0, min(0.05, 0.0005 * 2 ** min(attempt, 10))))
                self._rebase(ws, pending)
                continue
            break
        for write in commit.writes:
            ws.versions[write.key] = result.versions[write.key]
            size = ws.sizes.setdefault(write.key, _Sizes())
            if write.snapshot is not None:
                size.snapshot_bytes = write.snapshot_bytes
                size.tail_bytes = 0
            else:
                size.tail_bytes += write.delta_bytes
        if ws.record is None:
            ws.record = commit.session
        ws.record.last_seq = result.last_seq
        changes = [
            {"scope": e.data["scope"], **op}
            for e in commit.events
            if e.type == "state_delta"
            for segment in e.data["segments"]
            for op in segment["ops"]
        ]
        secrets = self.secret_keys_in(ws.root)
        return Committed(
            versions={w.key: result.versions[w.key] for w in commit.writes},
            last_seq=result.last_seq,
            changes=changes,
            conflicts=[redact_conflict(c, secrets) for c in pending.conflicts],
        )

    def _build_commit(
        self,
        ws: WorkingState,
        pending: _Pending,
        events: Sequence[NewEvent],
        run: RunRecord | None,
        run_id: str | None,
        step: int | None,
    ) -> Commit:
        spec = ws.spec
        secrets = self.secret_keys_in(ws.root)
        by_scope: dict[str, list[DeltaSegment]] = {}
        for source, ops in pending.segments:
            split: dict[str, list[dict[str, Any]]] = {}
            for op in ops:
                kind = scope_of(str(op.path[0]))[0]
                if kind != "temp":
                    split.setdefault(kind, []).append(self._encode_op(op, ws.root, kind, secrets))
            for kind, encoded in split.items():
                by_scope.setdefault(kind, []).append(DeltaSegment(source=source, ops=encoded))
        writes = []
        all_events = list(events)
        for key in spec.scope_keys():
            segments = by_scope.get(key.kind)
            if not segments:
                continue
            delta_bytes = len(_codec.dumps([s.to_dict() for s in segments]))
            size = ws.sizes.setdefault(key, _Sizes())
            snapshot = None
            if size.tail_bytes + delta_bytes > max(size.snapshot_bytes, SNAPSHOT_MIN_BYTES):
                snapshot = self._scope_snapshot(ws, key, secrets)
            # Conflict records are stored and logged with secret values hidden.
            conflicts = [
                redact_conflict(c, secrets) for c in pending.conflicts if c["scope"] == key.kind
            ]
            write = ScopeWrite(
                key=key,
                base_version=ws.versions.get(key, 0),
                segments=segments,
                conflicts=conflicts,
                snapshot=snapshot,
                delta_bytes=delta_bytes,
            )
            writes.append(write)
            all_events.append(
                NewEvent(
                    type="state_delta",
                    run_id=run_id,
                    data={
                        "scope": key.kind,
                        "scope_id": key.id,
                        "version": write.base_version + 1,
                        "step": step,
                        "segments": [self._redacted(s, key.kind, secrets) for s in segments],
                    },
                )
            )
        for conflict in pending.conflicts:
            all_events.append(
                NewEvent(
                    type="conflict_resolved",
                    run_id=run_id,
                    data=redact_conflict(conflict, secrets),
                )
            )
        session = ws.record or SessionRecord(
            session_id=spec.session_id,
            user_id=spec.user_id,
            app_name=spec.app_name,
            kind=spec.kind,
        )
        return Commit(
            session=session,
            create_session=ws.record is None,
            writes=writes,
            events=all_events,
            run=run,
            run_id=run_id,
            step=step,
        )

    def _encode_op(
        self, op: Op, root: Mapping[str, Any], kind: str, secrets: frozenset[str]
    ) -> dict[str, Any]:
        """An op as stored: path relative to its scope; secrets whole and encrypted."""
        full = str(op.path[0])
        name = scope_of(full)[1]
        if full in secrets:
            if full not in root:
                return {"op": "delete", "path": [name]}
            value = self.cipher.encrypt_value(to_plain(root[full]))
            return {"op": "set", "path": [name], "value": value}
        data = op.to_json()
        if kind != "session":
            data["path"] = [name, *data["path"][1:]]
        return data

    def _redacted(
        self, segment: DeltaSegment, kind: str, secrets: frozenset[str]
    ) -> dict[str, Any]:
        """A delta segment as the event log shows it: secret (and encrypted) values hidden."""
        secret_names = {scope_of(k)[1] for k in secrets if scope_of(k)[0] == kind}
        ops = [
            {**raw, "value": "***"}
            if "value" in raw and (raw["path"][0] in secret_names or is_encrypted(raw["value"]))
            else raw
            for raw in segment.ops
        ]
        return {"source": segment.source, "ops": ops}

    def _scope_snapshot(
        self, ws: WorkingState, key: ScopeKey, secrets: frozenset[str]
    ) -> dict[str, Any]:
        prefix = _PREFIX[key.kind]
        out = {}
        for full, value in ws.root.items():
            if scope_of(full)[0] != key.kind:
                continue
            plain = to_plain(value)
            if full in secrets:
                plain = self.cipher.encrypt_value(plain)
            out[full[len(prefix) :]] = plain
        return out

    def _rebase(self, ws: WorkingState, pending: _Pending) -> None:
        """Re-apply our pending ops on the latest stored state of every scope that moved."""
        keys = ws.spec.scope_keys()
        record, versions = self.db.probe(ws.spec.session_id, keys)
        ws.record = record
        moved = [k for k in keys if versions[k] != ws.versions.get(k, 0)]
        if not moved:
            return
        loaded = self.db.load_scopes(moved)
        moved_kinds = {k.kind for k in moved}
        rebased: dict[str, list[Op]] = {}
        latest_data: dict[str, Any] = {}
        for key in moved:
            prefix = _PREFIX[key.kind]
            theirs = []
            for delta in self.db.read_deltas(key, after_version=ws.versions.get(key, 0)):
                for raw in delta.ops:
                    op = Op.from_json(raw)
                    theirs.append(
                        Op(
                            op=op.op,
                            path=(prefix + str(op.path[0]), *op.path[1:]),
                            value=op.value,
                            index=op.index,
                        )
                    )
            latest = self._decode_scope(key, loaded[key].data)
            mine = [
                op
                for _s, ops in pending.segments
                for op in ops
                if scope_of(str(op.path[0]))[0] == key.kind
            ]
            if mine:
                result = rebase(latest, theirs, mine, self.rules)
                rebased[key.kind] = list(result.ops)
                for conflict in result.conflicts:
                    pending.conflicts.append({"scope": key.kind, **conflict.to_json()})
            ws.versions[key] = loaded[key].version
            ws.sizes[key] = _Sizes(
                snapshot_bytes=loaded[key].snapshot_bytes, tail_bytes=loaded[key].tail_bytes
            )
            latest_data.update(latest)
        pending.segments = _resplit(pending.segments, rebased)
        data = {k: v for k, v in dict.items(ws.root) if scope_of(k)[0] not in moved_kinds}
        data.update(latest_data)
        ws.root.replace_contents(data)


@dataclass(kw_only=True)
class Committed:
    """What a commit wrote: new scope versions, the ops (secrets redacted), conflicts."""

    versions: dict[ScopeKey, int]
    last_seq: int
    changes: list[dict[str, Any]]
    conflicts: list[dict[str, Any]]


@dataclass(kw_only=True)
class _Pending:
    """Ops drained for a commit that may need rebasing before it lands."""

    segments: list[tuple[str, list[Op]]]
    conflicts: list[dict[str, Any]] = field(default_factory=list)


def _resplit(
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


def new_id() -> str:
    return uuid.uuid4().hex


__all__ = [
    "TTL_KEY",
    "Committed",
    "SessionSpec",
    "StateStore",
    "WorkingState",
    "clear_expiry",
    "expire_keys",
    "new_id",
    "scope_of",
    "set_expiry",
    "visible_state",
]
