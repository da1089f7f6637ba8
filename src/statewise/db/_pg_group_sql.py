"""`statewise_commit_group`: a group commit of one session in one statement.

The commits of a group (`BaseDb.commit_rebased_together`) go to the server as one call:
per-commit arrays (`c_*`), and the writes, events and runs of all of them flattened in
order (`w_*`, `e_*`, `r_*`), each commit taking the next `c_writes[i]` writes and
`c_events[i]` events. The session's row is locked once, each commit is checked and
applied in turn, and the row is updated once at the end: one round trip, one row lock
and one new row version for the whole group.

Each commit keeps its own outcome, as its own `statewise_commit` call would: its reply is
`N<result>` (applied), `R<result>` (its commit id had landed before: nothing applied) or
`C<detail>` (a lost compare-and-swap, the detail `statewise_commit` raises with: nothing
of it applied) or `S` (skipped). A commit's scope rows are locked and checked before it
writes anything, so a conflict never leaves half a commit behind; a scope row it created
to lock (a scope's first version) goes again.

Once a commit is not applied (`C`, or `R`: what it wrote is not what the client built),
every commit after it is skipped: each was rebased onto it on the client, as if it had
landed, and so must not land on what did (its writer's tree holds a delta the database
does not, even where its own compare-and-swap would pass).
"""

from __future__ import annotations

CONFLICT_DETAIL = (
    "json_build_object('scope', {kind}, 'id', {id}, 'expected', {expected}, "
    "'actual', {actual})::text"
)


def commit_group_function(s: str) -> str:
    session_conflict = CONFLICT_DETAIL.format(
        kind="'session'", id="p_session_id", expected="{expected}", actual="NULL"
    )
    scope_conflict = CONFLICT_DETAIL.format(
        kind="w_kinds[j]", id="w_ids[j]", expected="w_bases[j]", actual="v_actual"
    )
    return f"""
CREATE OR REPLACE FUNCTION {s}.statewise_commit_group(
    p_session_id text, p_now double precision, p_user_id text, p_app_name text,
    p_kind text, p_metadata text,
    c_ids text[], c_create bigint[], c_run_ids text[], c_steps bigint[],
    c_writes bigint[], c_events bigint[],
    w_kinds text[], w_ids text[], w_bases bigint[], w_segments text[], w_conflicts text[],
    w_snapshots text[], w_delta_bytes bigint[], w_snapshot_bytes bigint[],
    e_run_ids text[], e_types text[], e_data text[],
    r_run_ids text[], r_status text[], r_agent_names text[], r_inputs text[],
    r_contents text[], r_messages text[], r_metrics text[], r_errors text[],
    r_created_at double precision[]
) RETURNS text[]
LANGUAGE plpgsql AS $fn$
DECLARE
    replies text[] := '{{}}';
    v_exists boolean;
    v_last bigint;
    v_moved boolean := false;
    v_skip boolean := false;
    w0 integer := 0;
    e0 integer := 0;
    w1 integer;
    n_ev integer;
    i integer;
    j integer;
    v_actual bigint;
    v_bad text;
    v_made text[];
    v_result text;
    v_versions text;
BEGIN
    SELECT last_seq INTO v_last FROM {s}.sessions
    WHERE session_id = p_session_id FOR NO KEY UPDATE;
    v_exists := FOUND;
    FOR i IN 1 .. coalesce(array_length(c_ids, 1), 0) LOOP
        w1 := w0 + c_writes[i];
        n_ev := c_events[i];
        v_bad := NULL;
        v_made := '{{}}';
        IF v_skip THEN
            replies := replies || 'S'::text;
            w0 := w1;
            e0 := e0 + n_ev;
            CONTINUE;
        END IF;
        v_skip := true;  -- (until it applies)
        IF c_ids[i] IS NOT NULL THEN
            INSERT INTO {s}.commits (session_id, commit_id, result, created_at)
            VALUES (p_session_id, c_ids[i], '', p_now) ON CONFLICT DO NOTHING;
            IF NOT FOUND THEN
                SELECT result INTO v_result FROM {s}.commits
                WHERE session_id = p_session_id AND commit_id = c_ids[i];
                replies := replies || ('R' || v_result);
                w0 := w1;
                e0 := e0 + n_ev;
                CONTINUE;
            END IF;
        END IF;
        IF c_create[i] = 1 AND v_exists THEN
            v_bad := {session_conflict.format(expected="0")};
        ELSIF c_create[i] = 0 AND NOT v_exists THEN
            v_bad := {session_conflict.format(expected="1")};
        END IF;
        IF v_bad IS NULL THEN
            FOR j IN w0 + 1 .. w1 LOOP
                SELECT version INTO v_actual FROM {s}.scopes
                WHERE kind = w_kinds[j] AND scope_id = w_ids[j] FOR UPDATE;
                IF NOT FOUND AND w_bases[j] = 0 THEN
                    INSERT INTO {s}.scopes (kind, scope_id, version, updated_at)
                    VALUES (w_kinds[j], w_ids[j], 0, p_now) ON CONFLICT DO NOTHING;
                    IF FOUND THEN
                        v_made := v_made || w_kinds[j];
                    END IF;
                    SELECT version INTO v_actual FROM {s}.scopes
                    WHERE kind = w_kinds[j] AND scope_id = w_ids[j] FOR UPDATE;
                END IF;
                IF v_actual IS DISTINCT FROM w_bases[j] THEN
                    v_bad := {scope_conflict};
                    EXIT;
                END IF;
            END LOOP;
        END IF;
        IF v_bad IS NOT NULL THEN
            IF c_ids[i] IS NOT NULL THEN
                DELETE FROM {s}.commits
                WHERE session_id = p_session_id AND commit_id = c_ids[i];
            END IF;
            FOR j IN w0 + 1 .. w1 LOOP
                IF w_kinds[j] = ANY (v_made) THEN
                    DELETE FROM {s}.scopes
                    WHERE kind = w_kinds[j] AND scope_id = w_ids[j] AND version = 0;
                END IF;
            END LOOP;
            replies := replies || ('C' || v_bad);
            w0 := w1;
            e0 := e0 + n_ev;
            CONTINUE;
        END IF;
        IF c_create[i] = 1 THEN
            INSERT INTO {s}.sessions (session_id, user_id, app_name, kind, created_at,
                                      updated_at, last_seq, metadata)
            VALUES (p_session_id, p_user_id, p_app_name, p_kind, p_now, p_now, 0, p_metadata);
            v_exists := true;
            v_last := 0;
        END IF;
        v_versions := '';
        FOR j IN w0 + 1 .. w1 LOOP
            v_versions := v_versions || '|' || w_kinds[j] || '=' || (w_bases[j] + 1);
            UPDATE {s}.scopes
            SET version = w_bases[j] + 1, tail_bytes = tail_bytes + w_delta_bytes[j],
                updated_at = p_now
            WHERE kind = w_kinds[j] AND scope_id = w_ids[j];
            INSERT INTO {s}.deltas (kind, scope_id, version, session_id, run_id, step,
                                    segments, conflicts, created_at)
            VALUES (w_kinds[j], w_ids[j], w_bases[j] + 1, p_session_id, c_run_ids[i],
                    c_steps[i], w_segments[j], w_conflicts[j], p_now);
            IF w_snapshots[j] IS NOT NULL THEN
                INSERT INTO {s}.snapshots (kind, scope_id, version, state)
                VALUES (w_kinds[j], w_ids[j], w_bases[j] + 1, w_snapshots[j]);
                UPDATE {s}.scopes
                SET snapshot_version = w_bases[j] + 1, snapshot_bytes = w_snapshot_bytes[j],
                    tail_bytes = 0
                WHERE kind = w_kinds[j] AND scope_id = w_ids[j];
            END IF;
        END LOOP;
        IF n_ev > 0 THEN
            INSERT INTO {s}.events (session_id, seq, run_id, type, data, created_at)
            SELECT p_session_id, v_last + x.ord, x.run_id, x.type, x.data, p_now
            FROM unnest(e_run_ids[e0 + 1 : e0 + n_ev], e_types[e0 + 1 : e0 + n_ev],
                        e_data[e0 + 1 : e0 + n_ev])
                 WITH ORDINALITY AS x(run_id, type, data, ord);
            v_last := v_last + n_ev;
        END IF;
        IF r_run_ids[i] IS NOT NULL THEN
            INSERT INTO {s}.runs (session_id, run_id, status, agent_name, input, content,
                                  messages, metrics, error, created_at, updated_at)
            VALUES (p_session_id, r_run_ids[i], r_status[i], r_agent_names[i], r_inputs[i],
                    r_contents[i], r_messages[i], r_metrics[i], r_errors[i],
                    coalesce(r_created_at[i], p_now), p_now)
            ON CONFLICT (session_id, run_id) DO UPDATE SET
                status = excluded.status, content = excluded.content,
                messages = excluded.messages, metrics = excluded.metrics,
                error = excluded.error, updated_at = excluded.updated_at;
        END IF;
        v_result := v_last || '|' || n_ev || v_versions;
        IF c_ids[i] IS NOT NULL THEN
            UPDATE {s}.commits SET result = v_result
            WHERE session_id = p_session_id AND commit_id = c_ids[i];
        END IF;
        replies := replies || ('N' || v_result);
        v_moved := true;
        v_skip := false;
        w0 := w1;
        e0 := e0 + n_ev;
    END LOOP;
    IF v_moved THEN
        UPDATE {s}.sessions SET last_seq = v_last, updated_at = p_now
        WHERE session_id = p_session_id;
    END IF;
    RETURN replies;
END
$fn$;
"""


def commit_group_call(s: str) -> str:
    """The arrays in binary, as `statewise_commit`'s (see `_pg_sql.commit_call`)."""
    arrays = ", ".join(["%b"] * 26)
    return f"SELECT {s}.statewise_commit_group(%s, %s, %s, %s, %s, %s, {arrays})"
