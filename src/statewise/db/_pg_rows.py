"""PostgresDb's row decoding and connection checks (no I/O beyond a socket poll)."""

from __future__ import annotations

import select
from collections.abc import Sequence
from typing import Any

import psycopg

from statewise.db import _codec, _pg_text
from statewise.db.records import RunRecord, SessionRecord
from statewise.exceptions import CorruptRecordError


def session_from_row(row: Sequence[Any]) -> SessionRecord:
    try:
        metadata = _codec.loads(row[7]) if row[7] else {}
    except ValueError as exc:
        raise CorruptRecordError(f"session {row[0]!r}: metadata is not JSON") from exc
    return SessionRecord(
        session_id=row[0],
        user_id=row[1],
        app_name=row[2],
        kind=row[3],
        created_at=row[4],
        updated_at=row[5],
        last_seq=row[6],
        metadata=metadata,
    )


def run_from_row(session_id: str, row: Sequence[Any]) -> RunRecord:
    try:
        messages = _codec.loads(row[5])
        metrics = _codec.loads(row[6])
    except ValueError as exc:
        raise CorruptRecordError(
            f"session {session_id!r}: run {row[0]!r} is not valid JSON"
        ) from exc
    return RunRecord(
        session_id=session_id,
        run_id=row[0],
        status=row[1],
        agent_name=row[2],
        input=_pg_text.decode(row[3]),
        content=_pg_text.decode(row[4]),
        messages=messages,
        metrics=metrics,
        error=_pg_text.decode(row[7]),
        created_at=row[8],
        updated_at=row[9],
    )


def is_dead(conn: psycopg.Connection[Any]) -> bool:
    """True when an idle connection is closed, or the server sent something on it
    (a termination notice, or EOF): a poll with no timeout, no round trip."""
    if conn.closed or conn.broken:
        return True
    # poll, not select: select cannot watch a descriptor numbered 1024 or more (it raises
    # ValueError), and a process with that many files open would find every connection
    # "dead" and close it.
    try:
        poller = select.poll()
        poller.register(conn.fileno(), select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError, psycopg.Error):
        return True


def reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
