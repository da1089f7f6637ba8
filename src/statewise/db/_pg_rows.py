"""PostgresDb's connection checks (no I/O beyond a socket poll)."""

from __future__ import annotations

import select
from typing import Any

import psycopg


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
