"""`iter_runs` reads a session's runs a page at a time, oldest first, on every backend:
an export of a session with many runs holds one page of them, not all."""

from __future__ import annotations

from statewise.db.records import RunRecord, SessionRecord
from statewise.db.testing import Harness


def test_iter_runs_pages_through_every_run_in_order(harness: Harness) -> None:
    db = harness.db
    runs = [
        RunRecord(
            session_id="many",
            run_id=f"r{i:02d}",
            status="completed",
            content=f"answer {i}",
            # Ties on created_at: the page boundaries must not drop or repeat one.
            created_at=1_000.0 + i // 3,
            updated_at=1_000.0 + i // 3,
        )
        for i in range(11)
    ]
    db.import_records(
        SessionRecord(session_id="many", created_at=1.0, updated_at=2.0), [], [], runs
    )
    for page in (1, 2, 3, 4, 500):
        read = list(db.iter_runs("many", page=page))
        assert [r.run_id for r in read] == [r.run_id for r in db.read_runs("many")], page
        assert sorted(r.run_id for r in read) == [r.run_id for r in runs]
        assert [r.content for r in read] == [r.content for r in db.read_runs("many")]
    assert list(db.iter_runs("nobody")) == []
