"""What agents, teams and workflows share: sessions, their state, and time travel.

One implementation of the session API (the same behaviour on all three), so the façades
cannot drift apart. The behaviour lives in the objects an owner holds (`SessionConfig`,
`TimeTravel`, `SessionStateAPI`); `SessionOwner` only hands each call to one of them.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Protocol

from statewise.agent.session_config import SessionConfig
from statewise.agent.state_api import SessionStateAPI
from statewise.agent.timetravel import TimeTravel, ToTimeTravel
from statewise.db.base import BaseDb, validate_id
from statewise.db.store import SessionSpec, StateStore
from statewise.exceptions import ConfigurationError
from statewise.run.driver import deep_merge
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


class SessionOwner:
    """The session API agents, teams and workflows share, written once so the three cannot
    drift apart. It holds nothing but two objects and hands each call to one of them:
    `session_config` (`SessionConfig`: the database, the store, the state template, the
    owner's session, user and app) and a `TimeTravel` over it (history, rollback, fork,
    export). The flat names (`db`, `session_state`, `session_id`, `user_id`, `app_name`,
    `schema`, `has_own_db`) read the configuration.
    """

    _kind = "agent"
    name: str | None
    session_config: SessionConfig
    _time_travel: TimeTravel

    def _hold_sessions(self, config: SessionConfig) -> None:
        self.session_config = config
        self._time_travel = TimeTravel(config)

    # ---- the configuration, by its flat names ------------------------------------------------

    @property
    def db(self) -> BaseDb:
        return self.session_config.db

    @property
    def storage(self) -> BaseDb:
        """Agno's name for `db`."""
        return self.session_config.db

    @property
    def session_state(self) -> dict[str, Any]:
        """The state template new sessions start with (a run never changes it)."""
        return self.session_config.session_state

    @property
    def session_id(self) -> str | None:
        """The owner's own session, which calls without a `session_id` use (None until
        the first such call makes one). Runs on other sessions leave it as it is."""
        return self.session_config.session_id

    @session_id.setter
    def session_id(self, session_id: str | None) -> None:
        self.session_config.session_id = validate_id(session_id) if session_id else None

    @property
    def user_id(self) -> str | None:
        return self.session_config.user_id

    @user_id.setter
    def user_id(self, user_id: str | None) -> None:
        self.session_config.user_id = validate_id(user_id, "user_id") if user_id else None

    @property
    def app_name(self) -> str:
        return self.session_config.app_name

    @property
    def schema(self) -> StateSchema | None:
        return self.session_config.schema

    @property
    def has_own_db(self) -> bool:
        """Whether db= (or STATEWISE_DB_URL) chose the database (see `SessionConfig`)."""
        return self.session_config.has_own_db

    @property
    def _store(self) -> StateStore:
        return self.session_config.store

    def _spec(self, session_id: str | None, user_id: str | None) -> SessionSpec:
        return self.session_config.spec(session_id, user_id)

    def _default_state(self) -> dict[str, Any]:
        return self.session_config.session_state

    # ---- sessions and their state ---------------------------------------------------------

    @property
    def state(self) -> SessionStateAPI:
        """The current session's state, read and written outside a run."""
        return SessionStateAPI(self.session_config)

    def get_session_state(self, session_id: str | None = None) -> dict[str, Any]:
        """A copy of a session's state (the current session's by default)."""
        return SessionStateAPI(self.session_config, session_id).get_all()

    def update_session_state(
        self, updates: Mapping[str, Any], session_id: str | None = None
    ) -> dict[str, Any]:
        """Deep-merge `updates` into a session's stored state, committed at once."""
        api = SessionStateAPI(self.session_config, session_id)
        api._write("api:update_session_state", lambda s: deep_merge(s, updates))
        return api.get_all()

    def use_db(self, db: BaseDb | str) -> None:
        """Keep sessions in another database (an object or a URL) from now on."""
        self.session_config.use_db(db)

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

    # ---- history, time travel, fork, export (`TimeTravel`) --------------------------------

    get_state_history = ToTimeTravel(TimeTravel.get_state_history)
    get_state_at = ToTimeTravel(TimeTravel.get_state_at)
    diff_state = ToTimeTravel(TimeTravel.diff_state)
    rollback_state = ToTimeTravel(TimeTravel.rollback_state)
    fork_session = ToTimeTravel(TimeTravel.fork_session)
    export_session = ToTimeTravel(TimeTravel.export_session)
    import_sessions = ToTimeTravel(TimeTravel.import_sessions)
