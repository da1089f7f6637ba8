"""Where an agent's, team's or workflow's sessions live, and whose they are by default.

The storage options of `Agent(...)` / `Workflow(...)` (`db`, `session_state`, `session_id`,
`user_id`, `app_name`, `state_schema`, `state_rules`, `default_state_rule`,
`secret_keys`) as one object, with the `StateStore` built from them. It is configuration:
a run reads it and never writes it, so one agent serves concurrent runs on any sessions.
The façade holds it (`agent.session_config`) and keeps the flat names readable.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from statewise.db.base import BaseDb, validate_id
from statewise.db.records import SessionRecord
from statewise.db.store import SessionSpec, StateStore
from statewise.db.url import resolve_db
from statewise.state.jsonvalue import to_json_value
from statewise.state.merge import Rules
from statewise.state.reducers import Rule
from statewise.state.schema import StateSchema
from statewise.state.secrets import Redaction

_DEFAULT_SESSION = threading.Lock()


class SessionConfig:
    """The database and its `StateStore` (rules, schema, secret keys), the state template
    new sessions start with, and the session, user and app a call that names none uses.

    `session_id` is the owner's own session: the one given, else one generated when a
    call first needs it (as Agno's agents do) and kept from then on. A run on another
    session (`run(..., session_id=...)`) leaves it as it is: the run's ids live in the
    run. `user_id` is never taken from a call either: a server sharing one agent between
    users must never run one user's request as another's.
    """

    def __init__(
        self,
        *,
        kind: str,
        name: str | None,
        session_state: Mapping[str, Any] | None = None,
        db: BaseDb | str | None = None,
        session_id: str | None = None,
        user_id: str | None = None,
        app_name: str | None = None,
        state_schema: type | None = None,
        state_rules: Mapping[str, Rule] | None = None,
        default_state_rule: Rule = "last_write_wins",
        secret_keys: Sequence[str] | None = None,
    ) -> None:
        self.kind = kind
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
        self.app_name = app_name or name or "default"
        rules = Rules(state_rules or {}, default=default_state_rule)
        if self.schema is not None:
            rules = Rules(self.schema.rules(), default=default_state_rule).merged(rules)
        self.store = StateStore(
            self.db, rules=rules, schema=self.schema, secret_keys=secret_keys or ()
        )
        if self.store.secret_keys:
            # Declared secrets need the encryption key: say so now, not at the first
            # commit deep inside a run.
            _ = self.store.cipher

    def default_state(self) -> dict[str, Any]:
        return self.session_state

    def own_session_id(self) -> str:
        """The owner's session: the one given, else one made now and kept (once, however
        many threads ask at the same moment)."""
        if self.session_id is None:
            with _DEFAULT_SESSION:
                if self.session_id is None:
                    self.session_id = str(uuid.uuid4())
        return self.session_id

    def spec(self, session_id: str | None, user_id: str | None) -> SessionSpec:
        """The session a call works on: the one it names, else the owner's own."""
        if session_id is None:
            session_id = self.own_session_id()
        validate_id(session_id)
        if user_id is not None:
            validate_id(user_id, "user_id")
        return SessionSpec(
            session_id=session_id,
            user_id=user_id if user_id is not None else self.user_id,
            app_name=self.app_name,
            kind=self.kind,
            owner_required=user_id is not None,  # named for this call: that user's only
        )

    def fork_spec(self, new_id: str, source: SessionRecord | None) -> SessionSpec:
        """Who a fork belongs to: the source session's user, under this owner's app."""
        return self.spec(new_id, source.user_id if source else None)

    def redaction(self, session_id: str) -> Redaction:
        """What to hide when showing the session's history: its secret keys, declared
        here or recorded by its app (the one place: `statewise.state.secrets`)."""
        record = self.store.db.get_session(session_id)
        if record is None or record.app_name is None:
            return Redaction(self.store.secret_keys)
        return Redaction(self.store.app_secret_keys(record.app_name))

    def use_db(self, db: BaseDb | str) -> None:
        """Keep sessions in another database (an object or a URL) from now on."""
        self.db = resolve_db(db)
        self.store = self.store.on(self.db)
        self.has_own_db = True


__all__ = ["SessionConfig"]
