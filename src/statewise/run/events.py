"""Typed events a run yields when streamed. Each has an `event` discriminator."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from statewise.run.output import RunOutput


@dataclass(kw_only=True, slots=True)
class RunStarted:
    run_id: str
    session_id: str
    agent_name: str | None
    event: Literal["run_started"] = "run_started"


@dataclass(kw_only=True, slots=True)
class ContentDelta:
    """Text as the model streams it. `member_of` names the team when a team member (not
    the team's leader) wrote it."""

    content: str
    agent_name: str | None = None
    member_of: str | None = None
    event: Literal["content_delta"] = "content_delta"


@dataclass(kw_only=True, slots=True)
class ToolCallStarted:
    tool_call_id: str | None
    tool_name: str
    arguments: dict[str, Any]
    agent_name: str | None = None
    member_of: str | None = None
    event: Literal["tool_call_started"] = "tool_call_started"


@dataclass(kw_only=True, slots=True)
class ToolCallCompleted:
    tool_call_id: str | None
    tool_name: str
    result: str
    is_error: bool = False
    agent_name: str | None = None
    member_of: str | None = None
    event: Literal["tool_call_completed"] = "tool_call_completed"


@dataclass(kw_only=True, slots=True)
class StateChanged:
    """State was committed: `versions` by scope, the changed `ops` (secrets redacted)."""

    versions: dict[str, int]
    ops: list[dict[str, Any]] = field(default_factory=list)
    step: int | None = None
    member_of: str | None = None
    event: Literal["state_changed"] = "state_changed"


@dataclass(kw_only=True, slots=True)
class StepStarted:
    """A workflow step began."""

    step_name: str
    event: Literal["step_started"] = "step_started"


@dataclass(kw_only=True, slots=True)
class StepCompleted:
    step_name: str
    content: Any = None
    event: Literal["step_completed"] = "step_completed"


@dataclass(kw_only=True, slots=True)
class RunCompleted:
    output: RunOutput
    event: Literal["run_completed"] = "run_completed"


RunEvent = (
    RunStarted
    | ContentDelta
    | ToolCallStarted
    | ToolCallCompleted
    | StateChanged
    | StepStarted
    | StepCompleted
    | RunCompleted
)
