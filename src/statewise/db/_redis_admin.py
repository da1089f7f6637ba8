"""RedisDb's paged reads (events, runs, sessions) and its maintenance writes (delete, prune,
import). None is on the per-run hot path except `read_events`/`read_runs` with a limit."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any

from statewise.db import _codec
from statewise.db._redis_keys import RedisTarget, corrupt, dec, run_fields, run_record
from statewise.db.base import readable_records, to_timestamp_cutoff
from statewise.db.listing import decode_cursor
from statewise.db.records import DeltaRecord, EventRecord, RunRecord, ScopeKey, SessionRecord
from statewise.exceptions import StorageError

CHUNK = 500


def _seq_chunks(lo: int, hi: int, newest_first: bool) -> Iterator[list[int]]:
    if newest_first:
        for top in range(hi, lo - 1, -CHUNK):
            yield list(range(top, max(lo, top - CHUNK + 1) - 1, -1))
    else:
        for bottom in range(lo, hi + 1, CHUNK):
            yield list(range(bottom, min(hi, bottom + CHUNK - 1) + 1))


def read_events(
    db: RedisTarget,
    sid: str,
    after: int | None,
    before: int | None,
    limit: int | None,
    types: Sequence[str] | None,
    run_id: str | None = None,
) -> list[EventRecord]:
    k = db.keys
    last = int(db._call("read", db.client.hget, k.session(sid), "last_seq") or 0)
    lo = 1 if after is None else after + 1
    hi = last if before is None else min(last, before - 1)
    newest_first = limit is not None and after is None
    wanted = set(types or ())
    picked: list[tuple[int, Any]] = []
    for seqs in _seq_chunks(lo, hi, newest_first):
        if limit is not None and len(picked) >= limit:
            break
        metas = db._call("read", db.client.hmget, k.evm(sid), seqs)
        for seq, meta in zip(seqs, metas, strict=True):
            if meta is None:
                continue
            try:
                type_, event_run, created = _codec.loads(meta)
            except (ValueError, TypeError) as exc:
                raise corrupt(f"session {sid!r}: event {seq} is corrupt") from exc
            if (not wanted or type_ in wanted) and (run_id is None or event_run == run_id):
                picked.append((seq, (type_, event_run, float(created))))
    if limit is not None:
        picked = picked[:limit]
    if newest_first:
        picked.reverse()
    if not picked:
        return []
    datas = db._call("read", db.client.hmget, k.ev(sid), [seq for seq, _ in picked])
    events = []
    for (seq, (type_, event_run, created)), data in zip(picked, datas, strict=True):
        try:
            decoded = _codec.loads(data)
        except (ValueError, TypeError) as exc:
            raise corrupt(f"session {sid!r}: event {seq} is not JSON") from exc
        events.append(
            EventRecord(
                session_id=sid,
                seq=seq,
                type=type_,
                data=decoded,
                run_id=event_run,
                created_at=created,
            )
        )
    return events


def get_runs(db: RedisTarget, sid: str, run_ids: Sequence[str]) -> list[RunRecord | None]:
    pipe = db.client.pipeline(transaction=False)
    for run_id in run_ids:
        pipe.hmget(db.keys.runs(sid), run_fields(run_id))
    rows = db._call("read", pipe.execute) if run_ids else []
    return [
        run_record(sid, run_id, values) if values[0] is not None else None
        for run_id, values in zip(run_ids, rows, strict=True)
    ]


def read_runs(db: RedisTarget, sid: str, limit: int | None, status: str | None) -> list[RunRecord]:
    """Oldest first; with `limit`, the newest `limit` (order: created_at, then insertion)."""
    if limit == 0:
        return []
    key = db.keys.runord(sid)
    if limit is not None and status is None:
        members = db._call("read", db.client.zrevrange, key, 0, limit - 1)[::-1]
        return [r for r in get_runs(db, sid, [dec(m)[12:] for m in members]) if r]  # type: ignore[index]
    picked: list[RunRecord] = []
    start = 0
    while limit is None or len(picked) < limit:
        members = db._call("read", db.client.zrevrange, key, start, start + CHUNK - 1)
        if not members:
            break
        start += len(members)
        for run in get_runs(db, sid, [dec(m)[12:] for m in members]):  # type: ignore[index]
            if run is not None and (status is None or run.status == status):
                picked.append(run)
    if limit is not None:
        picked = picked[:limit]
    return picked[::-1]


def iter_runs(db: RedisTarget, sid: str, page: int) -> Iterator[RunRecord]:
    """Oldest first, `page` runs a read (the run order only grows at its end)."""
    key, start = db.keys.runord(sid), 0
    while True:
        members = db._call("read", db.client.zrange, key, start, start + page - 1)
        for run in get_runs(db, sid, [dec(m)[12:] for m in members]):  # type: ignore[index]
            if run is not None:
                yield run
        if len(members) < page:
            return
        start += len(members)


def list_sessions(
    db: RedisTarget,
    user_id: str | None,
    app_name: str | None,
    limit: int,
    offset: int,
    cursor: str | None,
) -> list[SessionRecord]:
    """The listing from the session indexes (score -updated_at, ties by id as Redis orders
    them): a cursor is a score and a member to start after, so a page costs the same at any
    depth; with both a user and an app, the user's sessions are read in chunks and the
    app's kept."""
    if limit <= 0:
        return []
    k = db.keys
    after = decode_cursor(cursor) if cursor is not None else None
    if user_id is not None and app_name is not None:
        picked: list[SessionRecord] = []
        skip = offset
        for ids in _id_chunks(db, k.by_user(user_id), after, 0, CHUNK):
            for record in _sessions(db, ids):
                if record.app_name != app_name:
                    continue
                if skip:
                    skip -= 1
                    continue
                picked.append(record)
                if len(picked) == limit:
                    return picked
        return picked
    index = (
        k.by_user(user_id)
        if user_id is not None
        else (k.by_app(app_name) if app_name is not None else k.sessions())
    )
    ids = next(_id_chunks(db, index, after, offset, limit), [])
    return _sessions(db, ids)


def _id_chunks(
    db: RedisTarget, index: str, after: tuple[float, str] | None, skip: int, size: int
) -> Iterator[list[str]]:
    """Session ids of a session index in listing order, after `after` and `skip` more,
    `size` at a time."""
    lowest, ties = "-inf", []
    if after is not None:
        score, last = -after[0], after[1].encode()
        # The sessions at the cursor's very score come first (by id), then the rest.
        same = db._call("read", db.client.zrangebyscore, index, repr(score), repr(score))
        ties = [str(dec(m)) for m in same if (m if isinstance(m, bytes) else m.encode()) > last]
        lowest = f"({score!r}"
    if skip >= len(ties):
        skip, ties = skip - len(ties), []
    else:
        skip, ties = 0, ties[skip:]
    while True:
        if len(ties) >= size:
            yield ties[:size]
            ties = ties[size:]
            continue
        want = size - len(ties)
        found = db._call(
            "read", db.client.zrangebyscore, index, lowest, "+inf", start=skip, num=want
        )
        chunk = ties + [str(dec(m)) for m in found]
        if chunk:
            yield chunk
        if len(found) < want:
            return
        ties, skip = [], skip + len(found)


def _sessions(db: RedisTarget, ids: Sequence[str | None]) -> list[SessionRecord]:
    pipe = db.client.pipeline(transaction=False)
    for sid in ids:
        pipe.hgetall(db.keys.session(str(sid)))
    rows = db._call("read", pipe.execute) if ids else []
    found = [(str(sid), raw) for sid, raw in zip(ids, rows, strict=True) if raw]
    return readable_records(found, lambda pair: db.keys.session_record(*pair))


def delete_sessions(db: RedisTarget, ids: Sequence[str]) -> int:
    """Delete sessions and everything they own, each atomically (WATCH/MULTI)."""
    import redis

    k, deleted = db.keys, 0
    for sid in ids:
        while True:
            with db.client.pipeline(transaction=True) as pipe:
                try:
                    pipe.watch(k.session(sid))
                    raw = pipe.hmget(k.session(sid), "user_id", "app_name", "session_id")
                    pipe.multi()
                    pipe.delete(*k.owned_by_session(sid))
                    pipe.zrem(k.sessions(), sid)
                    if raw[0] is not None:
                        pipe.zrem(k.by_user(dec(raw[0]) or ""), sid)
                    if raw[1] is not None:
                        pipe.zrem(k.by_app(dec(raw[1]) or ""), sid)
                    db._call("delete", pipe.execute)
                except redis.WatchError:
                    continue
            deleted += raw[2] is not None
            break
    return deleted


def prune_sessions(
    db: RedisTarget, older_than: float | timedelta | datetime, user_id: str | None
) -> int:
    cutoff = to_timestamp_cutoff(older_than, time.time())
    index = db.keys.sessions() if user_id is None else db.keys.by_user(user_id)
    # score = -updated_at, so updated_at < cutoff  <=>  score > -cutoff
    members = db._call("prune", db.client.zrangebyscore, index, f"({-cutoff!r}", "+inf")
    return delete_sessions(db, [str(dec(m)) for m in members])


def import_records(
    db: RedisTarget,
    session: SessionRecord,
    deltas: Sequence[DeltaRecord],
    events: Sequence[EventRecord],
    runs: Sequence[RunRecord],
) -> None:
    import redis

    k, sid = db.keys, session.session_id
    key = ScopeKey("session", sid)
    score = repr(-float(session.updated_at))
    fields: dict[str, Any] = {
        "session_id": sid,
        "kind": session.kind,
        "created_at": repr(float(session.created_at)),
        "updated_at": repr(float(session.updated_at)),
        "last_seq": session.last_seq,
        "metadata": _codec.dumps(session.metadata),
        "runs": len(runs),
    }
    if session.user_id is not None:
        fields["user_id"] = session.user_id
    if session.app_name is not None:
        fields["app_name"] = session.app_name
    with db.client.pipeline(transaction=True) as pipe:
        try:
            pipe.watch(k.session(sid))
            if pipe.exists(k.session(sid)):
                raise StorageError(f"cannot import session {sid!r}: it already exists")
            pipe.multi()
            pipe.hset(k.session(sid), mapping=fields)
            pipe.zadd(k.sessions(), {sid: score})
            if session.user_id is not None:
                pipe.zadd(k.by_user(session.user_id), {sid: score})
            if session.app_name is not None:
                pipe.zadd(k.by_app(session.app_name), {sid: score})
            for d in deltas:
                meta = [
                    sid,
                    d.run_id,
                    d.step,
                    _codec.dumps(d.conflicts) if d.conflicts else None,
                    repr(float(d.created_at)),
                ]
                pipe.hset(
                    k.dseg(key), str(d.version), _codec.dumps([s.to_dict() for s in d.segments])
                )
                pipe.hset(k.dmeta(key), str(d.version), _codec.dumps(meta))
            if deltas:
                pipe.hset(
                    k.scope(key),
                    mapping={
                        "version": max(d.version for d in deltas),
                        "snapshot_version": 0,
                        "snapshot_bytes": 0,
                        "tail_bytes": 0,
                        "updated_at": repr(session.updated_at),
                    },
                )
            for e in events:
                pipe.hset(k.ev(sid), str(e.seq), _codec.dumps(e.data))
                pipe.hset(
                    k.evm(sid),
                    str(e.seq),
                    _codec.dumps([e.type, e.run_id, repr(float(e.created_at))]),
                )
            for order, r in enumerate(runs, 1):
                values = [
                    r.status,
                    r.agent_name,
                    r.input,
                    r.content,
                    _codec.dumps(r.messages),
                    _codec.dumps(r.metrics),
                    r.error,
                    repr(float(r.created_at)),
                    repr(float(r.updated_at)),
                    order,
                ]
                pipe.hset(
                    k.runs(sid),
                    mapping={
                        f: v
                        for f, v in zip(run_fields(r.run_id), values, strict=True)
                        if v is not None
                    },
                )
                pipe.zadd(k.runord(sid), {f"{order:012d}{r.run_id}": repr(float(r.created_at))})
            db._call("import", pipe.execute)
        except redis.WatchError as exc:
            raise StorageError(f"cannot import session {sid!r}: it was created meanwhile") from exc
