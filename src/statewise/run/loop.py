"""The agent loop: take a model step, end it at its commit point; repeat until the model
answers without tool calls.

One step is one model call plus the tool calls it asked for (`run.step`), and ends with a
commit (DESIGN §3 commit point b). Instructions are rendered from state before *every*
model call, so the model always sees what earlier tool calls wrote. Errors a model can
act on (unknown tool, bad arguments, a tool that raises) go back to it as the tool's
result; that call's state writes are undone (`run.tool_calls`).

The loop itself decides only what happens around a step, from its `StepRecord`: whether
an earlier execution of a durable run completed it already (replay), and how its end is
committed (at once, held for the run end, or as a durable commit point).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from statewise.db.records import NewEvent
from statewise.exceptions import OutputValidationError, RunError
from statewise.models.messages import Message
from statewise.run import _observe
from statewise.run.checkpoints import (
    CommitPoints,
    Outcome,
    counters,
    durable_point,
    replay_step,
    step_outcome,
)
from statewise.run.context import RunContext
from statewise.run.deadline import DEADLINE_KEY, Deadline
from statewise.run.emit import Emit
from statewise.run.output import RunMetrics
from statewise.run.pause import PendingToolCall
from statewise.run.runtime import AgentRuntime
from statewise.run.step import Stepper, StepRecord
from statewise.run.writer import RunWriter


@dataclass(kw_only=True, eq=False)
class StepsResult:
    content: str | None = None
    messages: list[Message] = field(default_factory=list)
    pending_events: list[NewEvent] = field(default_factory=list)
    final_step: int | None = None
    pending: list[PendingToolCall] = field(default_factory=list)  # the run paused on these
    output_retries: int = 0  # answers sent back for not fitting the output schema
    outcome: Outcome | None = None  # a durable run's last step, as its engine records it


async def run_steps(
    rt: AgentRuntime,
    writer: RunWriter,
    ctx: RunContext,
    conversation: list[Message],
    metrics: RunMetrics,
    result: StepsResult,
    *,
    stream: bool,
    emit: Emit | None = None,
    defer_final_commit: bool = False,
    points: CommitPoints | None = None,
    end: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Run model/tool steps until the model answers without tool calls, sending their
    events to `emit` (none are made without one). With `stream`, the model streams its
    answer and `emit` gets it as `ContentDelta`s.

    With `points` (a durable run, `run.checkpoints`), each step (model call, tool calls,
    commit) is the engine's step: one an earlier execution of the run completed is taken
    from its recorded outcome.

    With `defer_final_commit`, the last step's events are left in `result.pending_events`
    for the caller's run-end commit instead of being committed on their own; a durable
    run defers only with `end`, the run end, which the last step then calls itself (so
    the engine records the run end with it).

    `conversation` holds history and this run's user message; new messages are appended
    to `result.messages` as they happen.
    """
    model = rt.model
    if model is None:
        raise RunError(f"agent {rt.name or '(unnamed)'} has no model; pass model=... to run it")
    if rt.tool_sources:
        rt = await with_listed_tools(rt)
    tools = [f.definition() for f in rt.functions.values()]
    tools += [d for d in rt.client_tools if d.name not in rt.functions]
    deadline: Deadline | None = ctx.metadata.get(DEADLINE_KEY)
    # Neither traced nor logged (decided when the run started, and so for all its steps):
    # nothing below records anything, so nothing is asked to.
    quiet = _observe.quiet_under(ctx)
    stepper = Stepper(
        rt=rt,
        writer=writer,
        ctx=ctx,
        model=model,
        tools=tools,
        conversation=conversation,
        messages=result.messages,
        metrics=metrics,
        stream=stream,
        emit=emit,
        quiet=quiet,
        deadline=deadline,
    )
    defer = defer_final_commit if points is None else end is not None
    taking = Taking(stepper, rt, writer, ctx, metrics, result, emit, quiet, defer)
    first = ctx.step + 1
    for step in range(first, first + rt.max_steps):
        if deadline is not None:
            deadline.check()  # (a model that asks for tools forever stops here)
        ctx.step = step
        if points is None:
            done = await taking.step(step, None)
        else:
            done = await _durable_step(points, taking, step, end)
        if done:
            return
    raise RunError(
        f"agent {rt.name or '(unnamed)'} made {rt.max_steps} model calls without a final "
        f"answer; raise max_steps if it needs more"
    )


async def _durable_step(
    points: CommitPoints, taking: Taking, step: int, end: Callable[[], Awaitable[None]] | None
) -> bool:
    """One step of a durable run as its engine's step; True when the steps are over."""
    result, metrics = taking.result, taking.metrics
    taking.writer.enter(step)
    counted = counters(metrics)

    async def body() -> Outcome:
        await taking.step(step, counted, end)
        assert result.outcome is not None
        return result.outcome

    outcome, ran = await durable_point(points, step, body)
    if ran:
        return bool(outcome.get("done"))
    if replay_step(outcome, result.messages, metrics):
        result.content = outcome.get("content")
        result.final_step = step
        return True
    return False


@dataclass(eq=False)
class Taking:
    """What taking and ending one step needs, the same at every step of a run."""

    stepper: Stepper
    rt: AgentRuntime
    writer: RunWriter
    ctx: RunContext
    metrics: RunMetrics
    result: StepsResult
    emit: Emit | None
    quiet: bool
    defer_final_commit: bool

    async def step(
        self,
        step: int,
        counted: list[int] | None,
        end: Callable[[], Awaitable[None]] | None = None,
    ) -> bool:
        """Take one step and end it at its commit point; True when the steps are over.
        `counted` (the counters before it) is given for a durable run's step only."""
        rt, ctx = self.rt, self.ctx
        observed = (
            _observe.QUIET
            if self.quiet
            else _observe.step_started(ctx, self.writer, f"{rt.name or 'agent'} #{step}")
        )
        failure: BaseException | None = None
        try:
            record = await self.stepper.take(step)
            if record.final and rt.output is not None:
                _check_answer(rt, record, self.result, ctx.run_id)
            return await _end_step(record, self, counted, end)
        except BaseException as exc:
            failure = exc
            raise
        finally:
            if not self.quiet:
                _observe.finish(observed, failure)


def _check_answer(rt: AgentRuntime, record: StepRecord, result: StepsResult, run_id: str) -> None:
    """A typed answer that does not fit its schema goes back to the model with the reason,
    as the next step's prompt, `output_retries` times; then the run fails with
    `OutputValidationError` (what earlier steps committed stays committed)."""
    assert rt.output is not None
    try:
        rt.output.parse(record.response.content or "")
    except OutputValidationError as exc:
        if result.output_retries >= rt.output_retries:
            raise
        result.output_retries += 1
        retry = Message(
            role="user",
            content=(
                f"Your answer does not fit the required schema {rt.output.title}: "
                + "; ".join(f"{path or 'answer'}: {reason}" for path, reason in exc.problems)
                + ". Answer again with JSON that fits the schema."
            ),
        )
        result.messages.append(retry)
        record.added.append(retry)
        record.events.append(
            NewEvent(
                type="output_invalid",
                run_id=run_id,
                data={"error": str(exc), "retry": result.output_retries},
            )
        )
        record.final = False


async def _end_step(
    record: StepRecord,
    taking: Taking,
    counted: list[int] | None,
    end: Callable[[], Awaitable[None]] | None,
) -> bool:
    """The commit policy: end the step at its commit point. True when the run's steps are
    over (the model answered, or the run pauses). With `counted` (a durable run), the
    step's outcome is left in `result.outcome` for the engine to record."""
    writer, result, emit, metrics = taking.writer, taking.result, taking.emit, taking.metrics
    step, response = record.number, record.response
    if record.pending:
        # Paused before these calls: what ran so far is committed with the step; the
        # caller stores the run as paused (it is continued once, later).
        result.pending.extend(record.pending)
        changed = await writer.end_step(record.events, step=step, source="step")
        if changed is not None and emit is not None:
            await emit(changed)
        result.final_step = step
        return True
    if counted is not None:
        answer = response.content if record.final else None
        result.outcome = step_outcome(record.added, metrics, counted, answer, record.final)
    if record.final and taking.defer_final_commit:
        # Nothing observable runs between this step and the run end: one commit (one
        # fsync) serves both; the caller commits these events with the run end (a
        # durable run's `end`, here, so its engine records the run end with the step).
        result.content = response.content
        result.pending_events = record.events
        result.final_step = step
        if end is not None:
            await end()
        return True
    if counted is None:
        changed = await writer.end_step(record.events, step=step, source="step")
    else:
        changed = await writer.commit(
            record.events, step=step, source="step", commit_id=writer.point_commit_id()
        )
    if changed is not None and emit is not None:
        await emit(changed)
    if record.final:
        result.content = response.content
        return True
    return False


async def with_listed_tools(rt: AgentRuntime) -> AgentRuntime:
    """`rt` with the tools of its tool sources (listed on first use, then cached by each
    source) next to its own; a name used twice is an error naming both."""
    functions = dict(rt.functions)
    for source in rt.tool_sources:
        for function in await source.functions():
            if function.name in functions:
                raise RunError(
                    f"agent {rt.name or '(unnamed)'}: two tools are named {function.name!r} "
                    f"(one from {source!r}); drop one with include=/exclude= or set prefix="
                )
            functions[function.name] = function
    return dataclasses.replace(rt, functions=functions, tool_sources=())
