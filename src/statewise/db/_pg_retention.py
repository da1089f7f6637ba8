"""PostgreSQL's side of a compaction (see `statewise.db.retention`): the statements that
apply a planned compaction in one transaction, and the table of horizons."""

from __future__ import annotations

from typing import Any

from statewise.db._sql_reads import Dialect, fold
from statewise.db.retention import (
    LIVE_RUN_STATUSES,
    Compaction,
    CompactionPlan,
    Horizon,
    forgets,
)

_LIVE = "('" + "','".join(LIVE_RUN_STATUSES) + "')"


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


def read_horizon(conn: Any, p: str, session_id: str) -> Horizon:
    row = conn.execute(
        f"SELECT version, before, ids_before FROM {p}horizons WHERE session_id = %s",
        (session_id,),
    ).fetchone()
    return Horizon(version=row[0], before=row[1], ids_before=row[2]) if row else Horizon()


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
    if locked is None or read_horizon(conn, p, sid) != plan.old:
        return None
    out = Compaction(session_id=sid, horizon=new)
    if plan.snapshot is not None:
        fold(conn, d, sid, new.version, plan.snapshot, out, handle="scope_id", deltas=_deltas)
    live = {
        row[0]
        for row in conn.execute(
            f"SELECT run_id FROM {p}runs WHERE session_id = %s AND status IN {_LIVE}", (sid,)
        )
    }
    live_list = list(live)
    out.events = conn.execute(
        f"DELETE FROM {p}events WHERE session_id = %s AND created_at <= %s "
        f"AND (run_id IS NULL OR NOT run_id = ANY(%s::text[]))",
        (sid, new.before, live_list),
    ).rowcount
    out.runs = conn.execute(
        f"DELETE FROM {p}runs WHERE session_id = %s AND NOT status IN {_LIVE} AND updated_at <= %s",
        (sid, new.before),
    ).rowcount
    conn.execute(
        f"DELETE FROM {p}run_leases WHERE session_id = %s AND NOT run_id IN "
        f"(SELECT run_id FROM {p}runs WHERE session_id = %s)",
        (sid, sid),
    )
    old_ids = [
        commit_id
        for commit_id, landed in conn.execute(  # (an id is made before it lands)
            f"SELECT commit_id, created_at FROM {p}commits "
            f"WHERE session_id = %s AND created_at < %s",
            (sid, new.ids_before),
        )
        if forgets(plan, commit_id, landed, live)
    ]
    if old_ids:
        conn.execute(
            f"DELETE FROM {p}commits WHERE session_id = %s AND commit_id = ANY(%s::text[])",
            (sid, old_ids),
        )
    out.commit_ids = len(old_ids)
    conn.execute(
        f"INSERT INTO {p}horizons (session_id, version, before, ids_before) "
        f"VALUES (%s, %s, %s, %s) ON CONFLICT (session_id) DO UPDATE SET "
        f"version = excluded.version, before = excluded.before, "
        f"ids_before = excluded.ids_before",
        (sid, new.version, new.before, new.ids_before),
    )
    return out


def _deltas(scope_id: str, low: int, high: int) -> tuple[str, tuple[Any, ...]]:
    """The session scope's deltas after version `low` up to `high` (see `fold`)."""
    return (
        "kind = 'session' AND scope_id = %s AND version > %s AND version <= %s",
        (scope_id, low, high),
    )
