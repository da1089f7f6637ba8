"""The DBOS workflow every fleet run executes, and its steps.

One run = one DBOS workflow whose id is the statewise run id. Its DBOS steps are the
run's own units, so a recovered run continues after the last one that completed:

- a Workflow: the run's start, each top-level step, and its end (`Workflow.advance`);
  each step's commit carries the commit id `<run id>:step:<index>`;
- an Agent or Team: its commit points (run start, each model step with its tool calls;
  the last one also ends the run; `Agent.run_durably` with `DbosCommitPoints`), each
  commit carrying `<run id>:step:<point>`. A recovered agent run takes the completed
  points' recorded outcomes (messages, usage) instead of asking the model or calling
  tools again: DBOS hands them back as the run enters each step (it looks each step up
  as it enters it anyway), so a first execution reads nothing more than a bare DBOS
  workflow does.

A step cut off by a crash runs again (DBOS executes steps at least once); its commit then
finds its id already stored and applies nothing twice.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

from dbos import DBOS, StepOptions, WorkflowSerializationFormat

from statewise.agent.agent import Agent
from statewise.agent.session_owner import SessionOwner
from statewise.exceptions import ConfigurationError
from statewise.fleet._names import RUN_WORKFLOW
from statewise.run.checkpoints import Outcome
from statewise.run.sync import outside_loop
from statewise.workflow import Workflow

log = logging.getLogger("statewise.fleet")

_lock = threading.Lock()
_targets: dict[str, SessionOwner] = {}


def serve_targets(targets: dict[str, SessionOwner]) -> None:
    """What this worker process runs, by name."""
    with _lock:
        _targets.clear()
        _targets.update(targets)


def _target(name: str) -> SessionOwner:
    with _lock:
        target = _targets.get(name)
    if target is None:
        raise ConfigurationError(
            f"this worker does not serve {name!r} (it serves {sorted(_targets)})"
        )
    return target


class DbosCommitPoints:
    """An agent run's commit points as DBOS steps named `commit point <n>`.

    DBOS numbers a workflow's steps in the order they run and, entering one, returns the
    outcome an earlier execution recorded for it instead of running it: a recovered run
    replays its completed points this way, and goes on after them.

    Each point is a synchronous DBOS step, taken on the worker thread that runs the DBOS
    workflow while the run's private loop waits (`run.sync.outside_loop`): DBOS looks the
    step up, the loop runs the point's body, DBOS records its outcome, all on one thread.
    An asynchronous step would do the same with three hops to DBOS's thread pool and back
    (the lookup, an empty stage, the recording) for every point. (`Agent.run_durably`
    always runs its run on such a private loop.)"""

    async def step(self, point: int, body: Callable[[], Coroutine[Any, Any, Outcome]]) -> Outcome:
        options = StepOptions(name=_point_name(point))
        return await outside_loop(lambda run: DBOS.run_step(options, run), body)


def _point_name(point: int) -> str:
    return f"commit point {point}"


def _run_agent(agent: Agent, request: dict[str, Any], run_id: str) -> Any:
    output = agent.run_durably(
        request["input"],
        run_id=run_id,
        session_id=request["session_id"],
        user_id=request["user_id"],
        points=DbosCommitPoints(),
    )
    return _plain(output.content)


def _advance(request: dict[str, Any], run_id: str, until: int | None) -> Any:
    flow = _target(request["target"])
    assert isinstance(flow, Workflow)
    output = flow.advance(
        run_id,
        session_id=request["session_id"],
        user_id=request["user_id"],
        input=request["input"],
        until=until,
    )
    if until is not None:
        return None
    if output is not None:
        return _plain(output.content)
    record = flow.db.get_run(request["session_id"], run_id)  # completed by an earlier try
    return record.content if record is not None else None


def _plain(content: Any) -> Any:
    if content is None or isinstance(content, (str, int, float, bool, list, dict)):
        return content
    return str(content)


def _run_workflow(flow: Workflow, request: dict[str, Any], run_id: str) -> Any:
    DBOS.run_step(StepOptions(name="start"), _advance, request, run_id, 0)
    for index, step in enumerate(flow.steps):
        DBOS.run_step(
            StepOptions(name=f"step {index}: {step.name}"), _advance, request, run_id, index + 1
        )
    return DBOS.run_step(StepOptions(name="finish"), _advance, request, run_id, None)


@DBOS.workflow(name=RUN_WORKFLOW, serialization_type=WorkflowSerializationFormat.PORTABLE)
def fleet_run(request: dict[str, Any]) -> Any:
    run_id = DBOS.workflow_id
    assert run_id is not None
    started = time.perf_counter()
    target = request.get("target")
    try:
        runnable = _target(str(target))
        if isinstance(runnable, Workflow):
            content = _run_workflow(runnable, request, run_id)
        elif isinstance(runnable, Agent):
            content = _run_agent(runnable, request, run_id)
        else:
            raise ConfigurationError(f"a fleet cannot run a {type(runnable).__name__}")
    except Exception as exc:
        log.warning(
            "run %s %s failed after %.2f s on %s: %s: %s",
            run_id,
            target,
            time.perf_counter() - started,
            DBOS.executor_id,
            type(exc).__name__,
            exc,
        )
        raise
    log.info(
        "run %s %s completed in %.2f s on %s",
        run_id,
        target,
        time.perf_counter() - started,
        DBOS.executor_id,
    )
    return content
