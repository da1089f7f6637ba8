"""statewise: stateful LLM agents, teams and workflows whose session state is never lost,
never stale, and always explainable."""

from statewise.agent.agent import Agent
from statewise.run.context import RunContext
from statewise.run.events import (
    ContentDelta,
    RunCompleted,
    RunEvent,
    RunStarted,
    StateChanged,
    ToolCallCompleted,
    ToolCallStarted,
)
from statewise.run.output import RunMetrics, RunOutput
from statewise.state.schema import Reducer, Secret
from statewise.tools import Function, Toolkit, tool

__version__ = "0.1.0"

__all__ = [
    "Agent",
    "ContentDelta",
    "Function",
    "Reducer",
    "RunCompleted",
    "RunContext",
    "RunEvent",
    "RunMetrics",
    "RunOutput",
    "RunStarted",
    "Secret",
    "StateChanged",
    "ToolCallCompleted",
    "ToolCallStarted",
    "Toolkit",
    "__version__",
    "tool",
]
