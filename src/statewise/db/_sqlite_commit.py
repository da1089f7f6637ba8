"""A SQLite commit as one statement: the common commit, sent as rows of one INSERT.

A commit made of separate statements (BEGIN, the session row, each scope, its delta,
the events, the run, COMMIT) gives up Python's interpreter lock around each of them, and
must win it back before the next one. In a server, whose event loop holds that lock
whenever it is busy, each win cost tens of microseconds, so SQLite's one writer thread
spent most of a commit waiting for the lock rather than writing. One INSERT into a
temporary view whose INSTEAD OF triggers do all the writes runs, with its implicit
transaction and the sync that makes it durable, inside one call into SQLite: the lock is
given up once per commit.

Only the usual commit goes this way: an existing session, a commit id newer than any the
session has landed (or none), and no value large enough to need `_insert_rows`' own
handling. When a trigger finds anything else (a version moved, the session is gone, the
id is not new), it aborts the statement, which undoes all of it, and the caller commits
through the statement-by-statement path, which sorts out what happened and says so.

The view's columns are `op` and eleven values whose meaning depends on `op`:

| op | c1 | c2 | c3 | c4 | c5 | c6 | c7 | c8 | c9 | c10 | c11 |
|---|---|---|---|---|---|---|---|---|---|---|---|
| 0 session | session_id | events | now | commit id | result tail for a `commits` row | last sequence number expected, or -1 | | | | | |
| 1 scope write | kind | scope_id | base version | delta bytes | session_id | run_id | step | segments | conflicts | snapshot | now |
| 2 event | session_id | events after this one | run_id | type | data | now | commit id | result tail | | | |
| 3 run | session_id | run_id | status | agent_name | input | content | messages | metrics | error | created_at | now |

The session row comes first: it advances the session and notes its last sequence number
in a one-row temporary table, which the events are numbered back from. The caller says
which number it expects the session to be at before the commit (where its own last commit
to the session left it), so it need not read the number back: the trigger aborts if the
session is elsewhere (`SEQUENCE_MOVED`: another writer came between), and the caller
sends the statement again expecting nothing (-1), then reads the number back.

No value but the run's is None: the sqlite3 module binds None through its adapter lookup,
several microseconds each, which mattered at some twenty values per commit. An absent id,
text or result is '' instead (no id, JSON text or result is empty), an absent step -1, and
unused columns 0; the triggers turn them back into NULL.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from statewise.db import _codec
from statewise.db.records import Commit, NewEvent, ScopeWrite, commit_result_tail

WIDTH = 12
"""Values per row: `op` and c1..c11."""

AT_SEQ = 6
"""Where the session row's expected last sequence number (c6) is in the values."""

MAX_ROWS = 64
"""A commit with more rows than this (many events) takes the statement-by-statement path,
so the INSERTs cached per row count stay few."""

NEEDS_FULL_PATH = "statewise: this commit needs the full path"
"""The message of the triggers' abort: not an error, a hand-over to the other path."""

SEQUENCE_MOVED = "statewise: another writer moved the session on"
"""The abort when the sequence number the caller expected was not the session's: another
writer came between; the caller sends the statement again without expecting one."""


def temp_schema(p: str) -> str:
    """The temporary view, triggers and table, created on each connection that commits."""
    session = f"""
        UPDATE {p}sessions SET last_seq = last_seq + NEW.c2, updated_at = NEW.c3,
            max_commit = CASE WHEN NEW.c4 = '' THEN max_commit ELSE NEW.c4 END
        WHERE session_id = NEW.c1 AND (NEW.c4 = '' OR max_commit < NEW.c4);
        SELECT RAISE(ABORT, '{NEEDS_FULL_PATH}') WHERE changes() = 0;
        UPDATE {p}commit_out
            SET last_seq = (SELECT last_seq FROM {p}sessions WHERE session_id = NEW.c1);
        SELECT RAISE(ABORT, '{SEQUENCE_MOVED}') FROM {p}commit_out
            WHERE NEW.c6 >= 0 AND last_seq != NEW.c6 + NEW.c2;
        INSERT INTO {p}commits (session_id, commit_id, result, created_at)
            SELECT NEW.c1, NEW.c4, last_seq || NEW.c5, NEW.c3 FROM {p}commit_out
            WHERE NEW.c5 != '';
    """
    write = f"""
        INSERT OR IGNORE INTO {p}scopes (kind, scope_id, version, updated_at)
            SELECT NEW.c1, NEW.c2, 0, NEW.c11 WHERE NEW.c3 = 0;
        UPDATE {p}scopes SET version = NEW.c3 + 1, updated_at = NEW.c11,
            tail_bytes = CASE WHEN NEW.c10 = '' THEN tail_bytes + NEW.c4 ELSE 0 END,
            snapshot_version = CASE WHEN NEW.c10 = '' THEN snapshot_version
                ELSE NEW.c3 + 1 END,
            snapshot_bytes = CASE WHEN NEW.c10 = '' THEN snapshot_bytes
                ELSE length(NEW.c10) END
        WHERE kind = NEW.c1 AND scope_id = NEW.c2 AND version = NEW.c3;
        SELECT RAISE(ABORT, '{NEEDS_FULL_PATH}') WHERE changes() = 0;
        INSERT INTO {p}deltas (kind, scope_id, version, session_id, run_id, step, segments,
            conflicts, created_at)
            VALUES (NEW.c1, NEW.c2, NEW.c3 + 1, NULLIF(NEW.c5, ''), NULLIF(NEW.c6, ''),
                NULLIF(NEW.c7, -1), NEW.c8, NULLIF(NEW.c9, ''), NEW.c11);
        INSERT INTO {p}snapshots (kind, scope_id, version, state)
            SELECT NEW.c1, NEW.c2, NEW.c3 + 1, NEW.c10 WHERE NEW.c10 != '';
    """
    event = f"""
        INSERT INTO {p}events (session_id, seq, run_id, type, data, created_at, commit_id,
            commit_result)
            SELECT NEW.c1, last_seq - NEW.c2, NULLIF(NEW.c3, ''), NEW.c4, NEW.c5, NEW.c6,
                NULLIF(NEW.c7, ''), CASE WHEN NEW.c8 = '' THEN NULL ELSE last_seq || NEW.c8 END
            FROM {p}commit_out;
    """
    run = f"""
        INSERT INTO {p}runs (session_id, run_id, status, agent_name, input, content,
            messages, metrics, error, created_at, updated_at)
            VALUES (NEW.c1, NEW.c2, NEW.c3, NEW.c4, NEW.c5, NEW.c6, NEW.c7, NEW.c8, NEW.c9,
                NEW.c10, NEW.c11)
            ON CONFLICT (session_id, run_id) DO UPDATE SET status = excluded.status,
                content = excluded.content, messages = excluded.messages,
                metrics = excluded.metrics, error = excluded.error,
                updated_at = excluded.updated_at;
    """
    values = ", ".join(f"c{i}" for i in range(1, WIDTH))
    triggers = "".join(
        f"CREATE TEMP TRIGGER IF NOT EXISTS {p}commit_in_{name} INSTEAD OF INSERT "
        f"ON {p}commit_in WHEN NEW.op = {op} BEGIN {body} END;\n"
        for op, (name, body) in enumerate(
            (("session", session), ("write", write), ("event", event), ("run", run))
        )
    )
    return (
        f"CREATE TEMP VIEW IF NOT EXISTS {p}commit_in (op, {values}) AS "
        f"SELECT {', '.join(['NULL'] * WIDTH)} WHERE 0;\n"
        f"CREATE TEMP TABLE IF NOT EXISTS {p}commit_out (last_seq INTEGER NOT NULL);\n"
        f"INSERT INTO {p}commit_out SELECT 0 WHERE NOT EXISTS "
        f"(SELECT 1 FROM {p}commit_out);\n" + triggers
    )


@functools.lru_cache(maxsize=MAX_ROWS)
def insert_sql(p: str, rows: int) -> str:
    row = "(" + ",".join("?" * WIDTH) + ")"
    return f"INSERT INTO {p}commit_in VALUES " + ",".join([row] * rows)


def commit_rows(
    commit: Commit,
    now: float,
    event_text: Callable[[NewEvent, Sequence[ScopeWrite]], str],
    longest: int,
    at_seq: int,
) -> list[Any] | None:
    """The INSERT's values for `commit`, flat; None if it must take the full path (a new
    session, too many rows, or a text longer than `longest`). `event_text` is an event's
    data as stored; `at_seq` the session's last sequence number before the commit, when
    known, else -1."""
    if commit.create_session:
        return None
    session_id = commit.session.session_id
    n_events = len(commit.events)
    if 1 + len(commit.writes) + n_events + 1 > MAX_ROWS:
        return None
    versions = {write.key: write.base_version + 1 for write in commit.writes}
    tail = commit_result_tail(versions, n_events) if commit.commit_id else ""
    values: list[Any] = [
        0, session_id, n_events, now, commit.commit_id,
        tail if tail and n_events == 0 else "", at_seq, 0, 0, 0, 0, 0,
    ]  # fmt: skip
    for write in commit.writes:
        segments = write.segments_text
        conflicts = _codec.dumps(write.conflicts) if write.conflicts else ""
        snapshot = write.snapshot_text or ""
        if len(segments) > longest or len(snapshot) > longest or len(conflicts) > longest:
            return None
        values += (
            1, write.key.kind, write.key.id, write.base_version, write.delta_bytes,
            session_id, commit.run_id or "", -1 if commit.step is None else commit.step,
            segments, conflicts, snapshot, now,
        )  # fmt: skip
    last = n_events - 1
    for i, event in enumerate(commit.events):
        text = event_text(event, commit.writes)
        if len(text) > longest:
            return None
        with_id = i == last and bool(commit.commit_id)
        values += (
            2, session_id, last - i, event.run_id or "", event.type, text, now,
            commit.commit_id if with_id else "", tail if with_id else "", 0, 0, 0,
        )  # fmt: skip
    if commit.run is not None:
        run = commit.run
        values += (
            3, run.session_id, run.run_id, run.status, run.agent_name, run.input,
            run.content, _codec.dumps(run.messages), _codec.dumps(run.metrics), run.error,
            run.created_at or now, now,
        )  # fmt: skip
    return values
