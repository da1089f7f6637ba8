"""The seam through which a durable engine makes an agent run's commit points its own
steps (`statewise.fleet` makes each one a DBOS step).

A run given `CommitPoints` (one `Agent.run_durably` call) does three things differently:

- Before each commit point it asks `replay(point)` whether an earlier execution of the
  same run completed it. If so it takes that point's recorded outcome (the messages it
  added, its usage) and goes on after it: the model and the tools are not called again,
  and nothing is committed again.
- Each point's commit runs inside `commit(point, body)`, which records the outcome the
  body returns (the engine's step).
- Its commits carry deterministic ids: `<run_id>:step:<point>` for the point's own commit,
  `<run_id>:step:<point>.<k>` for commits made inside it (team members). An execution
  cut off after a commit landed but before the engine recorded it runs that point again
  (at least once); its commit then finds its id already stored and applies nothing twice.

Points are 0 (run start: input, `before_agent`), 1..n (one per model step) and "end"
(run end: output, `after_agent`); the end is not replayed, only deduplicated by its id.
An outcome is plain JSON, so an engine may store it as it likes.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from statewise.models.messages import Message
from statewise.run.output import RunMetrics

Outcome = dict[str, Any]
"""What a commit point produced, as the run needs it to go on after it."""


class CommitPoints(Protocol):
    async def replay(self, point: int) -> Outcome | None:
        """The outcome of `point` if an earlier execution of this run completed it."""
        ...

    async def commit(self, point: int, body: Callable[[], Coroutine[Any, Any, Outcome]]) -> Outcome:
        """Run `body` (the point's commit) and record the outcome it returns."""
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
