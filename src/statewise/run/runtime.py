"""What the run loop needs to know about an agent, independent of the façade classes.

The Agent (and Team) build one of these per run; the loop sits below them and never
imports them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from statewise.models.base import Model
from statewise.models.messages import ToolDefinition
from statewise.models.structured import OutputSchema
from statewise.run.callbacks import Callbacks
from statewise.run.context import RunContext
from statewise.tools.function import Function
from statewise.tools.mcp import ToolSource


@dataclass(kw_only=True, eq=False)
class AgentRuntime:
    name: str | None
    model: Model | None
    functions: Mapping[str, Function]
    system_prompt: Callable[[RunContext], str | None]
    tool_hooks: tuple[Callable[..., Any], ...] = ()
    callbacks: Callbacks = field(default_factory=Callbacks)
    output_key: str | None = None
    # A typed answer: the schema the model answers in, and how often an answer that does
    # not fit is sent back with the reason before the run fails.
    output: OutputSchema[Any] | None = None
    output_retries: int = 1
    max_steps: int = 25
    agent: Any = None
    injected: Mapping[str, Any] = field(default_factory=dict)
    tool_sources: tuple[ToolSource, ...] = ()
    """Tools listed when the run starts (MCP servers), added to `functions` by the loop."""
    # Tools the caller's client runs (AG-UI frontend tools): calling one pauses the run.
    client_tools: tuple[ToolDefinition, ...] = ()
    # False inside team members and workflow steps: they cannot pause the host's run.
    allow_pause: bool = True
