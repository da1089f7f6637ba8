"""The DBOS workflow every fleet run executes, and its steps.

One run = one DBOS workflow whose id is the statewise run id. For a statewise Workflow,
the run's start, each top-level step, and its end are DBOS steps; for an Agent or Team,
the whole agent run is one step (it commits its state once, at its end, inside that
step). DBOS records each finished step, so a recovered run skips them. A step that was
cut off by a crash runs again; statewise makes its state effect happen once: the step's
commit is the only thing that changes state, and a step whose commit already landed is
recognised (its `step_completed` record) and not applied again.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from dbos import DBOS, StepOptions, WorkflowSerializationFormat

from statewise.agent.session_owner import SessionOwner
from statewise.exceptions import ConfigurationError
from statewise.fleet._names import RUN_WORKFLOW
from statewise.workflow import Workflow

log = logging.getLogger("statewise.fleet")

_lock = threading.Lock()
_targets: dict[str, SessionOwner] = {}
_flows: dict[str, Workflow] = {}


def serve_targets(targets: dict[str, SessionOwner]) -> None:
    """What this worker process runs, by name."""
    with _lock:
        _targets.clear()
        _flows.clear()
        _targets.update(targets)


def _flow(name: str) -> Workflow:
    """The Workflow that runs target `name`: itself, or a one-step workflow around an
    agent or team (so its run commits once, as that step)."""
    with _lock:
        if name in _flows:
            return _flows[name]
        target = _targets.get(name)
        if target is None:
            raise ConfigurationError(
                f"this worker does not serve {name!r} (it serves {sorted(_targets)})"
            )
        if isinstance(target, Workflow):
            flow = target
        else:
            flow = Workflow(
                name=target.name,
                steps=[target],
                db=target.db,
                app_name=target.app_name,
            )
            flow._store = target._store  # the agent's rules, schema and secret keys
            flow.session_state = target.session_state
        _flows[name] = flow
        return flow


def _advance(request: dict[str, Any], run_id: str, until: int | None) -> Any:
    flow = _flow(request["target"])
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


@DBOS.workflow(name=RUN_WORKFLOW, serialization_type=WorkflowSerializationFormat.PORTABLE)
def fleet_run(request: dict[str, Any]) -> Any:
    run_id = DBOS.workflow_id
    assert run_id is not None
    started = time.perf_counter()
    target = request.get("target")
    try:
        flow = _flow(str(target))
        names = [step.name for step in flow.steps]
        DBOS.run_step(StepOptions(name="start"), _advance, request, run_id, 0)
        for index, name in enumerate(names):
            DBOS.run_step(
                StepOptions(name=f"step {index}: {name}"), _advance, request, run_id, index + 1
            )
        content = DBOS.run_step(StepOptions(name="finish"), _advance, request, run_id, None)
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
