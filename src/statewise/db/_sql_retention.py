"""The statements of a compaction (see `statewise.db.retention`) that SQLite and
PostgreSQL share, in the caller's transaction. Where the two find a session's events and a
scope's deltas differently, the backend passes its own part in."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from statewise.db._sql_reads import Dialect
from statewise.db.retention import (
    LIVE_RUN_STATUSES,
    Compaction,
    CompactionPlan,
    Horizon,
    forgets,
)

LIVE = "('" + "','".join(LIVE_RUN_STATUSES) + "')"
"""The statuses of a run that may still write, as an SQL list."""


def read_horizon(conn: Any, d: Dialect, session_id: str) -> Horizon:
    row = conn.execute(
        f"SELECT version, before, ids_before FROM {d.prefix}horizons WHERE session_id = {d.p}",
        (session_id,),
    ).fetchone()
    return Horizon(version=row[0], before=row[1], ids_before=row[2]) if row else Horizon()


def live_runs(d: Dialect) -> str:
    """SQL of the ids of a session's runs that may still write (the session id)."""
    return f"SELECT run_id FROM {d.prefix}runs WHERE session_id = {d.p} AND status IN {LIVE}"


def fold(
    conn: Any,
    d: Dialect,
    sid: str,
    version: int,
    snapshot: str,
    out: Compaction,
    *,
    handle: str,
    deltas: Callable[[Any, int, int], tuple[str, tuple[Any, ...]]],
) -> None:
    """Make the snapshot at `version` the session scope's base and delete what it replaces,
    in the caller's transaction. `handle` is the scopes column `deltas` finds the scope's
    deltas by: `deltas(value, low, high)` is SQL and parameters of its deltas after
    version `low` up to `high`."""
    scope = f"kind = 'session' AND scope_id = {d.p}"
    row = conn.execute(
        f"SELECT {handle}, snapshot_version FROM {d.prefix}scopes WHERE {scope}{d.lock}", (sid,)
    ).fetchone()
    if row is None:
        return
    owner, snapshot_version = row
    if snapshot_version < version:
        where, params = deltas(owner, snapshot_version, version)
        folded = conn.execute(
            f"SELECT coalesce(sum(length(segments)), 0) FROM {d.prefix}deltas WHERE {where}",
            params,
        ).fetchone()[0]
        conn.execute(
            f"UPDATE {d.prefix}scopes SET snapshot_version = {d.p}, snapshot_bytes = {d.p}, "
            f"tail_bytes = {d.greatest}(0, tail_bytes - {d.p}) WHERE {scope}",
            (version, len(snapshot), folded, sid),
        )
    conn.execute(
        f"INSERT INTO {d.prefix}snapshots (kind, scope_id, version, state) "
        f"VALUES ('session', {d.p}, {d.p}, {d.p}) "
        f"ON CONFLICT (kind, scope_id, version) DO NOTHING",
        (sid, version, snapshot),
    )
    where, params = deltas(owner, -1, version)
    out.deltas = conn.execute(f"DELETE FROM {d.prefix}deltas WHERE {where}", params).rowcount
    out.snapshots = conn.execute(
        f"DELETE FROM {d.prefix}snapshots WHERE {scope} AND version < {d.p}", (sid, version)
    ).rowcount


def forget(
    conn: Any, d: Dialect, plan: CompactionPlan, out: Compaction, events: str, key: Any
) -> None:
    """Delete what the new horizon leaves behind but the fold's deltas and snapshots (the
    events, finished runs, their leases, the commit ids it forgets), then record it.
    `events` is SQL that a parameter, `key`, completes to match the session's events."""
    sid = plan.session_id
    new = plan.new
    p = d.p
    out.events = conn.execute(
        f"DELETE FROM {d.prefix}events WHERE {events} {p} AND created_at <= {p} "
        f"AND (run_id IS NULL OR run_id NOT IN ({live_runs(d)}))",
        (key, new.before, sid),
    ).rowcount
    live = {row[0] for row in conn.execute(live_runs(d), (sid,))}
    out.runs = conn.execute(
        f"DELETE FROM {d.prefix}runs WHERE session_id = {p} AND status NOT IN {LIVE} "
        f"AND updated_at <= {p}",
        (sid, new.before),
    ).rowcount
    conn.execute(
        f"DELETE FROM {d.prefix}run_leases WHERE session_id = {p} "
        f"AND run_id NOT IN (SELECT run_id FROM {d.prefix}runs WHERE session_id = {p})",
        (sid, sid),
    )
    old_ids = [
        commit_id
        for commit_id, landed in conn.execute(  # (an id is made before it lands)
            f"SELECT commit_id, created_at FROM {d.prefix}commits "
            f"WHERE session_id = {p} AND created_at < {p}",
            (sid, new.ids_before),
        )
        if forgets(plan, commit_id, landed, live)
    ]
    delete = f"DELETE FROM {d.prefix}commits WHERE session_id = {p} AND "
    if not old_ids:
        pass
    elif d.arrays:
        conn.execute(delete + "commit_id = ANY(%s::text[])", (sid, old_ids))
    else:  # (one at a time: a statement has a bounded number of parameters)
        conn.executemany(delete + "commit_id = ?", [(sid, i) for i in old_ids])
    out.commit_ids = len(old_ids)
    conn.execute(
        f"INSERT INTO {d.prefix}horizons (session_id, version, before, ids_before) "
        f"VALUES ({p}, {p}, {p}, {p}) ON CONFLICT (session_id) DO UPDATE SET "
        f"version = excluded.version, before = excluded.before, "
        f"ids_before = excluded.ids_before",
        (sid, new.version, new.before, new.ids_before),
    )
