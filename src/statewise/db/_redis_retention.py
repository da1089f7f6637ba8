"""RedisDb's side of a compaction (see `statewise.db.retention`).

One MULTI/EXEC transaction, under WATCH of the session's hash (every commit writes it)
and its scope's hash: what the compaction read to decide what to delete cannot change
before it deletes, or the transaction writes nothing and is tried again. The horizon is
kept in the session's hash (fields `h_version`, `h_before`, `h_ids`), so deleting the
session deletes it.
"""

from __future__ import annotations

from typing import Any

from statewise.db import _codec
from statewise.db._redis_keys import RedisTarget, dec, run_fields
from statewise.db.records import ScopeKey
from statewise.db.retention import (
    LIVE_RUN_STATUSES,
    Compaction,
    CompactionPlan,
    Horizon,
    forgets,
)

ATTEMPTS = 8
"""Tries before giving up (None) when commits keep moving the session meanwhile."""


def read_horizon(db: RedisTarget, session_id: str) -> Horizon:
    raw = db._call(
        "read", db.client.hmget, db.keys.session(session_id), "h_version", "h_before", "h_ids"
    )
    return _horizon(raw)


def _horizon(raw: list[Any]) -> Horizon:
    if raw[0] is None:
        return Horizon()
    return Horizon(version=int(raw[0]), before=float(raw[1]), ids_before=float(raw[2]))


def write_compaction(db: RedisTarget, plan: CompactionPlan) -> Compaction | None:
    import redis

    for _attempt in range(ATTEMPTS):
        with db.client.pipeline(transaction=True) as pipe:
            try:
                out = _compact_in(db, pipe, plan)
                if out is None:
                    pipe.reset()
                    return None
                db._call("compact", pipe.execute)
                return out
            except redis.WatchError:
                continue
    return None


def _compact_in(db: RedisTarget, pipe: Any, plan: CompactionPlan) -> Compaction | None:
    """Read under WATCH, then queue the writes (the caller executes them)."""
    k = db.keys
    sid = plan.session_id
    new = plan.new
    key = ScopeKey("session", sid)
    session = k.session(sid)
    pipe.watch(session, k.scope(key))
    raw = pipe.hmget(session, "last_seq", "h_version", "h_before", "h_ids")
    if raw[0] is None or _horizon(raw[1:]) != plan.old:
        return None
    out = Compaction(session_id=sid, horizon=new)
    # Everything else is read in two round trips, on the client's own connections: the
    # WATCH on this one makes EXEC fail if a commit moved the session meanwhile.
    reads = db.client.pipeline(transaction=False)
    reads.zrange(k.runord(sid), 0, -1)
    reads.hgetall(k.evm(sid))
    reads.hgetall(k.commits(sid))
    reads.hmget(k.scope(key), "snapshot_version", "tail_bytes")
    reads.zrangebyscore(k.snapv(key), "-inf", max(0, new.version - 1))
    raw_members, raw_metas, ids, scope, raw_snapshots = db._call("read", reads.execute)
    members = [dec(m) or "" for m in raw_members]
    run_ids = [m[12:] for m in members]
    snapshot_version = int(scope[0] or 0)
    lengths = list(range(max(snapshot_version, plan.old.version) + 1, new.version + 1))
    if plan.snapshot is not None:
        for v in lengths:
            reads.hstrlen(k.dseg(key), v)
    if run_ids:
        reads.hmget(k.runs(sid), [f"{f}:{r}" for r in run_ids for f in ("status", "updated_at")])
    replies = db._call("read", reads.execute) if (run_ids or plan.snapshot) else []
    fields = replies[-1] if run_ids else []
    states = list(zip(fields[0::2], fields[1::2], strict=True))
    folded = sum(replies[: len(lengths)]) if plan.snapshot is not None else 0
    # Runs: which go on (kept whole, with their events and commit ids) and which go.
    live = {r for r, (status, _u) in zip(run_ids, states, strict=True) if dec(status) in LIVE}
    gone_runs = [
        (member, run_id)
        for member, run_id, (status, updated) in zip(members, run_ids, states, strict=True)
        if run_id not in live and status is not None and float(updated or 0) <= new.before
    ]
    # Events: seq -> (type, run id, time).
    metas = {int(seq): _codec.loads(meta) for seq, meta in raw_metas.items()}
    times = {seq: float(meta[2]) for seq, meta in metas.items()}
    gone_events = [
        seq for seq, meta in metas.items() if float(meta[2]) <= new.before and meta[1] not in live
    ]
    gone_ids = []
    for raw_id, result in ids.items():
        commit_id = dec(raw_id) or ""
        landed = times.get(int((dec(result) or "0").split("|", 1)[0]))
        if forgets(plan, commit_id, landed, live):
            gone_ids.append(commit_id)
    fold = None
    if plan.snapshot is not None and (scope[0] is not None or scope[1] is not None):
        old_snapshots = [int(v) for v in raw_snapshots]
        fold = (snapshot_version, int(scope[1] or 0), folded, old_snapshots)
    pipe.multi()
    if fold is not None and plan.snapshot is not None:
        snapshot_version, tail, folded, old_snapshots = fold
        versions = list(range(plan.old.version + 1, new.version + 1))
        if versions:
            pipe.hdel(k.dseg(key), *versions)
            pipe.hdel(k.dmeta(key), *versions)
        pipe.hset(k.snap(key), new.version, plan.snapshot)
        pipe.zadd(k.snapv(key), {str(new.version): new.version})
        if old_snapshots:
            pipe.hdel(k.snap(key), *old_snapshots)
            pipe.zrem(k.snapv(key), *[str(v) for v in old_snapshots])
        if snapshot_version < new.version:
            pipe.hset(
                k.scope(key),
                mapping={
                    "snapshot_version": new.version,
                    "snapshot_bytes": len(plan.snapshot.encode()),
                    "tail_bytes": max(0, tail - folded),
                },
            )
        out.deltas = len(versions)
        out.snapshots = len(old_snapshots)
    if gone_events:
        pipe.hdel(k.ev(sid), *gone_events)
        pipe.hdel(k.evm(sid), *gone_events)
    for member, run_id in gone_runs:
        pipe.hdel(k.runs(sid), *run_fields(run_id))
        pipe.zrem(k.runord(sid), member)
        pipe.hdel(k.leases(sid), run_id)
    if gone_ids:
        pipe.hdel(k.commits(sid), *gone_ids)
    pipe.hset(
        session,
        mapping={
            "h_version": new.version,
            "h_before": repr(new.before),
            "h_ids": repr(new.ids_before),
        },
    )
    out.events, out.runs, out.commit_ids = len(gone_events), len(gone_runs), len(gone_ids)
    return out


LIVE = frozenset(LIVE_RUN_STATUSES)
