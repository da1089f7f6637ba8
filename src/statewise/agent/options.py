"""The Agent keywords a `Team` passes on to its leader, as one typed dictionary.

`Team(**options)` is typed with `Unpack[AgentOptions]`, so a type checker checks every
keyword a team forwards to `Agent` (a misspelt one is an error, not a silent `TypeError`
at run time). `tests/team/test_team_keywords.py` keeps the keys and types equal to
`Agent.__init__`'s keyword parameters, so the two cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypedDict

from statewise.agent.instructions import Instructions
from statewise.agent.summaries import SessionSummaryManager
from statewise.db.base import BaseDb
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
