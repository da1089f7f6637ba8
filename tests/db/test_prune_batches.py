"""SQLite prunes sessions in batches: one durable commit per batch, not one per session
(counted with the writer connection's statement trace), and what it leaves is exactly the
sessions it should keep."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path
from typing import Any

from statewise.db import SqliteDb
from statewise.db.sqlite import PRUNE_BATCH
from statewise.db.testing.cases import write


def test_pruning_many_sessions_takes_a_commit_per_batch(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    db = SqliteDb(db_file=str(path))
    count = PRUNE_BATCH * 2 + 7
    for n in range(count):
        write(db, f"old-{n}", {"op": "set", "path": ["n"], "value": n})
    cutoff = time.time() + 0.001
    time.sleep(0.01)
    write(db, "new", {"op": "set", "path": ["n"], "value": 1})
    writer = db._writing_conn()
    transactions: list[str] = []

    def seen(sql: str) -> None:
        if sql.strip().upper().startswith("COMMIT"):
            transactions.append(sql)

    writer.set_trace_callback(seen)
    assert db.prune_sessions(older_than=datetime.fromtimestamp(cutoff)) == count
    writer.set_trace_callback(None)
    assert len(transactions) == 3  # ceil(count / PRUNE_BATCH), one per batch
    assert [s.session_id for s in db.list_sessions(limit=10)] == ["new"]
    assert db.read_events("old-0") == [] and db.get_session("old-3") is None
    db.close()


def test_a_session_committed_to_while_pruning_is_kept(tmp_path: Path) -> None:
    """The old sessions are found before the batches' transactions; one committed to in
    between (by another connection, as another process would) is no longer old, and stays."""
    path = tmp_path / "race.db"
    db, other = SqliteDb(db_file=str(path)), SqliteDb(db_file=str(path))
    for n in range(3):
        write(db, f"old-{n}", {"op": "set", "path": ["n"], "value": n})
    time.sleep(0.01)
    cutoff = time.time()
    original = db._write

    def write_first(fn: Any) -> Any:
        write(other, "old-1", {"op": "set", "path": ["n"], "value": 9})
        db._write = original  # type: ignore[method-assign]
        return original(fn)

    db._write = write_first  # type: ignore[method-assign]
    assert db.prune_sessions(older_than=datetime.fromtimestamp(cutoff)) == 2
    assert [s.session_id for s in db.list_sessions()] == ["old-1"]
    db.close()
    other.close()
