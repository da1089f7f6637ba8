"""Listing sessions page by page: the order, the cursor, and the page.

Sessions list most recently updated first, ties by session id (byte order). A page after
the first starts from a cursor: the (updated_at, session_id) of the last session of the
page before, so a page costs the same however deep it is (an offset costs what it skips).

SQL backends keep the order in an index without indexing `updated_at` itself, which every
commit moves (an index on it costs every commit a page written, and on PostgreSQL makes
the session row's update non-HOT). They index `listed_at`, `updated_at` truncated to
`LISTED_EVERY` seconds, which a commit changes only when it crosses into a new bucket.
Ordering by (listed_at DESC, updated_at DESC, session_id) is exactly the order above,
since listed_at only grows with updated_at; the index finds the first buckets, and only
the sessions of the buckets a page touches are sorted.

What a walk with cursors sees while sessions change: every session that exists for the
whole walk and is not updated during it appears exactly once, in order. A session
updated during the walk moves to the front: it appears at most once (it is not seen again
if it was already listed, and is missed if it was not). Sessions created during the walk
are not listed (they are at the front); deleted ones are simply not there.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from statewise.db.records import SessionRecord
from statewise.exceptions import InvalidInputError

LISTED_EVERY = 10
"""Seconds per listing bucket: a session's listing key changes at most once per this
long, however often it is committed to; a page sorts the sessions of the buckets it
touches (the sessions updated within the same 10 seconds)."""


@dataclass(frozen=True, kw_only=True)
class SessionPage:
    """One page of sessions and the cursor of the next page (None on the last)."""

    sessions: list[SessionRecord] = field(default_factory=list)
    next_cursor: str | None = None


def encode_cursor(record: SessionRecord) -> str:
    """The cursor that continues a listing after `record`: opaque to callers."""
    text = json.dumps([record.updated_at, record.session_id], separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[float, str]:
    """(updated_at, session_id) of the session a cursor continues after. A cursor that
    was not made by `encode_cursor` is the caller's error, said plainly."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        updated_at, session_id = json.loads(raw)
        if not isinstance(session_id, str) or isinstance(updated_at, bool):
            raise ValueError(cursor)
        updated_at = float(updated_at)
        if not math.isfinite(updated_at):
            raise ValueError(cursor)
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
        raise InvalidInputError(
            f"not a session listing cursor: {cursor[:80]!r} (pass a next_cursor as given)"
        ) from None
    return updated_at, session_id


def listed_bucket(updated_at: float) -> int:
    """`listed_at` of a session updated at `updated_at` (what the SQL computes)."""
    return int(updated_at // LISTED_EVERY) * LISTED_EVERY


def order_key(record: SessionRecord) -> tuple[float, bytes]:
    """Sort key of the listing order (ascending sorts most recently updated first)."""
    return -record.updated_at, record.session_id.encode()


def after_cursor(record: SessionRecord, cursor: tuple[float, str]) -> bool:
    """Whether `record` comes after the cursor's session in the listing order."""
    return order_key(record) > (-cursor[0], cursor[1].encode())


def page_of(records: Sequence[SessionRecord], limit: int) -> SessionPage:
    """A page from up to `limit + 1` listed sessions (one more tells there is a next)."""
    shown = list(records[:limit])
    more = len(records) > limit and bool(shown)
    return SessionPage(sessions=shown, next_cursor=encode_cursor(shown[-1]) if more else None)


def listed_in_memory(
    records: Iterable[SessionRecord],
    *,
    user_id: str | None,
    app_name: str | None,
    limit: int,
    offset: int,
    cursor: str | None,
) -> list[SessionRecord]:
    """The listing over sessions in memory: the reference every backend agrees with."""
    after = decode_cursor(cursor) if cursor is not None else None
    chosen = [
        r
        for r in records
        if (user_id is None or r.user_id == user_id)
        and (app_name is None or r.app_name == app_name)
        and (after is None or after_cursor(r, after))
    ]
    chosen.sort(key=order_key)
    return chosen[offset : offset + max(limit, 0)]


__all__ = [
    "LISTED_EVERY",
    "SessionPage",
    "decode_cursor",
    "encode_cursor",
    "listed_bucket",
    "listed_in_memory",
    "order_key",
    "page_of",
]
