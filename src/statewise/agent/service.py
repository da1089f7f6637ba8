"""`Sessions`: every session on a database, read and managed without the agent that wrote
it. What the command line, the HTTP server and any operator's script use instead of
reaching into storage: listing, one session's record, state (read with its version,
replaced or patched with a version precondition), runs, events, paused runs, history,
diff, rollback, fork, export, import, delete.

**The read boundary.** Every read here returns data already redacted, and this is the one
place where data read back out of the engine is redacted: the session's own data (its
app's secret registry, and for a run's output the secret values its state holds) decides
what is hidden, through a `statewise.state.secrets.Redaction`, so every reader on the
same database agrees whichever agent, team or workflow serves the request. The write
boundary is the commit codec, which masks secret values in what a commit stores.
Callers (the server, the page, the CLI) redact nothing themselves.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from statewise.agent.frontend import FrontendSync
from statewise.agent.sessions import (
    StateRead,
    aread_session_state,
    merge_patch_session_state,
    read_session_state,
    replace_session_state,
)
from statewise.agent.summaries import SessionSummary, aread_summary
from statewise.agent.timetravel import TimeTravel, ToTimeTravel
from statewise.db.base import BaseDb, validate_id
from statewise.db.listing import SessionPage, order_key, page_of
from statewise.db.memory import InMemoryDb
from statewise.db.records import EventRecord, RunRecord, ScopeKey, SessionRecord
from statewise.db.retention import Compaction, Retention
from statewise.db.sqlite import SqliteDb
from statewise.db.store import SessionSpec, StateStore
from statewise.db.url import resolve_db, split_options
from statewise.exceptions import ConfigurationError, SessionNotFoundError
from statewise.run.deadline import check_run_timeout
from statewise.run.pause import check_answers
from statewise.run.resume import PausedRun, paused_runs
from statewise.run.sync import run_sync
from statewise.state.reserved import check_writable
from statewise.state.secrets import REDACTED, Redaction

if TYPE_CHECKING:
    from statewise.agent.session_owner import SessionOwner
    from statewise.run.output import RunOutput

EXPORT_PAGE = 500
"""How many deltas or events an export reads at a time: a long session is written out
without holding all of it."""


def jsonable(value: Any) -> Any:
    """A value as JSON data: mappings, sequences, records (`to_dict`), dataclasses and
    pydantic models turned into dicts and lists; anything else as its text."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return jsonable(to_dict())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: jsonable(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if not callable(getattr(value, f.name)) and not f.name.startswith("_")
        }
    model_dump = getattr(value, "model_dump", None)
    if callable(model_dump):
        return jsonable(model_dump(mode="json"))
    return str(value)


@dataclass(frozen=True, kw_only=True)
class SessionState:
    """A session's merged state (its own keys, its user's `user:` keys and its app's
    `app:` keys) and the version of its own keys it was read at."""

    session: SessionRecord
    state: dict[str, Any]
    version: int


class Sessions:
    """Every session on one database (an object or a URL such as `sqlite:///app.db`).

    Time travel (`get_state_history`, `get_state_at`, `diff_state`, `rollback_state`,
    `fork_session`, `export_session`, `import_sessions`) works as on an agent, for any
    session id on the database. Reads are redacted by the session's own data (see the
    module doc).
    """

    def __init__(self, db: BaseDb | str) -> None:
        self.db = resolve_db(db)
        self._store = StateStore(self.db)
        self._owns_db = isinstance(db, str)  # a database object stays its owner's to close
        self._owner: SessionOwner | None = None
        self._time_travel = TimeTravel(_AnySession(self))

    @classmethod
    def of(cls, owner: SessionOwner) -> Sessions:
        """The sessions of an agent's, team's or workflow's database, as that object sees
        them: state writes are checked by its schema and merged by its rules, and a fresh
        session reads with its state template (what a server serving it needs). What is
        redacted is still decided by each session's data."""
        sessions = cls.__new__(cls)
        sessions._store = owner._store
        sessions.db = sessions._store.db
        sessions._owns_db = False
        sessions._owner = owner
        sessions._time_travel = TimeTravel(_AnySession(sessions))
        return sessions

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

    def secret_keys(self, app_name: str) -> frozenset[str]:
        """The keys secret in every session of an app: the ones its data records as secret
        (any agent of the app declared them)."""
        return self._store.app_secret_keys(app_name)

    def _redaction(self, session_id: str) -> Redaction:
        """What a read of the session hides: the secret keys its app's registry records
        (any agent of the app declared them), whoever reads."""
        record = self.require(session_id)
        return Redaction(self.secret_keys(record.app_name or "default"))

    def state_deltas(
        self,
        session_id: str,
        *,
        after_version: int = 0,
        upto_version: int | None = None,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        """The session's own state changes as stored, one per version (after
        `after_version`, up to `upto_version`, at most `limit`, oldest first): each
        source's ops (`segments`), run, step, conflicts and time; secret values redacted."""
        redaction = self._redaction(session_id)
        return [
            redaction.delta(delta.to_dict())
            for delta in self.db.read_deltas(
                ScopeKey("session", session_id),
                after_version=after_version,
                upto_version=upto_version,
                limit=limit,
            )
        ]

    def iter_export(self, session_id: str, *, as_stored: bool = False) -> Iterator[dict[str, Any]]:
        """The session as export records, one at a time and read a page at a time, so a
        long session is written out in constant memory: its record, state deltas,
        events, runs. Redacted like every read here; `as_stored=True` gives the records
        exactly as stored (secret values stay encrypted), for a backup that
        `import_sessions` restores whole."""
        record = self.require(session_id)
        if as_stored:
            return self._stored_records(record)
        redaction = self._redaction(session_id)
        return (redaction.export_line(line) for line in self._stored_records(record))

    def _stored_records(self, record: SessionRecord) -> Iterator[dict[str, Any]]:
        """A session's export records exactly as stored, read a page at a time."""
        session_id = record.session_id
        yield {"type": "session", **record.to_dict()}
        key = ScopeKey("session", session_id)
        after = 0
        while True:
            deltas = self.db.read_deltas(key, after_version=after, limit=EXPORT_PAGE)
            for delta in deltas:
                yield {"type": "delta", **delta.to_dict()}
            if len(deltas) < EXPORT_PAGE:
                break
            after = deltas[-1].version
        seq = 0
        while True:
            events = self.db.read_events(session_id, after=seq, limit=EXPORT_PAGE)
            for event in events:
                data = event.to_dict()
                data["event_type"] = data.pop("type")
                yield {"type": "event", **data}
            if len(events) < EXPORT_PAGE:
                break
            seq = events[-1].seq
        for run in self.db.iter_runs(session_id, page=EXPORT_PAGE):
            yield {"type": "run", **run.to_dict()}

    def list_sessions(
        self,
        *,
        user_id: str | None = None,
        app_name: str | None = None,
        limit: int = 50,
        offset: int = 0,
        cursor: str | None = None,
    ) -> list[SessionRecord]:
        """Sessions, most recently updated first (ties by id). `offset` skips that many,
        at a cost that grows with it (the database reads what it skips); to go deep, page
        with `list_page` and its cursors, whose cost does not grow with the depth."""
        return self.db.list_sessions(
            user_id=user_id, app_name=app_name, limit=limit, offset=offset, cursor=cursor
        )

    def list_page(
        self,
        *,
        user_id: str | None = None,
        app_name: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        offset: int = 0,
    ) -> SessionPage:
        """A page of sessions, most recently updated first, and the cursor of the next page
        (`next_cursor`, None on the last): pass it back as `cursor`. Each session not
        updated during the walk is listed exactly once; one updated meanwhile moves to the
        front and is listed at most once (see `statewise.db.listing`). `offset` skips
        that many more, at a cost that grows with it."""
        return self.db.list_session_page(
            user_id=user_id, app_name=app_name, limit=limit, cursor=cursor, offset=offset
        )

    def get(self, session_id: str) -> SessionRecord | None:
        """One session's record (owner, app, kind, times, last event), or None."""
        return self.db.get_session(validate_id(session_id))

    def require(self, session_id: str) -> SessionRecord:
        """`get`, raising `SessionNotFoundError` when there is no such session."""
        record = self.get(session_id)
        if record is None:
            raise SessionNotFoundError(f"no session {session_id!r}")
        return record

    def read_state(self, session_id: str) -> StateRead:
        """The session's merged state (secret values redacted), the version of exactly
        that state, its record and its secret keys, in one read that never gets in a
        run's way. Raises SessionNotFoundError for a session that does not exist."""
        return _redacted(read_session_state(self._reader(session_id), session_id))

    async def aread_state(self, session_id: str) -> StateRead:
        """`read_state` for async callers: through the database's async driver where it
        has one, so a polling reader queues behind no thread."""
        return _redacted(await aread_session_state(self._reader(session_id), session_id))

    def _reader(self, session_id: str) -> Any:
        validate_id(session_id)
        return self._owner if self._owner is not None else self

    def state(self, session_id: str) -> SessionState:
        """The session's merged state now (secret values redacted), and its version."""
        read = self.read_state(session_id)
        return SessionState(session=read.record, state=read.state, version=read.version)

    def version(self, session_id: str) -> int:
        """The version of the session's own state (0 before its first commit)."""
        return self._store.session_version(validate_id(session_id))

    def replace_state(
        self, session_id: str, state: Mapping[str, Any], *, if_version: int | None = None
    ) -> tuple[dict[str, Any], int]:
        """Make the session's own keys exactly `state` (see `replace_session_state`: a
        secret key given as the marker keeps its value; `if_version` makes the write a
        compare-and-swap). The new state, redacted, and its version."""
        new, version = replace_session_state(
            self._reader(session_id), session_id, state, if_version=if_version
        )
        return self._redaction(session_id).state(new), version

    def merge_patch_state(
        self, session_id: str, patch: Mapping[str, Any], *, if_version: int | None = None
    ) -> tuple[dict[str, Any], int]:
        """Apply an RFC 7396 merge patch to the session's state (null deletes a key); the
        new state, redacted, and its version."""
        new, version = merge_patch_session_state(
            self._reader(session_id), session_id, patch, if_version=if_version
        )
        return self._redaction(session_id).state(new), version

    def get_state_at(
        self, session_id: str | None = None, at: int | str | None = None
    ) -> dict[str, Any]:
        """The session's own state at a version (int) or after a run (run id), secret
        values redacted."""
        state = self._time_travel.get_state_at(session_id, at)
        assert session_id is not None  # `_spec` refused None
        return self._redaction(session_id).state(state)

    get_state_history = ToTimeTravel(TimeTravel.get_state_history)
    diff_state = ToTimeTravel(TimeTravel.diff_state)
    rollback_state = ToTimeTravel(TimeTravel.rollback_state)
    fork_session = ToTimeTravel(TimeTravel.fork_session)
    export_session = ToTimeTravel(TimeTravel.export_session)
    import_sessions = ToTimeTravel(TimeTravel.import_sessions)

    def events(
        self,
        session_id: str,
        *,
        after: int | None = None,
        before: int | None = None,
        limit: int | None = None,
        run_id: str | None = None,
    ) -> list[EventRecord]:
        """The session's events by sequence number, oldest first (with only `limit`, the
        newest). Stored events carry secret values already masked by the commit codec."""
        self.require(session_id)
        if run_id is not None:
            validate_id(run_id, "run_id")
        return self.db.read_events(
            session_id, after=after, before=before, limit=limit, run_id=run_id
        )

    def output_json(self, output: RunOutput) -> dict[str, Any]:
        """A run's output as JSON, its session's secrets hidden: the keys its run end saw
        as secret (else the session's app registry) and, by value, the secret texts its
        state holds, wherever they appear in the answer, pending calls and conflicts.
        May read the state (a run that did not keep it): call it off the event loop
        unless `output.session_state_if_loaded()` is set."""
        keys = output.secret_keys
        if keys is None:
            keys = self._redaction(output.session_id).keys
        state = output.session_state
        redaction = Redaction.of(state, keys)
        return {
            "run_id": output.run_id,
            "session_id": output.session_id,
            "user_id": output.user_id,
            "agent_name": output.agent_name,
            "status": output.status,
            "pending_tool_calls": redaction.json(
                jsonable([p.to_dict() for p in output.pending_tool_calls])
            ),
            "content": redaction.json(jsonable(output.content)),
            "metrics": output.metrics.to_dict(),
            "conflicts": redaction.json(jsonable(output.conflicts)),
            "session_state": redaction.state(state),
        }

    @staticmethod
    def output_content(output: RunOutput) -> Any:
        """A run's answer as JSON, the secret values its state holds masked (what a
        stream's final message carries)."""
        keys = output.secret_keys or frozenset()
        return Redaction.of(output.session_state, keys).json(jsonable(output.content))

    def runs(
        self, session_id: str, *, limit: int | None = None, status: str | None = None
    ) -> list[RunRecord]:
        """The session's runs, oldest first (with `limit`, the last ones)."""
        self.require(session_id)
        return self.db.read_runs(session_id, limit=limit, status=status)

    def run(self, session_id: str, run_id: str) -> RunRecord | None:
        """One run of the session, or None."""
        return self.db.get_run(validate_id(session_id), validate_id(run_id, "run_id"))

    def get_session_summary(self, session_id: str) -> SessionSummary | None:
        """The session's summary (with the range of runs it covers), or None before its
        first one."""
        self.require(session_id)
        return run_sync(aread_summary(self._store, session_id))

    def frontend(
        self, session_id: str, *, user_id: str | None, record: SessionRecord | None
    ) -> FrontendSync:
        """The state sync of one frontend request (AG-UI) on a session: `record` is the
        session as the request found it, None for one its run will create (as `user_id`,
        under this object's app and kind). A session another user creates meanwhile is
        never opened, and the snapshot is redacted by the session's own data."""
        if record is not None:
            spec = SessionSpec(
                session_id=session_id,
                user_id=record.user_id,
                app_name=record.app_name or (self._owner.app_name if self._owner else "default"),
                kind=record.kind,
                owner_required=True,
            )
        elif self._owner is not None:
            spec = dataclasses.replace(
                self._owner._spec(session_id, None), user_id=user_id, owner_required=True
            )
        else:
            spec = SessionSpec(
                session_id=session_id, user_id=user_id, app_name="default", owner_required=True
            )
        return FrontendSync(self._store, spec, record)

    def run_versions(self, session_id: str, run_id: str) -> list[int]:
        """The versions of the session's own state that one run committed, oldest first."""
        validate_id(run_id, "run_id")
        key = ScopeKey("session", validate_id(session_id))
        return [d.version for d in self.db.read_deltas(key) if d.run_id == run_id]

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
        cursor: str | None = ""
        while cursor is not None:
            page = self.db.list_session_page(limit=COMPACT_PAGE, cursor=cursor or None)
            for record in page.sessions:
                done = self.db.compact_session(record.session_id, policy)
                if done is not None:
                    out.append(done)
            cursor = page.next_cursor
        return out


COMPACT_PAGE = 500
"""Sessions `Sessions.compact` lists at a time when it compacts them all."""


class _AnySession:
    """Time travel's source for `Sessions`: any session on the database, owned as its
    record says, its history redacted by its app's registry."""

    def __init__(self, sessions: Sessions) -> None:
        self.sessions = sessions

    @property
    def store(self) -> StateStore:
        return self.sessions._store

    def spec(self, session_id: str | None, user_id: str | None) -> SessionSpec:
        return self.sessions._spec(session_id, user_id)

    def fork_spec(self, new_id: str, source: SessionRecord | None) -> SessionSpec:
        return self.sessions._fork_spec(new_id, source)

    def redaction(self, session_id: str) -> Redaction:
        return self.sessions._redaction(session_id)


def _redacted(read: StateRead) -> StateRead:
    """A state read with its secret keys' values shown as the marker."""
    return dataclasses.replace(read, state=Redaction(read.secret_keys).state(read.state))


def merged_listing(records: list[SessionRecord], *, offset: int, limit: int) -> SessionPage:
    """One page of the listing of several databases, from each one's first `offset +
    limit + 1` sessions (after the same cursor): merged in the listing order, skipping
    `offset`, with the next page's cursor."""
    return page_of(sorted(records, key=order_key)[offset:], limit)


# ---- databases by URL, for the command line that hands them to other processes ----------


def database_url(db: BaseDb) -> str | None:
    """A URL that opens the same tables as `db`, when it has one (a SQLite file does),
    naming its table prefix when it is not the default."""
    if isinstance(db, SqliteDb) and db.db_file != ":memory:":
        url = f"sqlite:///{db.db_file}"
        if db.table_prefix != "statewise_":  # SqliteDb's default
            url += f"?table_prefix={db.table_prefix}"
        return url
    return None


def is_in_memory(db: BaseDb) -> bool:
    """Whether `db` lives in this process alone (what it holds is gone when it exits)."""
    return isinstance(db, InMemoryDb)


def names_storage_options(url: str) -> bool:
    """Whether a database URL carries statewise's own storage options (`?schema=`, a
    retention policy, ...), not just the server's."""
    return bool(split_options(url)[1])


__all__ = [
    "REDACTED",
    "BaseDb",
    "FrontendSync",
    "PausedRun",
    "RunRecord",
    "SessionPage",
    "SessionRecord",
    "SessionState",
    "Sessions",
    "StateRead",
    "check_answers",
    "check_run_timeout",
    "check_writable",
    "database_url",
    "is_in_memory",
    "jsonable",
    "merged_listing",
    "names_storage_options",
    "resolve_db",
    "validate_id",
]
