"""What agents, teams and workflows share: sessions, their state, and time travel.

One implementation of the session API (the same behaviour on all three), so the façades cannot drift apart.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

from statewise.agent.state_api import SessionStateAPI
from statewise.agent.timetravel import TimeTravel
from statewise.db.base import BaseDb, validate_id
from statewise.db.store import SessionSpec, StateStore
from statewise.db.url import resolve_db
from statewise.exceptions import ConfigurationError
from statewise.run.driver import deep_merge
from statewise.state.jsonvalue import to_json_value
from statewise.state.merge import Rules
from statewise.state.reducers import Rule
from statewise.state.schema import StateSchema


class Enqueuer(Protocol):
    """What puts runs on a durable queue (`statewise.fleet.Fleet`)."""

    def enqueue(
        self,
        target: Any,
        input: Any,
        *,
        session_id: str | None,
        user_id: str | None,
        queue: str | None,
    ) -> Any: ...


_default_enqueuer: Enqueuer | None = None


def set_default_enqueuer(enqueuer: Enqueuer | None) -> None:
    """Where `agent.enqueue(...)` / `workflow.enqueue(...)` put runs when not told
    (`statewise.fleet.configure` calls this)."""
    global _default_enqueuer
    _default_enqueuer = enqueuer


def default_enqueuer() -> Enqueuer | None:
    return _default_enqueuer


def db_or_storage(db: BaseDb | str | None, storage: BaseDb | str | None) -> BaseDb | str | None:
    """`storage=` is Agno's name for `db=`; giving both is a mistake."""
    if storage is not None and db is not None:
        raise ConfigurationError(
            "give db= or storage= (the same thing under Agno's name), not both"
        )
    return storage if storage is not None else db


class SessionOwner(TimeTravel):
    """Sessions identified by `session_id`, owned by `user_id`, in the app `app_name`;
    `session_state` is the template for new sessions."""

    _kind = "agent"
    name: str | None

    def _init_sessions(
        self,
        *,
        session_state: Mapping[str, Any] | None,
        db: BaseDb | str | None,
        session_id: str | None,
        user_id: str | None,
        app_name: str | None,
        state_schema: type | None,
        state_rules: Mapping[str, Rule] | None,
        default_state_rule: Rule = "last_write_wins",
        secret_keys: Sequence[str] | None,
    ) -> None:
        self.schema = StateSchema.from_type(state_schema) if state_schema is not None else None
        defaults = dict(self.schema.defaults()) if self.schema else {}
        defaults.update(to_json_value(dict(session_state or {}), ()))
        self.session_state: dict[str, Any] = defaults
        self.db: BaseDb = resolve_db(db)
        # Whether db= (or STATEWISE_DB_URL) chose the database: one that was not given is
        # a fresh in-memory one, which a server may replace (`create_app(db=...)`).
        self.has_own_db = db is not None or bool(os.environ.get("STATEWISE_DB_URL"))
        self.session_id = validate_id(session_id) if session_id is not None else None
        self.user_id = validate_id(user_id, "user_id") if user_id is not None else None
        self.app_name = app_name or self.name or "default"
        rules = Rules(state_rules or {}, default=default_state_rule)
        if self.schema is not None:
            rules = Rules(self.schema.rules(), default=default_state_rule).merged(rules)
        self._store = StateStore(
            self.db, rules=rules, schema=self.schema, secret_keys=secret_keys or ()
        )
        if self._store.secret_keys:
            # Declared secrets need the encryption key: say so now, not at the first
            # commit deep inside a run.
            _ = self._store.cipher

    def _default_state(self) -> dict[str, Any]:
        return self.session_state

    def _spec(self, session_id: str | None, user_id: str | None) -> SessionSpec:
        if session_id is None:
            if self.session_id is None:
                self.session_id = str(uuid.uuid4())
            session_id = self.session_id
        validate_id(session_id)
        if user_id is not None:
            validate_id(user_id, "user_id")
        return SessionSpec(
            session_id=session_id,
            user_id=user_id if user_id is not None else self.user_id,
            app_name=self.app_name,
            kind=self._kind,
            owner_required=user_id is not None,  # named for this call: that user's only
        )

    @property
    def storage(self) -> BaseDb:
        """Agno's name for `db`."""
        return self.db

    @property
    def state(self) -> SessionStateAPI:
        """The current session's state, read and written outside a run."""
        return SessionStateAPI(self)

    def get_session_state(self, session_id: str | None = None) -> dict[str, Any]:
        """A copy of a session's state (the current session's by default)."""
        return SessionStateAPI(self, session_id).get_all()

    def update_session_state(
        self, updates: Mapping[str, Any], session_id: str | None = None
    ) -> dict[str, Any]:
        """Deep-merge `updates` into a session's stored state, committed at once."""
        api = SessionStateAPI(self, session_id)
        api._write("api:update_session_state", lambda s: deep_merge(s, updates))
        return api.get_all()

    def use_db(self, db: BaseDb | str) -> None:
        """Keep sessions in another database (an object or a URL) from now on."""
        self.db = resolve_db(db)
        self._store = self._store.on(self.db)
        self.has_own_db = True

    def create_session(self, session_id: str | None = None, *, user_id: str | None = None) -> str:
        """Create a new, empty session and return its id (its first run or state read
        starts from the default state, as for a session created by a run). Raises
        `SessionExistsError` if it exists, also when another writer creates the same id
        at the same moment: exactly one creator wins."""
        spec = self._spec(session_id or str(uuid.uuid4()), user_id)
        with self._store.begin(spec, mode="create") as txn:
            txn.commit(source="create_session")
        return spec.session_id

    def enqueue(
        self,
        input: Any,
        *,
        session_id: str | None = None,
        user_id: str | None = None,
        queue: str | None = None,
        fleet: Enqueuer | None = None,
    ) -> Any:
        """Put a run on a fleet's durable queue instead of running it here; a worker
        (`statewise worker`) runs it. Returns a handle with `run_id`, `status()` and
        `result(timeout=...)`. Needs `pip install 'statewise[dbos]'` and
        `statewise.fleet.configure("postgresql://...")` (or `fleet=`)."""
        enqueuer = fleet or _default_enqueuer
        if enqueuer is None:
            raise ConfigurationError(
                "no fleet is configured: call statewise.fleet.configure('postgresql://...') "
                "first (needs pip install 'statewise[dbos]'), or pass fleet=..."
            )
        return enqueuer.enqueue(self, input, session_id=session_id, user_id=user_id, queue=queue)

    def delete_session(self, session_id: str) -> bool:
        """Delete a session for good: a run still writing it fails its next commit with
        `SessionDeletedError`, and the session does not come back."""
        return self._store.delete_session(session_id)

    def prune_sessions(self, *, older_than: float | timedelta | datetime) -> int:
        return self.db.prune_sessions(older_than=older_than)
