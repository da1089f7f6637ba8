"""Redis storage: sessions shared by many processes and machines through one Redis.

A commit is one `EVALSHA` of a Lua script (`_redis_lua.COMMIT`): it checks the session
and every scope version, then appends deltas, snapshots and events, allocates the event
sequence numbers, upserts the run and updates the session indexes, atomically (Redis runs
a script alone). A lost race writes nothing. Each commit carries a token, so a retry after
a lost reply (redis-py retries on connection errors) returns the first result instead of
applying the commit twice. Needs Redis >= 7.

Key layout (`P` is `{prefix}`, braces included: the whole prefix is the hash tag)::

    P:s:<sid>                   hash  session fields, last_seq, run counter, last commit token
    P:sessions                  zset  every session, score -updated_at (newest first, ties by id)
    P:by_user:<uid>             zset  the user's sessions, same score
    P:by_app:<app>              zset  the app's sessions, same score
    P:scope:<kind>:<id>         hash  version, snapshot_version, snapshot_bytes, tail_bytes
    P:dseg:<kind>:<id>          hash  version -> delta segments (JSON text)
    P:dmeta:<kind>:<id>         hash  version -> [session_id, run_id, step, conflicts, created_at]
    P:snap:<kind>:<id>          hash  version -> snapshot (JSON text)
    P:snapv:<kind>:<id>         zset  snapshot versions
    P:ev:<sid> / P:evm:<sid>    hash  seq -> event data / [type, run_id, created_at]
    P:runs:<sid>                hash  "<field>:<run_id>" -> value (one hash for all runs)
    P:runord:<sid>              zset  score created_at, member "<12-digit order><run_id>"

Ids are used verbatim inside key names (Redis keys are binary-safe), so no id can collide
with another: the part after the last fixed `:` is always one whole id.

Redis Cluster: every key shares the hash tag `{prefix}`, so all of one prefix lives in ONE
slot: commits that touch a session, its `user:` and `app:` scopes and the global session
index stay single-slot and atomic, and it works on Cluster (pass a `RedisCluster` as
`client=`). The price is honest: one prefix does not spread across shards. Spread load by
giving each app (or tenant) its own prefix; each prefix then lands in its own slot. A
per-session hash tag would spread sessions, but a commit touching a shared `user:`/`app:`
scope or the session index would then be cross-slot, which a Lua script cannot do.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from statewise._workers import runs_inline
from statewise.db import _codec
from statewise.db import _redis_admin as admin
from statewise.db import _redis_lua as lua
from statewise.db import _redis_retention as retention_ops
from statewise.db._redis_async import LoopClients
from statewise.db._redis_keys import Keys, corrupt, dec
from statewise.db.base import BaseDb, ScopesRead, validate_id
from statewise.db.rebuild import decode_delta_row, rebuilt_scope
from statewise.db.records import (
    Commit,
    CommitResult,
    DeltaRecord,
    EventRecord,
    RunRecord,
    ScopeKey,
    ScopeState,
    SessionRecord,
    applied_result,
    decode_commit_result,
)
from statewise.db.retention import (
    Compaction,
    CompactionPlan,
    Horizon,
    Retention,
    default_retention,
)
from statewise.db.url import mask_password
from statewise.exceptions import (
    DatabaseUnavailableError,
    MissingDependencyError,
    StorageError,
    VersionConflict,
)

try:
    import redis
    import redis.asyncio
    from redis.asyncio.retry import Retry as AsyncRetry
    from redis.backoff import ExponentialBackoff
    from redis.exceptions import NoScriptError
    from redis.retry import Retry
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise MissingDependencyError("redis", "redis") from exc


def _scope_state(key: ScopeKey, row: Sequence[Any]) -> ScopeState:
    """A scope from a LOAD row: its snapshot and the deltas after it, rebuilt."""
    version, sv, sbytes, tbytes, snapshot, *segments = row
    deltas = zip(range(sv + 1, version + 1), segments, strict=False)
    return rebuilt_scope(key, version, sv, sbytes, tbytes, snapshot or None, deltas)


class RedisDb(BaseDb):
    """Sessions in Redis under `prefix` (the Cluster hash tag; see the module docstring)."""

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        prefix: str = "statewise",
        client: Any = None,
        connect_timeout: float = 5.0,
        socket_timeout: float | None = 30.0,
        retention: Retention | None = None,
    ) -> None:
        self.retention = default_retention(retention)
        if not prefix or any(c in prefix for c in "{}"):
            raise StorageError(f"prefix must be non-empty and without braces, not {prefix!r}")
        self.url = url
        self.prefix = prefix
        self.keys = Keys(prefix)
        self._closed = False
        self._own_client = client is None
        # A dropped connection is retried: every commit carries its commit id, so a retry
        # of a commit that landed is answered by the server, never applied twice.
        options: dict[str, Any] = {
            "socket_connect_timeout": connect_timeout,
            "socket_timeout": socket_timeout,
            "retry_on_error": [redis.ConnectionError, redis.TimeoutError],
        }
        self.client: Any = client or redis.Redis.from_url(
            url, retry=Retry(ExponentialBackoff(cap=0.5, base=0.01), 3), **options
        )
        # The state reads and commits a server makes on its event loop (`aread_scopes`,
        # `acommit`), with the same options, through redis.asyncio; a client given by the
        # caller is used from threads.
        self._loop_clients = LoopClients(
            lambda: redis.asyncio.Redis.from_url(
                url, retry=AsyncRetry(ExponentialBackoff(cap=0.5, base=0.01), 3), **options
            )
        )
        try:
            info = self.client.info("server")
        except redis.RedisError as exc:
            raise DatabaseUnavailableError(
                f"cannot connect to Redis at {mask_password(url)}: {exc}"
            ) from exc
        major = int(str(info.get("redis_version", "0")).split(".")[0])
        if major < 7:
            raise DatabaseUnavailableError(
                f"Redis at {mask_password(url)} is version {info.get('redis_version')}; "
                f"statewise needs Redis 7 or newer"
            )
        self._commit_script = self.client.register_script(lua.COMMIT)
        self._load_script = self.client.register_script(lua.LOAD)
        self._read_script = self.client.register_script(lua.READ)
        self._claim_script = self.client.register_script(lua.CLAIM_RUN)
        self._release_script = self.client.register_script(lua.RELEASE_RUN)

    def __repr__(self) -> str:
        return f"RedisDb(url={mask_password(self.url)!r}, prefix={self.prefix!r})"

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._loop_clients.close()
            if self._own_client:
                self.client.close()

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        with self._errors(what):
            return fn(*args, **kwargs)

    @contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        if self._closed:
            raise StorageError(f"{self!r} is closed")
        try:
            yield
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise DatabaseUnavailableError(
                f"Redis at {mask_password(self.url)} failed during {what}: {exc}"
            ) from exc
        except redis.RedisError as exc:
            raise StorageError(f"Redis {what} failed: {exc}") from exc

    # ---- reads ---------------------------------------------------------------------------

    def probe(
        self, session_id: str, keys: Sequence[ScopeKey]
    ) -> tuple[SessionRecord | None, dict[ScopeKey, int]]:
        pipe = self.client.pipeline(transaction=True)
        pipe.hgetall(self.keys.session(session_id))
        for key in keys:
            pipe.hget(self.keys.scope(key), "version")
        found = self._call("probe", pipe.execute)
        record = self.keys.session_record(session_id, found[0]) if found[0] else None
        return record, {k: int(v or 0) for k, v in zip(keys, found[1:], strict=True)}

    def load_scopes(self, keys: Sequence[ScopeKey]) -> dict[ScopeKey, ScopeState]:
        names = [n for k in keys for n in self._load_names(k)]
        rows = self._call("load", self._load_script, keys=names) if keys else []
        return {key: _scope_state(key, row) for key, row in zip(keys, rows, strict=True)}

    def read_scopes(
        self, session_id: str, keys: Sequence[ScopeKey], held: Mapping[ScopeKey, int]
    ) -> ScopesRead:
        """One script (see `BaseDb.read_scopes`)."""
        names, args = self._read_args(session_id, keys, held)
        return self._scopes_read(
            session_id, keys, self._call("read", self._read_script, keys=names, args=args)
        )

    async def aread_scopes(
        self, session_id: str, keys: Sequence[ScopeKey], held: Mapping[ScopeKey, int]
    ) -> ScopesRead:
        """The same script through redis.asyncio, on the running loop (see `_redis_async`);
        inline on a sync call's private loop, as every async method is."""
        if runs_inline() or not self._own_client:
            return await super().aread_scopes(session_id, keys, held)
        names, args = self._read_args(session_id, keys, held)
        reply = await self._on_loop("read", self._read_script, names, args)
        return self._scopes_read(session_id, keys, reply)

    async def _on_loop(
        self, what: str, script: Any, keys: Sequence[str], args: Sequence[Any]
    ) -> Any:
        """Run a registered script through this loop's redis.asyncio client (sending its
        text if the server lost it, as redis-py's `Script` does)."""
        with self._errors(what):
            client = await self._loop_clients.client()
            try:
                return await client.evalsha(script.sha, len(keys), *keys, *args)
            except NoScriptError:
                return await client.eval(script.script, len(keys), *keys, *args)

    def _load_names(self, key: ScopeKey) -> tuple[str, str, str]:
        return self.keys.scope(key), self.keys.dseg(key), self.keys.snap(key)

    def _read_args(
        self, session_id: str, keys: Sequence[ScopeKey], held: Mapping[ScopeKey, int]
    ) -> tuple[list[str], list[int]]:
        names = [self.keys.session(session_id)]
        names += [n for k in keys for n in self._load_names(k)]
        return names, [held.get(k, -1) for k in keys]

    def _scopes_read(self, session_id: str, keys: Sequence[ScopeKey], reply: Any) -> ScopesRead:
        raw, *rows = reply
        record = (
            self.keys.session_record(session_id, dict(zip(raw[::2], raw[1::2], strict=True)))
            if raw
            else None
        )
        versions = {key: int(row[0]) for key, row in zip(keys, rows, strict=True)}
        loaded = {
            key: _scope_state(key, row) for key, row in zip(keys, rows, strict=True) if len(row) > 1
        }
        return record, versions, loaded

    def read_deltas(
        self,
        key: ScopeKey,
        *,
        after_version: int = 0,
        upto_version: int | None = None,
        limit: int | None = None,
    ) -> list[DeltaRecord]:
        current = int(self._call("read", self.client.hget, self.keys.scope(key), "version") or 0)
        last = current if upto_version is None else min(upto_version, current)
        versions = list(range(after_version + 1, last + 1))[: limit if limit is not None else None]
        if not versions:
            return []
        pipe = self.client.pipeline(transaction=True)
        pipe.hmget(self.keys.dseg(key), versions)
        pipe.hmget(self.keys.dmeta(key), versions)
        segments, metas = self._call("read", pipe.execute)
        out = []
        for version, seg, meta in zip(versions, segments, metas, strict=True):
            if seg is None and meta is None:
                continue
            try:
                sid, run_id, step, conflicts, created = _codec.loads(meta)
            except (ValueError, TypeError) as exc:
                raise corrupt(f"{key}: the delta at version {version} is corrupt") from exc
            out.append(
                decode_delta_row(
                    key, version, sid, run_id, step, seg or b"", conflicts, float(created)
                )
            )
        return out

    def read_snapshot(self, key: ScopeKey, at_or_before: int) -> tuple[int, dict[str, Any]]:
        found = self._call(
            "read", self.client.zrevrangebyscore, self.keys.snapv(key), at_or_before, "-inf", 0, 1
        )
        if not found:
            return 0, {}
        version = int(found[0])
        text = self._call("read", self.client.hget, self.keys.snap(key), version)
        try:
            data = _codec.loads(text)
        except (ValueError, TypeError) as exc:
            raise corrupt(f"{key}: snapshot at version {version} is not JSON") from exc
        if not isinstance(data, dict):
            raise corrupt(f"{key}: snapshot at version {version} is not an object")
        return version, data

    def read_events(
        self,
        session_id: str,
        *,
        after: int | None = None,
        before: int | None = None,
        limit: int | None = None,
        types: Sequence[str] | None = None,
        run_id: str | None = None,
    ) -> list[EventRecord]:
        return admin.read_events(self, session_id, after, before, limit, types, run_id)

    def read_runs(
        self, session_id: str, *, limit: int | None = None, status: str | None = None
    ) -> list[RunRecord]:
        return admin.read_runs(self, session_id, limit, status)

    def iter_runs(self, session_id: str, *, page: int = 500) -> Iterator[RunRecord]:
        return admin.iter_runs(self, session_id, page)

    def get_run(self, session_id: str, run_id: str) -> RunRecord | None:
        return admin.get_runs(self, session_id, [run_id])[0]

    def list_sessions(
        self,
        *,
        user_id: str | None = None,
        app_name: str | None = None,
        limit: int = 50,
        offset: int = 0,
        cursor: str | None = None,
    ) -> list[SessionRecord]:
        return admin.list_sessions(self, user_id, app_name, limit, offset, cursor)

    # ---- writes --------------------------------------------------------------------------

    def commit(self, commit: Commit) -> CommitResult:
        now = time.time()
        keys, args = self._commit_args(commit, now)
        reply = self._call("commit", self._commit_script, keys=keys, args=args)
        return self._commit_result(commit, reply, now)

    async def acommit(self, commit: Commit) -> CommitResult:
        """The same script through redis.asyncio, on the running loop: a commit is one
        round trip, and a worker thread would cost more than it (the hop, and the wait for
        the loop's interpreter lock). A dropped connection is retried as `commit`'s is."""
        if runs_inline() or not self._own_client:
            return await super().acommit(commit)
        now = time.time()
        keys, args = self._commit_args(commit, now)
        reply = await self._on_loop("commit", self._commit_script, keys, args)
        return self._commit_result(commit, reply, now)

    def _commit_result(self, commit: Commit, reply: Any, now: float) -> CommitResult:
        """What the COMMIT script's reply says: landed, already landed, or a lost race."""
        if reply[0] == 2:
            return decode_commit_result(commit, dec(reply[1]) or "", now)
        if reply[0] == 0:
            sid = commit.session.session_id
            if dec(reply[1]) == "session":
                raise VersionConflict(f"session {sid!r}", int(reply[2]), None)
            write = commit.writes[int(reply[2]) - 1]
            actual = int(reply[3])
            raise VersionConflict(
                str(write.key), write.base_version, None if actual < 0 else actual
            )
        return applied_result(commit, int(reply[1]), now)

    def _commit_args(self, commit: Commit, now: float) -> tuple[list[str], list[Any]]:
        """KEYS and ARGV of the COMMIT script; all encoding happens here, before any I/O."""
        k, s = self.keys, commit.session
        sid = s.session_id
        stamp = repr(now)
        blobs: list[Any] = []

        def blob(value: str | bytes) -> int:
            blobs.append(value)
            return len(blobs) + 1  # ARGV[1] is the header

        header: dict[str, Any] = {
            "sid": sid,
            "create": commit.create_session,
            "kind": s.kind,
            "now": stamp,
            "score": repr(-now),
            "token": commit.commit_id or uuid.uuid4().hex,
            "n_events": len(commit.events),
            "metadata": blob(_codec.dumps(s.metadata)),
            "writes": [],
            "events": [],
        }
        if s.user_id is not None:
            header["user_id"] = s.user_id
        if s.app_name is not None:
            header["app_name"] = s.app_name
        keys = [
            k.session(sid),
            k.sessions(),
            k.by_user(s.user_id or ""),
            k.by_app(s.app_name or ""),
            k.ev(sid),
            k.evm(sid),
            k.runs(sid),
            k.runord(sid),
            k.commits(sid),
        ]
        for w in commit.writes:
            snapshot = w.snapshot_text
            meta = [
                sid,
                commit.run_id,
                commit.step,
                _codec.dumps(w.conflicts) if w.conflicts else None,
                stamp,
            ]
            header["writes"].append(
                {
                    "kind": w.key.kind,
                    "base": w.base_version,
                    "seg": blob(w.segments_text),
                    "meta": blob(_codec.dumps(meta)),
                    "snap": blob(snapshot) if snapshot is not None else 0,
                    "dbytes": w.delta_bytes,
                    "sbytes": len(snapshot) if snapshot else 0,
                }
            )
            keys += [k.scope(w.key), k.dseg(w.key), k.dmeta(w.key), k.snap(w.key), k.snapv(w.key)]
        for e in commit.events:
            header["events"].append(
                [blob(_codec.dumps(e.data)), blob(_codec.dumps([e.type, e.run_id, stamp]))]
            )
        if commit.run is not None:
            r = commit.run
            run: dict[str, Any] = {
                "id": r.run_id,
                "status": r.status,
                "messages": blob(_codec.dumps(r.messages)),
                "metrics": blob(_codec.dumps(r.metrics)),
            }
            if r.created_at:
                run["created_at"] = repr(float(r.created_at))
            for name in ("agent_name", "input", "content", "error"):
                if getattr(r, name) is not None:
                    run[name] = getattr(r, name)
            header["run"] = run
        return keys, [_codec.dumps(header), *blobs]

    def claim_run(self, session_id: str, run_id: str, owner: str, ttl: float) -> bool:
        """Expiry by the server's clock (`TIME`), not this client's."""
        reply = self._call(
            "run lease",
            self._claim_script,
            keys=[self.keys.leases(session_id)],
            args=[run_id, owner, repr(float(ttl))],
        )
        return int(reply) == 1

    def release_run(self, session_id: str, run_id: str, owner: str) -> None:
        self._call(
            "run lease release",
            self._release_script,
            keys=[self.keys.leases(session_id)],
            args=[run_id, owner],
        )

    def delete_session(self, session_id: str) -> bool:
        validate_id(session_id)
        return admin.delete_sessions(self, [session_id]) > 0

    def prune_sessions(
        self, *, older_than: float | timedelta | datetime, user_id: str | None = None
    ) -> int:
        return admin.prune_sessions(self, older_than, user_id)

    def read_horizon(self, session_id: str) -> Horizon:
        return retention_ops.read_horizon(self, session_id)

    def write_compaction(self, plan: CompactionPlan) -> Compaction | None:
        return retention_ops.write_compaction(self, plan)

    def import_records(
        self,
        session: SessionRecord,
        deltas: Sequence[DeltaRecord],
        events: Sequence[EventRecord],
        runs: Sequence[RunRecord],
    ) -> None:
        admin.import_records(self, session, deltas, events, runs)


__all__ = ["RedisDb"]
