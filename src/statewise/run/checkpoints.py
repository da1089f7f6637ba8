"""The seam through which a durable engine makes an agent run's commit points its own
steps (`statewise.fleet` makes each one a DBOS step).

A run given `CommitPoints` (one `Agent.run_durably` call) does three things differently:

- Each commit point's whole work (the model call, the tool calls it asked for, and the
  point's commit) runs inside `step(point, body)`: the engine runs `body` and records the
  outcome it returns (the messages it added, its usage) as its step. If an earlier
  execution of the same run completed that step, the engine hands back the recorded
  outcome without calling `body`: the model and the tools are not called again, and
  nothing is committed again. The engine finds out from its own step records as it
  enters each step, so a first execution reads nothing up front.
- The last model step, when nothing runs between it and the run end (no `after_agent`
  callback), ends the run inside its own step: one commit holds the step's events and
  the run end, as in a run without an engine. A recovered run that replays that step
  commits the run end again under the same id, which lands nothing twice.
- Its commits carry deterministic ids: `<run_id>:step:<point>` for the point's own commit,
  `<run_id>:step:<point>.<k>` for commits made inside it (team members). An execution
  cut off after a commit landed but before the engine recorded it runs that point again
  (at least once); its commit then finds its id already stored and applies nothing twice.

Points are 0 (run start: input, `before_agent`), 1..n (one per model step) and "end"
(run end: output, `after_agent`). An outcome is plain JSON, so an engine may store it as
it likes.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from statewise.models.messages import Message
from statewise.run.output import RunMetrics

Outcome = dict[str, Any]
"""What a commit point produced, as the run needs it to go on after it."""


class CommitPoints(Protocol):
    async def step(self, point: int, body: Callable[[], Coroutine[Any, Any, Outcome]]) -> Outcome:
        """Run commit point `point` as the engine's step: `body` does the point's work and
        returns its outcome, which the engine records; if an earlier execution of this run
        completed the point, its recorded outcome, without calling `body`."""
        ...


def point_commit_id(run_id: str, point: int | str) -> str:
    """The one durable commit id scheme: an agent run's commit point `point`, or a
    workflow run's top-level step `point` (its `step_completed` commit)."""
    return f"{run_id}:step:{point}"


# ---- what the run loop does with them ----------------------------------------------------

_COUNTED = ("model_requests", "input_tokens", "output_tokens", "tool_calls")


def counters(metrics: RunMetrics) -> list[int]:
    return [getattr(metrics, name) for name in _COUNTED]


def step_outcome(
    added: list[Message], metrics: RunMetrics, before: list[int], content: str | None, done: bool
) -> Outcome:
    """A model step's outcome: the messages it added, what it counted, and its answer."""
    return {
        "messages": [m.to_dict() for m in added],
        "counted": {n: getattr(metrics, n) - b for n, b in zip(_COUNTED, before, strict=True)},
        "content": content,
        "done": done,
    }


def replay_step(outcome: Outcome, messages: list[Message], metrics: RunMetrics) -> bool:
    """Take a completed step's recorded outcome into the run; True if it was the last."""
    messages.extend(Message.from_dict(m) for m in outcome.get("messages", ()))
    for name, value in (outcome.get("counted") or {}).items():
        if name in _COUNTED:
            setattr(metrics, name, getattr(metrics, name) + int(value))
    return bool(outcome.get("done"))


async def durable_point(
    points: CommitPoints, point: int, body: Callable[[], Coroutine[Any, Any, Outcome]]
) -> tuple[Outcome, bool]:
    """Run `point` through the engine: its outcome, and whether `body` ran in this
    execution (False: the outcome is an earlier execution's, replayed)."""
    ran: list[bool] = []

    async def running() -> Outcome:
        ran.append(True)
        return await body()

    outcome = await points.step(point, running)
    return outcome, bool(ran)
