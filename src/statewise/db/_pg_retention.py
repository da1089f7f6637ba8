"""PostgreSQL's side of a compaction (see `statewise.db.retention`): the statements that
apply a planned compaction in one transaction, and the table of horizons."""

from __future__ import annotations

from typing import Any

from statewise.db._sql_reads import Dialect
from statewise.db._sql_retention import fold, forget, read_horizon
from statewise.db.retention import Compaction, CompactionPlan


def migration(s: str) -> str:
    """A table of its own, so the commit function, which never reads a horizon, is
    untouched."""
    return f"""
        CREATE TABLE IF NOT EXISTS {s}.horizons (
            session_id text PRIMARY KEY,
            version bigint NOT NULL,
            before double precision NOT NULL,
            ids_before double precision NOT NULL
        );
        """


def write_compaction(conn: Any, d: Dialect, plan: CompactionPlan) -> Compaction | None:
    """Apply `plan` in the caller's transaction. The session's row is locked first: every
    commit updates it, so commits to the session wait for the compaction (and the other
    way round), and two compactions of one session take turns."""
    p = d.prefix
    sid = plan.session_id
    new = plan.new
    locked = conn.execute(
        f"SELECT 1 FROM {p}sessions WHERE session_id = %s FOR UPDATE", (sid,)
    ).fetchone()
    if locked is None or read_horizon(conn, d, sid) != plan.old:
        return None
    out = Compaction(session_id=sid, horizon=new)
    if plan.snapshot is not None:
        fold(conn, d, sid, new.version, plan.snapshot, out, handle="scope_id", deltas=_deltas)
    forget(conn, d, plan, out, "session_id =", sid)
    return out


def _deltas(scope_id: str, low: int, high: int) -> tuple[str, tuple[Any, ...]]:
    """The session scope's deltas after version `low` up to `high` (see `fold`)."""
    return (
        "kind = 'session' AND scope_id = %s AND version > %s AND version <= %s",
        (scope_id, low, high),
    )
