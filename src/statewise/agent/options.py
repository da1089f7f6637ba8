"""An agent's options: the keywords a `Team` passes on, and the groups an agent keeps.

`Team(**options)` is typed with `Unpack[AgentOptions]`, so a type checker checks every
keyword a team forwards to `Agent` (a misspelt one is an error, not a silent `TypeError`
at run time). `tests/team/test_team_keywords.py` keeps the keys and types equal to
`Agent.__init__`'s keyword parameters, so the two cannot drift apart.

`Agent(...)` takes its keywords flat, under the names the documents and Agno use, and
keeps related ones together: what goes into the model's context (`ContextConfig`), session
summaries (`SummaryConfig`), the answer and the run's limits (`RunConfig`), and where
sessions live (`statewise.agent.session_config.SessionConfig`). `Option` keeps each flat
name readable and settable on the agent (`agent.markdown` is `agent.context_config.markdown`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypedDict, TypeVar, overload

from statewise.agent.instructions import Instructions
from statewise.agent.summaries import SessionSummaryManager
from statewise.db.base import BaseDb
from statewise.exceptions import ConfigurationError
from statewise.run.deadline import check_run_timeout
from statewise.state.reducers import Rule

Callback = Callable[..., Any] | Sequence[Callable[..., Any]] | None
"""One callback or a list of them, called in order."""


class AgentOptions(TypedDict, total=False):
    """Every `Agent` keyword but `model`, `name` and `tools` (a team takes those itself)."""

    description: str | None
    instructions: Instructions
    tool_hooks: Sequence[Callable[..., Any]] | None
    session_state: Mapping[str, Any] | None
    db: BaseDb | str | None
    storage: BaseDb | str | None
    session_id: str | None
    user_id: str | None
    app_name: str | None
    add_session_state_to_context: bool
    enable_agentic_state: bool
    overwrite_db_session_state: bool
    resolve_in_context: bool
    add_history_to_context: bool
    num_history_runs: int
    markdown: bool
    state_schema: type | None
    state_rules: Mapping[str, Rule] | None
    default_state_rule: Rule
    secret_keys: Sequence[str] | None
    expose_secrets_to_model: bool
    output_key: str | None
    output_schema: type[Any] | dict[str, Any] | None
    output_retries: int
    max_steps: int
    before_agent_callback: Callback
    after_agent_callback: Callback
    before_model_callback: Callback
    after_model_callback: Callback
    before_tool_callback: Callback
    after_tool_callback: Callback
    debug_mode: bool
    strict_templates: bool
    run_timeout: float | None
    enable_session_summaries: bool
    add_session_summary_to_context: bool | None
    session_summary_manager: SessionSummaryManager | None


@dataclass(kw_only=True, slots=True)
class ContextConfig:
    """What a run puts in the model's context besides the messages: the state (as JSON,
    and as `{key}` templates resolved in the instructions), the state tool, past runs,
    formatting, and whether secret values may be shown."""

    add_session_state_to_context: bool = False
    enable_agentic_state: bool = False
    resolve_in_context: bool = True
    add_history_to_context: bool = False
    num_history_runs: int = 3
    markdown: bool = False
    expose_secrets_to_model: bool = False
    strict_templates: bool = False

    @property
    def history_runs(self) -> int | None:
        """How many past runs a run sends the model (None: none)."""
        return self.num_history_runs if self.add_history_to_context else None


@dataclass(kw_only=True, slots=True)
class SummaryConfig:
    """Session summaries: made after each completed run when enabled (or when a manager
    is given), shown in the system prompt unless `add_session_summary_to_context` says
    otherwise; the prompt can show summaries another process made, too."""

    enable_session_summaries: bool = False
    add_session_summary_to_context: bool | None = None
    session_summary_manager: SessionSummaryManager | None = None

    def __post_init__(self) -> None:
        if self.add_session_summary_to_context is None:
            self.add_session_summary_to_context = (
                self.enable_session_summaries or self.session_summary_manager is not None
            )

    def summarizer(self) -> SessionSummaryManager | None:
        """What makes the summaries: the manager given, else a default one once enabled."""
        if self.session_summary_manager is None and self.enable_session_summaries:
            self.session_summary_manager = SessionSummaryManager()
        return self.session_summary_manager


@dataclass(kw_only=True, slots=True)
class RunConfig:
    """How a run answers and how far it may go: the answer's type and state key, retries
    of an answer that does not fit, steps and seconds (`run_timeout`, None: no limit; past
    it the run ends `failed` with the reason), how a run's `session_state=` meets the
    stored one, and debug logging."""

    output_key: str | None = None
    output_schema: type[Any] | dict[str, Any] | None = None
    output_retries: int = 1
    max_steps: int = 25
    run_timeout: float | None = None
    overwrite_db_session_state: bool = False
    debug_mode: bool = False

    def __post_init__(self) -> None:
        if self.output_retries < 0:
            raise ConfigurationError(f"output_retries must be 0 or more, got {self.output_retries}")
        if self.max_steps < 1:
            raise ConfigurationError(f"max_steps must be at least 1, got {self.max_steps}")
        self.run_timeout = check_run_timeout(self.run_timeout)


T = TypeVar("T")


class Option(Generic[T]):
    """An agent attribute kept in one of its option groups: declared on the class as
    `markdown = Option[bool]("context_config")`, `agent.markdown` reads and sets
    `agent.context_config.markdown`, so the flat names users know keep working."""

    def __init__(self, group: str) -> None:
        self.group = group
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, objtype: type | None = None) -> Option[T]: ...
    @overload
    def __get__(self, obj: object, objtype: type | None = None) -> T: ...

    def __get__(self, obj: object | None, objtype: type | None = None) -> Option[T] | T:
        if obj is None:
            return self
        value: T = getattr(getattr(obj, self.group), self.name)
        return value

    def __set__(self, obj: object, value: T) -> None:
        setattr(getattr(obj, self.group), self.name, value)
