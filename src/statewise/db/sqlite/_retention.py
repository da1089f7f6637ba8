"""SQLite's side of a compaction (see `statewise.db.retention`): the statements that
apply a planned compaction inside the caller's write transaction."""

from __future__ import annotations

import sqlite3
from typing import Any

from statewise.db import _codec
from statewise.db._sql_retention import fold, forget, live_runs, read_horizon
from statewise.db.retention import Compaction, CompactionPlan, Horizon
from statewise.db.sqlite._schema import (
    DELTA_REFERENCE,
    KEY_SPAN,
    dialect,
    row_key,
    session_last_seq,
    session_updated_at,
)


def write_compaction(conn: sqlite3.Connection, p: str, plan: CompactionPlan) -> Compaction | None:
    """Apply `plan` in the caller's transaction (which holds the write lock)."""
    d = dialect(p)
    sid = plan.session_id
    new = plan.new
    if read_horizon(conn, d, sid) != plan.old:
        return None
    row = conn.execute(f"SELECT session_key FROM {p}sessions WHERE session_id = ?", (sid,))
    found = row.fetchone()
    if found is None:
        return None
    session_key = found[0]
    out = Compaction(session_id=sid, horizon=new)
    if plan.snapshot is not None:
        _inline_kept_references(conn, p, sid, session_key, new, live_runs(d))
        fold(conn, d, sid, new.version, plan.snapshot, out, handle="scope_key", deltas=_deltas)
    # The row keeps the session's last number and time, which its events may take along.
    conn.execute(
        f"UPDATE {p}sessions AS s SET last_seq = {session_last_seq(p, 's')}, "
        f"updated_at = {session_updated_at(p, 's')} WHERE session_key = ?",
        (session_key,),
    )
    forget(conn, d, plan, out, "session_key =", session_key)
    return out


def _inline_kept_references(
    conn: sqlite3.Connection,
    p: str,
    sid: str,
    session_key: int,
    new: Horizon,
    live_runs: str,
) -> None:
    """A kept `state_delta` event stored as a reference to a delta the fold deletes (a
    live run's, older than the horizon) gets the delta's segments written into it."""
    scope = f"(SELECT scope_key FROM {p}scopes WHERE kind = 'session' AND scope_id = ?)"
    delta = row_key(scope, "json_extract(substr(e.data, 2), '$.version')")
    rows = conn.execute(
        f"SELECT e.rowid, e.data, d.segments FROM {p}events AS e JOIN {p}deltas AS d "
        f"ON d.delta_key = {delta} "
        f"AND d.kind = 'session' AND d.scope_id = ? "
        f"WHERE e.session_key = ? AND e.type = 'state_delta' AND e.data LIKE ? "
        f"AND json_extract(substr(e.data, 2), '$.scope') = 'session' "
        f"AND json_extract(substr(e.data, 2), '$.scope_id') = ? AND d.version <= ? "
        f"AND (e.created_at > ? OR e.run_id IN ({live_runs}))",
        (sid, sid, session_key, DELTA_REFERENCE + "%", sid, new.version, new.before, sid),
    ).fetchall()
    for rowid, data, segments in rows:
        inlined = _codec.loads(data[len(DELTA_REFERENCE) :])
        inlined["segments"] = _codec.loads(segments)
        conn.execute(
            f"UPDATE {p}events SET data = ? WHERE rowid = ?", (_codec.dumps(inlined), rowid)
        )


def _deltas(scope_key: int, low: int, high: int) -> tuple[str, tuple[Any, ...]]:
    """The session scope's deltas after version `low` up to `high` (see `fold`): a range
    of the deltas table's own keys (see `row_key`)."""
    first = scope_key * KEY_SPAN
    return "delta_key BETWEEN ? AND ?", (first + low + 1, first + high)
