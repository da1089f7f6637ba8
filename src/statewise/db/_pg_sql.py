"""PostgreSQL schema, migrations and the commit function, as SQL text.

JSON is stored as `text`, not `jsonb`: the server never looks inside it, and `text` keeps
what the client wrote byte for byte (object key order, `\\u0000` in strings, number
spelling), which is what SQLite does; `jsonb` would re-parse a 10 MB snapshot on every
write, reorder keys and refuse `\\u0000`. Large values are TOASTed (compressed) either way.

A commit is one call of `statewise_commit(...)`: one statement, hence one round trip and
one transaction. Lost compare-and-swaps raise SQLSTATE `SW409` with a JSON detail that the
client turns into `VersionConflict`; the whole call then rolls back.
"""

from __future__ import annotations

from statewise.db import _pg_retention, _pg_text, _sql_reads
from statewise.db._pg_group_sql import commit_group_function
from statewise.db.listing import LISTED_EVERY

CONFLICT_SQLSTATE = "SW409"


def migrations(s: str) -> list[str]:
    """Schema changes in order; the list index + 1 is the schema version. `s` is the
    quoted schema name. Never edit a released entry: append a new one."""
    return [
        f"""
        CREATE TABLE {s}.sessions (
            session_id text PRIMARY KEY,
            user_id text,
            app_name text,
            kind text NOT NULL,
            created_at double precision NOT NULL,
            updated_at double precision NOT NULL,
            last_seq bigint NOT NULL DEFAULT 0,
            metadata text NOT NULL DEFAULT '{{}}'
        );
        CREATE INDEX sessions_by_user ON {s}.sessions (user_id, updated_at);
        CREATE INDEX sessions_by_time ON {s}.sessions (updated_at);
        CREATE TABLE {s}.scopes (
            kind text NOT NULL,
            scope_id text NOT NULL,
            version bigint NOT NULL,
            snapshot_version bigint NOT NULL DEFAULT 0,
            snapshot_bytes bigint NOT NULL DEFAULT 0,
            tail_bytes bigint NOT NULL DEFAULT 0,
            updated_at double precision NOT NULL,
            PRIMARY KEY (kind, scope_id)
        );
        CREATE TABLE {s}.snapshots (
            kind text NOT NULL,
            scope_id text NOT NULL,
            version bigint NOT NULL,
            state text NOT NULL,
            PRIMARY KEY (kind, scope_id, version)
        );
        CREATE TABLE {s}.deltas (
            kind text NOT NULL,
            scope_id text NOT NULL,
            version bigint NOT NULL,
            session_id text,
            run_id text,
            step integer,
            segments text NOT NULL,
            conflicts text,
            created_at double precision NOT NULL,
            PRIMARY KEY (kind, scope_id, version)
        );
        CREATE TABLE {s}.events (
            session_id text NOT NULL,
            seq bigint NOT NULL,
            run_id text,
            type text NOT NULL,
            data text NOT NULL,
            created_at double precision NOT NULL,
            PRIMARY KEY (session_id, seq)
        );
        CREATE TABLE {s}.runs (
            id bigserial,
            session_id text NOT NULL,
            run_id text NOT NULL,
            status text NOT NULL,
            agent_name text,
            input text,
            content text,
            messages text NOT NULL DEFAULT '[]',
            metrics text NOT NULL DEFAULT '{{}}',
            error text,
            created_at double precision NOT NULL,
            updated_at double precision NOT NULL,
            PRIMARY KEY (session_id, run_id)
        );
        CREATE INDEX runs_by_time ON {s}.runs (session_id, created_at, id);
        """,
        _commit_function(s),
        # Commit ids: stored in the commit's own transaction, so a commit that is sent again
        # (its connection dropped, its reply was lost) is answered, not applied twice.
        f"""
        CREATE TABLE {s}.commits (
            session_id text NOT NULL,
            commit_id text NOT NULL,
            result text NOT NULL,
            created_at double precision NOT NULL,
            PRIMARY KEY (session_id, commit_id)
        );
        DROP FUNCTION {s}.statewise_commit(
            text, boolean, text, text, text, text, double precision, text, integer,
            text[], text[], bigint[], text[], text[], text[], bigint[], bigint[],
            text[], text[], text[], text, text, text, text, text, text, text, text,
            double precision);
        """
        + _commit_function_with_id(s),
        # Run leases: who is running (or resuming) a run, until when.
        f"""
        CREATE TABLE {s}.run_leases (
            session_id text NOT NULL,
            run_id text NOT NULL,
            owner text NOT NULL,
            expires_at double precision NOT NULL,
            PRIMARY KEY (session_id, run_id)
        );
        """,
        # Sessions listed by keyset (see `statewise.db.listing`): `listed_at` is
        # updated_at truncated to LISTED_EVERY seconds, a stored generated column. An
        # update that leaves it unchanged changes no indexed column, so it stays a HOT
        # update; the indexes on updated_at, which every commit moved, go.
        f"""
        ALTER TABLE {s}.sessions ADD COLUMN listed_at bigint
            GENERATED ALWAYS AS ({listed("updated_at")}) STORED;
        CREATE INDEX sessions_listed ON {s}.sessions (listed_at DESC, session_id COLLATE "C");
        CREATE INDEX sessions_of_user_listed
            ON {s}.sessions (user_id, listed_at DESC, session_id COLLATE "C");
        DROP INDEX IF EXISTS {s}.sessions_by_time;
        DROP INDEX IF EXISTS {s}.sessions_by_user;
        """,
        # Each compacted session's retained horizon (see `statewise.db.retention`).
        _pg_retention.migration(s),
        # A group commit of one session in one statement (see `_pg_group_sql`).
        commit_group_function(s),
    ]


def listed(updated_at: str) -> str:
    """SQL of the listing bucket of `updated_at` (an SQL expression): the column and every
    query use this, so they agree to the last bit."""
    return f"(floor({updated_at} / {LISTED_EVERY}) * {LISTED_EVERY})::bigint"


def _commit_function_with_id(s: str) -> str:
    """`statewise_commit` taking a commit id first and returning text: `N<result>` when it
    applied the commit, `R<result>` when the id had landed before (nothing applied)."""
    body = _commit_function(s)
    body = body.replace(
        "statewise_commit(\n    p_session_id text,",
        "statewise_commit(\n    p_commit_id text, p_session_id text,",
    )
    body = body.replace(") RETURNS bigint", ") RETURNS text")
    body = body.replace(
        "    i integer;\nBEGIN\n",
        "    i integer;\n    v_result text;\n    v_versions text := '';\nBEGIN\n"
        "    IF p_commit_id IS NOT NULL THEN\n"
        f"        INSERT INTO {s}.commits (session_id, commit_id, result, created_at)\n"
        "        VALUES (p_session_id, p_commit_id, '', p_now) ON CONFLICT DO NOTHING;\n"
        "        IF NOT FOUND THEN\n"
        f"            SELECT result INTO v_result FROM {s}.commits\n"
        "            WHERE session_id = p_session_id AND commit_id = p_commit_id;\n"
        "            RETURN 'R' || v_result;\n"
        "        END IF;\n"
        "    END IF;\n",
    )
    body = body.replace(
        "        INSERT INTO {s}.deltas (kind,".replace("{s}", s),
        "        v_versions := v_versions || '|' || w_kinds[i] || '=' || (w_bases[i] + 1);\n"
        "        INSERT INTO {s}.deltas (kind,".replace("{s}", s),
    )
    body = body.replace(
        "    RETURN v_last;\n",
        "    v_result := v_last || '|' || n_events || v_versions;\n"
        "    IF p_commit_id IS NOT NULL THEN\n"
        f"        UPDATE {s}.commits SET result = v_result\n"
        "        WHERE session_id = p_session_id AND commit_id = p_commit_id;\n"
        "    END IF;\n"
        "    RETURN 'N' || v_result;\n",
    )
    return body


def _commit_function(s: str) -> str:
    return f"""
CREATE OR REPLACE FUNCTION {s}.statewise_commit(
    p_session_id text, p_create boolean, p_user_id text, p_app_name text, p_kind text,
    p_metadata text, p_now double precision, p_run_id text, p_step integer,
    w_kinds text[], w_ids text[], w_bases bigint[], w_segments text[], w_conflicts text[],
    w_snapshots text[], w_delta_bytes bigint[], w_snapshot_bytes bigint[],
    e_run_ids text[], e_types text[], e_data text[],
    r_run_id text, r_status text, r_agent_name text, r_input text, r_content text,
    r_messages text, r_metrics text, r_error text, r_created_at double precision
) RETURNS bigint
LANGUAGE plpgsql AS $fn$
DECLARE
    n_events integer := coalesce(array_length(e_types, 1), 0);
    v_last bigint;
    v_actual bigint;
    i integer;
BEGIN
    IF p_create THEN
        INSERT INTO {s}.sessions (session_id, user_id, app_name, kind, created_at,
                                  updated_at, last_seq, metadata)
        VALUES (p_session_id, p_user_id, p_app_name, p_kind, p_now, p_now, n_events, p_metadata)
        ON CONFLICT (session_id) DO NOTHING;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = '{CONFLICT_SQLSTATE}',
                MESSAGE = 'statewise: session already exists',
                DETAIL = json_build_object('scope', 'session', 'id', p_session_id,
                                           'expected', 0, 'actual', NULL)::text;
        END IF;
        v_last := n_events;
    ELSE
        UPDATE {s}.sessions SET last_seq = last_seq + n_events, updated_at = p_now
        WHERE session_id = p_session_id RETURNING last_seq INTO v_last;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = '{CONFLICT_SQLSTATE}',
                MESSAGE = 'statewise: session does not exist',
                DETAIL = json_build_object('scope', 'session', 'id', p_session_id,
                                           'expected', 1, 'actual', NULL)::text;
        END IF;
    END IF;
    FOR i IN 1 .. coalesce(array_length(w_kinds, 1), 0) LOOP
        IF w_bases[i] = 0 THEN
            INSERT INTO {s}.scopes (kind, scope_id, version, updated_at)
            VALUES (w_kinds[i], w_ids[i], 0, p_now) ON CONFLICT DO NOTHING;
        END IF;
        UPDATE {s}.scopes
        SET version = w_bases[i] + 1, tail_bytes = tail_bytes + w_delta_bytes[i],
            updated_at = p_now
        WHERE kind = w_kinds[i] AND scope_id = w_ids[i] AND version = w_bases[i];
        IF NOT FOUND THEN
            SELECT version INTO v_actual FROM {s}.scopes
            WHERE kind = w_kinds[i] AND scope_id = w_ids[i];
            RAISE EXCEPTION USING ERRCODE = '{CONFLICT_SQLSTATE}',
                MESSAGE = 'statewise: version conflict',
                DETAIL = json_build_object('scope', w_kinds[i], 'id', w_ids[i],
                                           'expected', w_bases[i], 'actual', v_actual)::text;
        END IF;
        INSERT INTO {s}.deltas (kind, scope_id, version, session_id, run_id, step,
                                segments, conflicts, created_at)
        VALUES (w_kinds[i], w_ids[i], w_bases[i] + 1, p_session_id, p_run_id, p_step,
                w_segments[i], w_conflicts[i], p_now);
        IF w_snapshots[i] IS NOT NULL THEN
            INSERT INTO {s}.snapshots (kind, scope_id, version, state)
            VALUES (w_kinds[i], w_ids[i], w_bases[i] + 1, w_snapshots[i]);
            UPDATE {s}.scopes
            SET snapshot_version = w_bases[i] + 1, snapshot_bytes = w_snapshot_bytes[i],
                tail_bytes = 0
            WHERE kind = w_kinds[i] AND scope_id = w_ids[i];
        END IF;
    END LOOP;
    IF n_events > 0 THEN
        INSERT INTO {s}.events (session_id, seq, run_id, type, data, created_at)
        SELECT p_session_id, v_last - n_events + x.ord, x.run_id, x.type, x.data, p_now
        FROM unnest(e_run_ids, e_types, e_data) WITH ORDINALITY AS x(run_id, type, data, ord);
    END IF;
    IF r_run_id IS NOT NULL THEN
        INSERT INTO {s}.runs (session_id, run_id, status, agent_name, input, content,
                              messages, metrics, error, created_at, updated_at)
        VALUES (p_session_id, r_run_id, r_status, r_agent_name, r_input, r_content,
                r_messages, r_metrics, r_error, coalesce(r_created_at, p_now), p_now)
        ON CONFLICT (session_id, run_id) DO UPDATE SET
            status = excluded.status, content = excluded.content,
            messages = excluded.messages, metrics = excluded.metrics,
            error = excluded.error, updated_at = excluded.updated_at;
    END IF;
    RETURN v_last;
END
$fn$;
"""


def commit_call(s: str) -> str:
    """The arrays go in binary (`%b`): psycopg's text format escapes every element with a
    regular expression, one substitution per quote in the JSON, which cost more client
    CPU than the rest of the call; binary sends each element as it is, after its length."""
    return (
        f"SELECT {s}.statewise_commit(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, "
        f"%b::text[], %b::text[], %b::bigint[], %b::text[], %b::text[], %b::text[], "
        f"%b::bigint[], %b::bigint[], %b::text[], %b::text[], %b::text[], "
        f"%s, %s, %s, %s, %s, %s, %s, %s, %s::double precision)"
    )


def probe_query(s: str) -> str:
    """The session row (all NULL when missing) and the version of each scope, in order."""
    return f"""
        SELECT se.session_id, se.user_id, se.app_name, se.kind, se.created_at, se.updated_at,
               se.last_seq, se.metadata, v.versions
        FROM (SELECT 1) AS one
        LEFT JOIN {s}.sessions se ON se.session_id = %s
        CROSS JOIN LATERAL (
            SELECT array_agg(coalesce(sc.version, 0) ORDER BY k.ord) AS versions
            FROM unnest(%s::text[], %s::text[]) WITH ORDINALITY AS k(kind, scope_id, ord)
            LEFT JOIN {s}.scopes sc ON sc.kind = k.kind AND sc.scope_id = k.scope_id
        ) AS v
    """


def commit_new_call(s: str) -> str:
    """`probe_query`, then `statewise_commit` only where it found no session and every
    scope at version 0 (`BaseDb.commit_new`): one statement, one round trip. Its row is
    the probe's, then the commit's reply (NULL: not called). The commit's parameters come
    first (the call comes first in the text), then the probe's."""
    call = commit_call(s).removeprefix("SELECT ")
    return (
        f"SELECT p.*, CASE WHEN p.session_id IS NULL AND 0 = ALL(p.versions) THEN {call} END "
        f"FROM ({probe_query(s)}) AS p"
    )


def probe_tails_query(s: str) -> str:
    """`probe_query`, plus the deltas of each scope after a given version (and up to a
    given one) as one JSON array of [ordinal, version, session_id, run_id, step,
    segments, conflicts, created_at]: one statement, so the versions and the deltas come
    from one snapshot."""
    return f"""
        SELECT p.*, t.tails
        FROM ({probe_query(s)}) AS p
        CROSS JOIN LATERAL (
            SELECT coalesce(json_agg(json_build_array(k.ord, dl.version, dl.session_id,
                       dl.run_id, dl.step, dl.segments, dl.conflicts, dl.created_at)
                       ORDER BY k.ord, dl.version), '[]'::json) AS tails
            FROM unnest(%s::text[], %s::text[], %s::bigint[], %s::bigint[])
                 WITH ORDINALITY AS k(kind, scope_id, after, upto, ord)
            JOIN {s}.deltas dl ON dl.kind = k.kind AND dl.scope_id = k.scope_id
                 AND dl.version > k.after AND dl.version <= k.upto
        ) AS t
    """


def load_query(s: str) -> str:
    """Each existing scope's version, snapshot and the deltas after it: one statement, so
    one consistent snapshot of the database for all scopes."""
    return f"""
        SELECT sc.kind, sc.scope_id, sc.version, sc.snapshot_version, sc.snapshot_bytes,
               sc.tail_bytes, sn.state, d.versions, d.segments
        FROM unnest(%s::text[], %s::text[]) AS k(kind, scope_id)
        JOIN {s}.scopes sc ON sc.kind = k.kind AND sc.scope_id = k.scope_id
        LEFT JOIN {s}.snapshots sn ON sn.kind = sc.kind AND sn.scope_id = sc.scope_id
            AND sn.version = sc.snapshot_version
        CROSS JOIN LATERAL (
            SELECT array_agg(dl.version ORDER BY dl.version) AS versions,
                   array_agg(dl.segments ORDER BY dl.version) AS segments
            FROM {s}.deltas dl
            WHERE dl.kind = sc.kind AND dl.scope_id = sc.scope_id
              AND dl.version > sc.snapshot_version AND dl.version <= sc.version
        ) AS d
    """


def read_query(s: str) -> str:
    """`read_scopes` in one statement: per scope (in order) the session row's columns
    (NULL when missing), the scope's version and, for a scope not at the version the
    reader holds (-1: none), what `load_query` reads of it."""
    return f"""
        SELECT se.session_id, se.user_id, se.app_name, se.kind, se.created_at, se.updated_at,
               se.last_seq, se.metadata, coalesce(sc.version, 0), k.held,
               sc.snapshot_version, sc.snapshot_bytes, sc.tail_bytes, sn.state,
               d.versions, d.segments
        FROM unnest(%s::text[], %s::text[], %s::bigint[]) WITH ORDINALITY
             AS k(kind, scope_id, held, ord)
        LEFT JOIN {s}.sessions se ON se.session_id = %s
        LEFT JOIN {s}.scopes sc ON sc.kind = k.kind AND sc.scope_id = k.scope_id
        LEFT JOIN {s}.snapshots sn ON se.session_id IS NOT NULL AND sc.version <> k.held
            AND sn.kind = sc.kind AND sn.scope_id = sc.scope_id
            AND sn.version = sc.snapshot_version
        LEFT JOIN LATERAL (
            SELECT array_agg(dl.version ORDER BY dl.version) AS versions,
                   array_agg(dl.segments ORDER BY dl.version) AS segments
            FROM {s}.deltas dl
            WHERE se.session_id IS NOT NULL AND sc.version <> k.held
              AND dl.kind = sc.kind AND dl.scope_id = sc.scope_id
              AND dl.version > sc.snapshot_version AND dl.version <= sc.version
        ) AS d ON true
        ORDER BY k.ord
    """


def dialect(s: str) -> _sql_reads.Dialect:
    """How the statements PostgreSQL shares with SQLite are spelt in schema `s` (a quoted
    name): session ids compare byte by byte, as SQLite compares them."""
    return _sql_reads.Dialect(
        prefix=f"{s}.",
        p="%s",
        row_id="id",
        listed=listed,
        cursor_time="%s::double precision",
        session_order='session_id COLLATE "C"',
        greatest="greatest",
        arrays=True,
        lock=" FOR UPDATE",
        text=_pg_text.decode,
    )


SESSION_COLUMNS = _sql_reads.SESSION_COLUMNS
RUN_COLUMNS = _sql_reads.RUN_COLUMNS
