"""Workflows: agents, teams and functions run as steps on one shared, durable state."""

from statewise.workflow.steps import Condition, Loop, Parallel, Router, Step
from statewise.workflow.types import StepInput, StepOutput
from statewise.workflow.workflow import Workflow, WorkflowRunOutput

__all__ = [
    "Condition",
    "Loop",
    "Parallel",
    "Router",
    "Step",
    "StepInput",
    "StepOutput",
    "Workflow",
    "WorkflowRunOutput",
]
