"""Conformance cases on listing sessions by cursor: the same order as the offset listing,
every filter, ties and bucket edges, and what a walk sees while sessions change (see
`statewise.db.listing` for the promise)."""

from __future__ import annotations

import time

from statewise.db.base import BaseDb
from statewise.db.listing import LISTED_EVERY
from statewise.db.records import SessionRecord
from statewise.db.testing.base import Harness
from statewise.db.testing.cases import CASES, case, setop, write
from statewise.exceptions import InvalidInputError

__all__ = ["CASES"]


def walk(
    db: BaseDb, limit: int, *, user_id: str | None = None, app_name: str | None = None
) -> list[str]:
    """Every session id of a listing, page by page through the cursors."""
    seen: list[str] = []
    cursor = None
    for _ in range(1000):
        page = db.list_session_page(user_id=user_id, app_name=app_name, limit=limit, cursor=cursor)
        assert len(page.sessions) <= limit
        seen += [s.session_id for s in page.sessions]
        if page.next_cursor is None:
            return seen
        assert page.sessions, "a page with a next cursor has sessions"
        cursor = page.next_cursor
    raise AssertionError("the walk did not end")


def imported(db: BaseDb, sid: str, updated_at: float, user_id: str, app_name: str) -> None:
    db.import_records(
        SessionRecord(
            session_id=sid,
            user_id=user_id,
            app_name=app_name,
            created_at=updated_at,
            updated_at=updated_at,
        ),
        [],
        [],
        [],
    )


@case
def cursor_pages_follow_the_listing_order_with_every_filter(h: Harness) -> None:
    db = h.db
    for i in range(11):
        write(db, f"s{i}", user_id="alice" if i % 3 else "bob", app_name="a" if i < 6 else "b")
    write(db, "s2", setop("x", 1))
    for filters in (
        {},
        {"user_id": "alice"},
        {"app_name": "b"},
        {"user_id": "alice", "app_name": "a"},
    ):
        user, app = filters.get("user_id"), filters.get("app_name")
        listed = [s.session_id for s in db.list_sessions(user_id=user, app_name=app, limit=100)]
        for limit in (1, 3, 4, 100):
            assert walk(db, limit, user_id=user, app_name=app) == listed, (filters, limit)
    assert walk(db, 5, user_id="nobody") == []
    page = db.list_session_page(limit=4)
    assert [s.session_id for s in page.sessions] == ["s2", "s10", "s9", "s8"]
    after = db.list_sessions(limit=2, offset=1, cursor=page.next_cursor)
    assert [s.session_id for s in after] == ["s6", "s5"]  # an offset counts from the cursor
    assert db.list_session_page(limit=0).sessions == []
    for bad in ("not a cursor", "", "WzEsMl0", "e30"):
        try:
            db.list_sessions(cursor=bad)
        except InvalidInputError:
            continue
        raise AssertionError(f"{bad!r} was taken for a cursor")


@case
def cursor_pages_break_ties_by_id_across_bucket_edges(h: Harness) -> None:
    """Sessions updated at the very same time list by id (byte order), and a page that
    ends inside a tie, or at the edge of a listing bucket, goes on exactly after it."""
    db = h.db
    edge = 1_700_000_000.0 + LISTED_EVERY * 7
    times = {
        "t-b": edge,
        "t-a": edge,
        "t-\u00e9": edge,
        "t-z": edge,
        "t-c": edge - 1e-6,
        "t-d": edge + 1e-6,
        "t-e": edge - LISTED_EVERY,
        "t-f": edge + LISTED_EVERY - 1e-6,
        "t-g": edge - 0.5,
    }
    for sid, at in times.items():
        imported(db, sid, at, "u1", "app")
    expected = sorted(times, key=lambda sid: (-times[sid], sid.encode()))
    assert [s.session_id for s in db.list_sessions()] == expected
    assert expected[2:6] == ["t-a", "t-b", "t-z", "t-\u00e9"]
    for limit in (1, 2, 3, 5):
        assert walk(db, limit) == expected
        assert walk(db, limit, user_id="u1", app_name="app") == expected


@case
def a_cursor_walk_while_sessions_change_lists_each_unchanged_session_once(h: Harness) -> None:
    """Sessions updated, created and deleted between pages: each session left alone
    appears exactly once, an updated one at most once, nothing twice, a new one not at
    all (it is at the front), a deleted one not at all."""
    db = h.db
    for i in range(12):
        write(db, f"w{i:02d}", user_id="u1")
        time.sleep(0.002)
    order = [s.session_id for s in db.list_sessions(limit=100)]
    seen: list[str] = []
    page = db.list_session_page(limit=4)
    seen += [s.session_id for s in page.sessions]
    listed_then_updated, unlisted_then_updated = order[1], order[9]
    deleted = order[6]
    write(db, listed_then_updated, setop("x", 1))
    write(db, unlisted_then_updated, setop("x", 1))
    write(db, "w-new", user_id="u1")
    assert db.delete_session(deleted)
    cursor = page.next_cursor
    while cursor is not None:
        page = db.list_session_page(limit=4, cursor=cursor)
        seen += [s.session_id for s in page.sessions]
        cursor = page.next_cursor
    assert len(seen) == len(set(seen))
    left_alone = [s for s in order if s not in (unlisted_then_updated, deleted)]
    assert [s for s in seen if s in left_alone] == left_alone
    assert "w-new" not in seen and deleted not in seen
    assert [s.session_id for s in db.list_sessions(limit=3)] == [
        "w-new",
        unlisted_then_updated,
        listed_then_updated,
    ]
