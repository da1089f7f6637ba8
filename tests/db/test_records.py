"""ScopeWrite encodes a snapshot once: the store measures and the backend stores that text."""

from __future__ import annotations

import json

from statewise.db import InMemoryDb
from statewise.db.records import Commit, DeltaSegment, ScopeKey, ScopeWrite, SessionRecord


def test_a_snapshot_is_encoded_once_and_that_text_is_what_is_stored() -> None:
    key = ScopeKey("session", "s1")
    state = {"items": list(range(1000)), "name": "é"}
    write = ScopeWrite(
        key=key,
        base_version=0,
        segments=[DeltaSegment(source="t", ops=[{"op": "set", "path": ["name"], "value": "é"}])],
        snapshot=state,
    )
    text = write.snapshot_text
    assert text is not None and json.loads(text) == state
    assert write.snapshot_text is text  # the same object: not encoded again
    assert write.snapshot_bytes == len(text)
    assert write.segments_text is write.segments_text
    db = InMemoryDb()
    db.commit(Commit(session=SessionRecord(session_id="s1"), create_session=True, writes=[write]))
    loaded = db.load_scopes([key])[key]
    assert loaded.data == state and loaded.snapshot_bytes == len(text)


def test_a_write_without_snapshot_has_no_text() -> None:
    write = ScopeWrite(key=ScopeKey("session", "s"), base_version=0, segments=[])
    assert (write.snapshot_text, write.snapshot_bytes, write.segments_text) == (None, 0, "[]")
