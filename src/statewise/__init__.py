"""statewise: stateful LLM agents, teams and workflows whose session state is never lost,
never stale, and always explainable."""

from statewise.agent.agent import Agent
from statewise.agent.service import SessionPage, Sessions, SessionState
from statewise.agent.summaries import SessionSummary, SessionSummaryManager
from statewise.db.retention import Retention
from statewise.run.context import RunContext
from statewise.run.events import (
    ContentDelta,
    RunCompleted,
    RunEvent,
    RunStarted,
    StateChanged,
    StepCompleted,
    StepStarted,
    ToolCallCompleted,
    ToolCallStarted,
)
from statewise.run.output import RunMetrics, RunOutput
from statewise.run.pause import Approval, PendingToolCall, RequestApproval
from statewise.state.gcpause import collector_tuned, tune_collector
from statewise.state.schema import Reducer, Secret
from statewise.team import Team
from statewise.tools import Function, MCPTools, Toolkit, tool
from statewise.workflow import (
    Condition,
    Loop,
    Parallel,
    Router,
    Step,
    StepInput,
    StepOutput,
    Workflow,
)

__version__ = "0.1.0"

__all__ = [
    "Agent",
    "Approval",
    "Condition",
    "ContentDelta",
    "Function",
    "Loop",
    "MCPTools",
    "Parallel",
    "PendingToolCall",
    "Reducer",
    "RequestApproval",
    "Retention",
    "Router",
    "RunCompleted",
    "RunContext",
    "RunEvent",
    "RunMetrics",
    "RunOutput",
    "RunStarted",
    "Secret",
    "SessionPage",
    "SessionState",
    "SessionSummary",
    "SessionSummaryManager",
    "Sessions",
    "StateChanged",
    "Step",
    "StepCompleted",
    "StepInput",
    "StepOutput",
    "StepStarted",
    "Team",
    "ToolCallCompleted",
    "ToolCallStarted",
    "Toolkit",
    "Workflow",
    "__version__",
    "collector_tuned",
    "tool",
    "tune_collector",
]
