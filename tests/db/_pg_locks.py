"""Waiting, in a test, until a commit on PostgreSQL waits for a lock another connection
holds (so the test knows the commit is in flight before it acts)."""

from __future__ import annotations

import time


def wait_until_blocked(url: str, schema: str) -> None:
    """Until a `statewise_commit` call on `schema` waits for a lock (at most 10 s)."""
    import psycopg

    deadline = time.monotonic() + 10
    with psycopg.connect(url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND query LIKE %s",
                (f'%"{schema}".statewise_commit%',),
            ).fetchone()
            if row and row[0]:
                return
            time.sleep(0.01)
    raise AssertionError("the commit never blocked behind the other writer")
