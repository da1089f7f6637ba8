"""`Sessions`: every session on a database, read and managed without the agent that wrote
it. What the command line (and any operator's script) uses instead of reaching into
storage: listing, one session's record, state and runs, its paused runs, history, diff,
rollback, fork, export, import, delete.

It answers from the data alone: a session's app name and its own recorded secret keys
decide what is redacted, so it agrees with every agent on the same database.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from statewise.agent.timetravel import TimeTravel
from statewise.db.base import BaseDb, validate_id
from statewise.db.records import RunRecord, ScopeKey, SessionRecord
from statewise.db.retention import Compaction, Retention
from statewise.db.store import SessionSpec, StateStore
from statewise.db.url import resolve_db
from statewise.exceptions import ConfigurationError, SessionNotFoundError
from statewise.run.resume import PausedRun, paused_runs
from statewise.state.secrets import redact_conflict, redact_op_value


@dataclass(frozen=True, kw_only=True)
class SessionState:
    """A session's merged state (its own keys, its user's `user:` keys and its app's
    `app:` keys) and the version of its own keys it was read at."""

    session: SessionRecord
    state: dict[str, Any]
    version: int


class Sessions(TimeTravel):
    """Every session on one database (an object or a URL such as `sqlite:///app.db`).

    Time travel (`get_state_history`, `get_state_at`, `diff_state`, `rollback_state`,
    `fork_session`, `export_session`, `import_sessions`) works as on an agent, for any
    session id on the database.
    """

    def __init__(self, db: BaseDb | str) -> None:
        self.db = resolve_db(db)
        self._store = StateStore(self.db)
        self._owns_db = isinstance(db, str)  # a database object stays its owner's to close

    def _spec(self, session_id: str | None, user_id: str | None) -> SessionSpec:
        if session_id is None:
            raise SessionNotFoundError("a session id is needed")
        record = self.get(session_id)
        if record is None:
            raise SessionNotFoundError(f"no session {session_id!r}")
        return SessionSpec(
            session_id=session_id,
            user_id=user_id if user_id is not None else record.user_id,
            app_name=record.app_name or "default",
            kind=record.kind,
        )

    def _fork_spec(self, new_id: str, source: SessionRecord | None) -> SessionSpec:
        """A fork belongs to the source session's user and app, as its kind."""
        if source is None:
            raise SessionNotFoundError(f"no session to fork into {new_id!r} from")
        return SessionSpec(
            session_id=validate_id(new_id),
            user_id=source.user_id,
            app_name=source.app_name or "default",
            kind=source.kind,
        )

    def state_deltas(self, session_id: str, *, after_version: int = 0) -> list[dict[str, Any]]:
        """The session's own state changes as stored, one per version: each source's
        ops (`segments`), run, step, conflicts and time; secret values redacted."""
        self.require(session_id)
        secrets = self._secret_keys(session_id)
        out = []
        for delta in self.db.read_deltas(
            ScopeKey("session", session_id), after_version=after_version
        ):
            data = delta.to_dict()
            data["segments"] = [
                {"source": s.source, "ops": [redact_op_value(op, secrets) for op in s.ops]}
                for s in delta.segments
            ]
            data["conflicts"] = [redact_conflict(c, secrets) for c in delta.conflicts]
            out.append(data)
        return out

    def iter_export(self, session_id: str) -> Iterator[dict[str, Any]]:
        """The session as export records, one at a time (what `export_session` returns
        as a list), for writing a long session out without holding all of it."""
        self.require(session_id)
        return self.db.export_session(session_id)

    def list_sessions(
        self,
        *,
        user_id: str | None = None,
        app_name: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[SessionRecord]:
        """Sessions, most recently updated first."""
        return self.db.list_sessions(user_id=user_id, app_name=app_name, limit=limit, offset=offset)

    def get(self, session_id: str) -> SessionRecord | None:
        """One session's record (owner, app, kind, times, last event), or None."""
        return self.db.get_session(validate_id(session_id))

    def require(self, session_id: str) -> SessionRecord:
        """`get`, raising `SessionNotFoundError` when there is no such session."""
        record = self.get(session_id)
        if record is None:
            raise SessionNotFoundError(f"no session {session_id!r}")
        return record

    def state(self, session_id: str) -> SessionState:
        """The session's merged state now, and its version."""
        spec = self._spec(session_id, None)
        with self._store.begin(spec, mode="existing") as txn:
            return SessionState(
                session=self.require(session_id), state=txn.plain(), version=txn.version
            )

    def runs(
        self, session_id: str, *, limit: int | None = None, status: str | None = None
    ) -> list[RunRecord]:
        """The session's runs, oldest first (with `limit`, the last ones)."""
        self.require(session_id)
        return self.db.read_runs(session_id, limit=limit, status=status)

    def run(self, session_id: str, run_id: str) -> RunRecord | None:
        """One run of the session, or None."""
        return self.db.get_run(validate_id(session_id), validate_id(run_id, "run_id"))

    def paused_runs(self, session_id: str) -> list[PausedRun]:
        """The session's paused runs with the tool calls each waits on."""
        self.require(session_id)
        return paused_runs(self.db, session_id)

    def delete(self, session_id: str) -> bool:
        """Delete a session for good (False if there was none)."""
        return self._store.delete_session(validate_id(session_id))

    def prune(self, *, older_than: float | timedelta | datetime) -> int:
        """Delete the sessions not updated since the cutoff; how many."""
        return self.db.prune_sessions(older_than=older_than)

    def close(self) -> None:
        """Close the database if it was opened here from a URL."""
        if self._owns_db:
            self.db.close()

    def __enter__(self) -> Sessions:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- retention ---------------------------------------------------------------------

    def compact(
        self, session_id: str | None = None, *, retention: Retention | None = None
    ) -> list[Compaction]:
        """Fold the history older than `retention` (default: the database's policy) into a
        snapshot and remove it, for one session or (None) every session on the database;
        what each compaction that changed something removed. Current state, retained
        history and event sequence numbers stay exact; reads below the horizon then raise
        HistoryCompactedError."""
        policy = retention or self.db.retention
        if policy is None:
            raise ConfigurationError(
                "no retention policy: pass retention=Retention(keep_versions=..., "
                "keep_days=...), or give the database one"
            )
        if session_id is not None:
            self.require(session_id)
            done = self.db.compact_session(session_id, policy)
            return [done] if done is not None else []
        out = []
        offset = 0
        while page := self.db.list_sessions(limit=COMPACT_PAGE, offset=offset):
            offset += len(page)
            for record in page:
                done = self.db.compact_session(record.session_id, policy)
                if done is not None:
                    out.append(done)
        return out


COMPACT_PAGE = 500
"""Sessions `Sessions.compact` lists at a time when it compacts them all."""


__all__ = ["SessionState", "Sessions"]
