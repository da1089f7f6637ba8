"""The result of a run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Literal

from typing_extensions import TypeVar

from statewise.db.store import StateLoader
from statewise.models.messages import Message
from statewise.run.pause import PendingToolCall

METRICS_KEY = "statewise.metrics"
"""Where a run keeps its RunMetrics in `RunContext.metadata`, so that the agents it runs
inside it (team members, workflow steps) count their model requests, tool calls and
tokens in it."""


@dataclass(kw_only=True, slots=True)
class RunMetrics:
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    model_requests: int = 0
    tool_calls: int = 0
    duration: float = 0.0
    time_to_first_token: float | None = None
    model: str | None = None  # the model that answered (provider:id)

    def to_dict(self) -> dict[str, Any]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "total_tokens": self.total_tokens,
            "model_requests": self.model_requests,
            "tool_calls": self.tool_calls,
            # To the microsecond: a float's shortest text costs a tenth of encoding a
            # run's records when it has all of its seventeen digits.
            "duration": round(self.duration, 6),
            "time_to_first_token": None
            if self.time_to_first_token is None
            else round(self.time_to_first_token, 6),
            "model": self.model,
        }


OutputT = TypeVar("OutputT", default=Any)


@dataclass(kw_only=True, eq=False)
class RunOutput(Generic[OutputT]):
    """What `run` returns; `content` is the answer (typed by the agent's `output_schema`).

    `session_state` is the state as this run left it, copied on first access rather than
    at the end of every run: copying a large state is O(state), a run should not be.
    """

    content: OutputT
    run_id: str
    session_id: str
    user_id: str | None
    messages: list[Message] = field(default_factory=list)
    status: Literal["completed", "failed", "paused"] = "completed"
    # A paused run waits on these tool calls: continue it with agent.continue_run(...).
    pending_tool_calls: list[PendingToolCall] = field(default_factory=list)
    metrics: RunMetrics = field(default_factory=RunMetrics)
    agent_name: str | None = None
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    state_loader: Callable[[], dict[str, Any]] | None = field(default=None, repr=False)
    # The keys `session_state` treats as secret (declared, or in the app's registry as the
    # run's end saw it): what the HTTP API redacts, without reading the registry again.
    secret_keys: frozenset[str] | None = field(default=None, repr=False)
    _session_state: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def session_state(self) -> dict[str, Any]:
        if self._session_state is None:
            self._session_state = self.state_loader() if self.state_loader else {}
        return self._session_state

    def session_state_if_loaded(self) -> dict[str, Any] | None:
        """`session_state` if getting it reads no database (copied already, or the run's
        state is still the session's cached tree); else None. For callers on an event
        loop, which must not wait on a read."""
        if self._session_state is None:
            loader = self.state_loader
            if loader is None:
                self._session_state = {}
            elif isinstance(loader, StateLoader):
                self._session_state = loader.if_cached()
        return self._session_state

    def __str__(self) -> str:
        return "" if self.content is None else str(self.content)
