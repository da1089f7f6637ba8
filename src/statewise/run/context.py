"""What tools, hooks and callbacks receive: the run's identity and its live state."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from statewise.exceptions import StateError
from statewise.state.tracked import TrackedDict

if TYPE_CHECKING:
    from statewise.db.store import StateStore, WorkingState
    from statewise.db.transaction import AsyncTransaction


@dataclass(kw_only=True, eq=False)
class RunContext:
    """One run's context. `session_state` is live: a write is visible at once to everything
    that runs later in the run, and persisted at the next commit point (README table).

    The same object is passed as `run_context`, `tool_context` and `callback_context`;
    `state` is an alias of `session_state` for code written against ADK-style contexts.
    """

    run_id: str
    session_id: str
    user_id: str | None
    agent: Any = None
    agent_name: str | None = None
    step: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)
    _working: WorkingState | None = field(default=None, repr=False)
    _store: StateStore | None = field(default=None, repr=False)
    _txn: AsyncTransaction | None = field(default=None, repr=False)

    @property
    def session_state(self) -> TrackedDict:
        if self._working is None:
            raise StateError("this context is not attached to a session")
        return self._working.root

    @session_state.setter
    def session_state(self, value: Mapping[str, Any] | None) -> None:
        # Agno-style code writes `run_context.session_state = {}` when it is empty; assigning
        # replaces the contents (recorded as ops) rather than detaching the live view.
        root = self.session_state
        if value is root:
            return
        new = dict(value or {})
        for key in [k for k in root if k not in new]:
            del root[key]
        for key, item in new.items():
            root[key] = item

    def secret_values(self) -> tuple[str, ...]:
        """The session's secret values now, as texts to mask in what the run logs and
        traces (empty when the context has no session or nothing is secret)."""
        if self._working is None or self._store is None:
            return ()
        return self._store.codec.secret_values_in(self._working.root)

    @property
    def state(self) -> TrackedDict:
        return self.session_state

    @state.setter
    def state(self, value: Mapping[str, Any] | None) -> None:
        self.session_state = value
