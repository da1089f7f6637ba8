"""PostgresDb's run leases and whole-session deletes, as functions of a connection and
the schema (`s`), so `postgres.py` stays one module under the size limit."""

from __future__ import annotations

from typing import Any

import psycopg

from statewise.db import _pg_sql as Q


def claim_in(
    conn: psycopg.Connection[Any], s: str, session_id: str, run_id: str, owner: str, ttl: float
) -> bool:
    """Claim or renew a run's lease, expiring by the server's clock."""
    now = "extract(epoch from clock_timestamp())::double precision"
    row = conn.execute(
        f"INSERT INTO {s}.run_leases AS l (session_id, run_id, owner, expires_at) "
        f"VALUES (%s, %s, %s, {now} + %s) ON CONFLICT (session_id, run_id) DO UPDATE "
        f"SET owner = excluded.owner, expires_at = excluded.expires_at "
        f"WHERE l.owner = excluded.owner OR l.expires_at <= {now} RETURNING owner",
        (session_id, run_id, owner, float(ttl)),
    ).fetchone()
    return row is not None


def release_in(
    conn: psycopg.Connection[Any], s: str, session_id: str, run_id: str, owner: str
) -> None:
    conn.execute(
        f"DELETE FROM {s}.run_leases WHERE session_id = %s AND run_id = %s AND owner = %s",
        (session_id, run_id, owner),
    )


def delete_in(conn: psycopg.Connection[Any], s: str, ids: list[str]) -> int:
    """Delete the sessions `ids` and everything of theirs; how many sessions there were."""
    found = conn.execute(
        f"DELETE FROM {s}.sessions WHERE session_id = ANY(%s::text[])", (ids,)
    ).rowcount
    for table in ("events", "runs", "commits", "run_leases", "horizons"):
        conn.execute(f"DELETE FROM {s}.{table} WHERE session_id = ANY(%s::text[])", (ids,))
    for table in ("deltas", "snapshots", "scopes"):
        conn.execute(
            f"DELETE FROM {s}.{table} WHERE kind = 'session' AND scope_id = ANY(%s::text[])",
            (ids,),
        )
    return found


def prune_in(conn: psycopg.Connection[Any], s: str, cutoff: float, user_id: str | None) -> int:
    """Delete the sessions last updated before `cutoff` (of `user_id` when given)."""
    # The listing index finds the old buckets; the sessions updated since are not read.
    sql = (
        f"SELECT session_id FROM {s}.sessions WHERE listed_at <= "
        f"{Q.listed('%s::double precision')} AND updated_at < %s"
    )
    params: list[Any] = [cutoff, cutoff]
    if user_id is not None:
        sql += " AND user_id = %s"
        params.append(user_id)
    # Lock the rows, so a session committed to meanwhile is not pruned.
    ids = [r[0] for r in conn.execute(sql + " FOR UPDATE", params).fetchall()]
    return delete_in(conn, s, ids) if ids else 0
