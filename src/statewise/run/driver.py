"""A whole agent run: check out the session, commit at run start, run the steps, commit at
run end, release. The commit points are DESIGN §3's and the README's table:

  (a) run start   the input, default/initial state, `before_agent` writes
  (b) each step   the model response, tool calls and results, model/tool callback and
                  tool writes (in `loop.run_steps`)
  (c) run end     the output, `output_key`, `after_agent` writes

A failure between commit points undoes only what was not committed yet, and records the
run as failed.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from statewise.db.records import NewEvent, RunRecord
from statewise.db.store import SessionSpec, StateStore, WorkingState, new_id, scope_of
from statewise.exceptions import InvalidInputError
from statewise.models.messages import Message, ModelResponse
from statewise.run import _observe
from statewise.run.callbacks import first_result
from statewise.run.checkpoints import CommitPoints, Outcome, durable_point
from statewise.run.context import RunContext
from statewise.run.emit import Emit, masking
from statewise.run.events import RunCompleted, RunStarted, StateChanged
from statewise.run.lifecycle import RunLifecycle
from statewise.run.loop import StepsResult, run_steps
from statewise.run.output import METRICS_KEY, RunMetrics, RunOutput
from statewise.run.pause import PAUSED_EVENT
from statewise.run.runtime import AgentRuntime
from statewise.run.writer import RunWriter
from statewise.state.jsonvalue import text_problem, to_json_value
from statewise.state.reserved import check_writable
from statewise.state.tracked import TrackedDict


@dataclass(kw_only=True, eq=False)
class RunRequest:
    input: str
    spec: SessionSpec
    defaults: Mapping[str, Any]
    session_state: Mapping[str, Any] | None = None
    overwrite: bool = False
    history_runs: int | None = None
    stream: bool = False
    run_timeout: float | None = None  # seconds; past them the run ends `failed`
    # A durable engine's run (`run.checkpoints`): its id, and its commit points' steps.
    run_id: str | None = None
    points: CommitPoints | None = None

    def __post_init__(self) -> None:
        check_input(self.input)
        if self.session_state:
            # Refused here, before anything is checked out or written.
            check_writable(self.session_state)
            to_json_value(dict(self.session_state))


def check_input(text: object) -> None:
    """Run input is stored and sent to the model: it must be valid Unicode text."""
    if isinstance(text, str):
        problem = text_problem(text)
        if problem is not None:
            raise InvalidInputError(f"the run input {problem}")


def deep_merge(target: TrackedDict, updates: Mapping[str, Any]) -> None:
    """Merge `updates` into live state: nested dicts merge key by key, the rest is set."""
    for key, value in updates.items():
        current = target.get(key)
        if isinstance(value, Mapping) and isinstance(current, dict):
            deep_merge(current, value)  # type: ignore[arg-type]
        else:
            target[key] = value


def initialize_state(
    working: WorkingState,
    defaults: Mapping[str, Any],
    session_state: Mapping[str, Any] | None,
    overwrite: bool,
) -> None:
    """Apply the agent's default state (new sessions only; `user:`/`app:` defaults fill
    missing keys of those shared scopes) and the run's `session_state`."""
    root = working.root
    for key, value in defaults.items():
        if key.startswith("temp:") or (
            key not in root and (working.is_fresh or scope_of(key)[0] != "session")
        ):
            root[key] = value
    working.mark("default_state")
    if session_state:
        if overwrite:
            for key in [k for k in root if scope_of(k)[0] == "session" and k not in session_state]:
                del root[key]
            for key, value in session_state.items():
                root[key] = value
        else:
            deep_merge(root, session_state)
        working.mark("run_input")


async def drive_run(
    rt: AgentRuntime, store: StateStore, request: RunRequest, emit: Emit | None = None
) -> RunOutput:
    """Run the agent once; its events go to `emit` (`events_of(...)` for an iterator)."""
    spec = request.spec
    started = time.perf_counter()
    points = request.points
    if points is not None:
        # Nobody could continue a paused durable run inside the engine's workflow.
        rt = dataclasses.replace(rt, allow_pause=False)
    run_id = request.run_id or new_id()
    record = RunRecord(
        session_id=spec.session_id, run_id=run_id, agent_name=rt.name, input=request.input
    )
    metrics = RunMetrics()  # nested runs (team members) count in this run

    def initialize(working: WorkingState) -> None:
        initialize_state(working, request.defaults, request.session_state, request.overwrite)

    # Unless a `before_agent` callback reads the state before the run-start commit,
    # nothing but `initialize` does: the store then need not read a session it holds
    # nothing of before that commit (see `StateStore.abegin`).
    starts_blind = not rt.callbacks.before_agent
    async with agent_lifecycle(
        rt,
        store,
        spec,
        record,
        durable=points is not None,
        share_writer=points is not None,  # team members commit under the run's commit ids
        metrics=metrics,
        run_timeout=request.run_timeout,
        initialize=initialize if starts_blind else None,
    ) as life:
        ctx, writer, working = life.ctx, life.writer, life.txn.working
        emit = masking(emit, ctx.secret_values)  # secret values never leave in an event
        if not starts_blind:
            initialize(working)
        if emit is not None:
            await emit(RunStarted(run_id=run_id, session_id=spec.session_id, agent_name=rt.name))
        available = {"callback_context": ctx, "run_context": ctx, "agent": rt.agent}
        early_answer: list[Any] = [None]

        async def start() -> Outcome:
            """Commit point (a): `before_agent`, the input, the run record."""
            if rt.callbacks.before_agent:
                early_answer[0] = await first_result(rt.callbacks.before_agent, available)
                working.mark("callback:before_agent")
            started_events = [
                NewEvent(type="run_started", run_id=run_id, data={"agent": rt.name}),
                NewEvent(type="user_input", run_id=run_id, data={"content": request.input}),
            ]
            changed = await writer.commit(
                started_events,
                run=record,
                step=0,
                source="run_start",
                commit_id=writer.point_commit_id(),
            )
            if changed is not None and emit is not None:
                await emit(changed)
            early = early_answer[0]
            return {"early": None if early is None else as_content(early)}

        if points is None:
            await start()
            early = early_answer[0]
        else:
            outcome, started_here = await durable_point(points, 0, start)
            if not started_here:  # (replayed: the run-start commit landed before)
                await life.txn.settle()
            early = outcome.get("early")
        user_message = Message(role="user", content=request.input)
        result = StepsResult()
        ended: list[tuple[StateChanged | None, RunOutput]] = []
        if early is not None:
            result.content = as_content(early)
            result.messages.append(Message(role="assistant", content=result.content))
        else:
            history = (
                await history_messages(store, spec.session_id, request.history_runs)
                if request.history_runs
                else ()
            )

            async def end() -> None:
                """The run end, inside a durable run's last step (see `run.checkpoints`)."""
                writer.enter("end")
                ended.append(
                    await end_run(
                        rt, writer, ctx, record, result, [user_message], metrics, available, started
                    )
                )

            await run_steps(
                rt,
                writer,
                ctx,
                [*history, user_message],
                metrics,
                result,
                stream=request.stream,
                emit=emit,
                defer_final_commit=not rt.callbacks.after_agent,
                points=points,
                end=end if points is not None and not rt.callbacks.after_agent else None,
            )
        if ended:
            changed, output = ended[0]
        else:
            writer.enter("end")
            changed, output = await end_run(
                rt, writer, ctx, record, result, [user_message], metrics, available, started
            )
        if emit is not None:
            if changed is not None:
                await emit(changed)
            await emit(RunCompleted(output=output))
        return output


def agent_lifecycle(
    rt: AgentRuntime, store: StateStore, spec: SessionSpec, record: RunRecord, **options: Any
) -> RunLifecycle:
    """The lifecycle of an agent's (or team's) run or continuation; `options` as
    `RunLifecycle` takes them."""
    agent = rt.agent
    return RunLifecycle(
        store=store,
        spec=spec,
        record=record,
        agent=agent,
        kind=getattr(agent, "_kind", "agent"),
        debug=bool(getattr(agent, "debug_mode", False)),
        **options,
    )


async def end_run(
    rt: AgentRuntime,
    writer: RunWriter,
    ctx: RunContext,
    record: RunRecord,
    result: StepsResult,
    before: Sequence[Message],
    metrics: RunMetrics,
    available: Mapping[str, Any],
    started: float,
) -> tuple[StateChanged | None, RunOutput]:
    """Commit point (c): the output, `output_key` and `after_agent` writes, and the run
    record; or, when the steps stopped on tool calls that wait for a person or the client,
    the run stored as `paused` with them (nothing of the run end happens yet).

    Returns the commit's state change and the run's output, for the caller to emit."""
    run_id = ctx.run_id
    if not result.pending:
        await finish_agent(rt, ctx, result, available)  # may replace the final answer
    metrics.total_tokens = metrics.input_tokens + metrics.output_tokens
    metrics.duration += time.perf_counter() - started
    messages = [*before, *result.messages]
    record.messages = [m.to_dict() for m in messages]
    record.metrics = summary = metrics.to_dict()  # (the run_completed event shows it too)
    if result.pending:
        record.status = "paused"
        pending = [p.to_dict() for p in result.pending]
        changed = await writer.commit(
            [
                NewEvent(
                    type=PAUSED_EVENT,
                    run_id=run_id,
                    data={"pending": pending, "step": result.final_step},
                )
            ],
            run=record,
            step=result.final_step,
            source="run_paused",
        )
    else:
        record.status = "completed"
        record.content = result.content
        changed = await writer.commit(
            [
                *result.pending_events,
                NewEvent(
                    type="run_completed",
                    run_id=run_id,
                    data={"content": result.content, "metrics": summary},
                ),
            ],
            run=record,
            step=result.final_step,
            source="run_end",
            commit_id=writer.point_commit_id(),
        )
    spec = writer.working.spec
    content = result.content if result.pending else typed_answer(rt, result.content)
    return changed, RunOutput(
        content=content,
        run_id=run_id,
        session_id=spec.session_id,
        user_id=spec.user_id,
        messages=messages,
        status="paused" if result.pending else "completed",
        pending_tool_calls=list(result.pending),
        metrics=metrics,
        agent_name=rt.name,
        conflicts=writer.conflicts,
        state_loader=writer.txn.state_loader(),
        secret_keys=writer.txn.store.secret_keys_in(writer.working.root),
    )


async def history_messages(
    store: StateStore, session_id: str, runs: int | None
) -> Sequence[Message]:
    if not runs:
        return []
    records = await store.db.aread_runs(session_id, limit=runs, status="completed")
    return [Message.from_dict(m) for r in records for m in r.messages]


async def run_nested(
    rt: AgentRuntime,
    writer: RunWriter,
    parent: RunContext,
    input: str,
    result: StepsResult,
    *,
    stream: bool = False,
    emit: Emit | None = None,
    history: Sequence[Message] = (),
) -> None:
    """Run an agent inside another run (a workflow step, a team member) on the host's
    checked-out state: its writes are visible to the host at once, its steps commit
    through the host's writer, and the host owns the run record and the run-end commit.
    Its events go to `emit` (none are made without one).

    The answer ends up in `result.content`. A nested agent cannot pause the host's run:
    its tools that need approval answer the model with an error instead.
    """
    rt = dataclasses.replace(rt, allow_pause=False)
    ctx = RunContext(
        run_id=parent.run_id,
        session_id=parent.session_id,
        user_id=parent.user_id,
        agent=rt.agent,
        agent_name=rt.name,
        metadata=parent.metadata,
        _working=parent._working,
        _store=parent._store,
        _txn=parent._txn,
    )
    host_metrics = parent.metadata.get(METRICS_KEY)
    metrics = host_metrics if isinstance(host_metrics, RunMetrics) else RunMetrics()
    observed = _observe.run_started(
        ctx,
        writer,
        kind=getattr(rt.agent, "_kind", "agent"),
        name=rt.name,
        session_id=parent.session_id,
        run_id=parent.run_id,
        debug=bool(getattr(rt.agent, "debug_mode", False)),
        parent=parent,
    )
    failure: BaseException | None = None
    try:
        available = {"callback_context": ctx, "run_context": ctx, "agent": rt.agent}
        early = await first_result(rt.callbacks.before_agent, available)
        writer.working.mark(f"callback:before_agent:{rt.name}")
        if early is not None:
            result.content = as_content(early)
            result.messages.append(Message(role="assistant", content=result.content))
        else:
            user_message = Message(role="user", content=input)
            await run_steps(
                rt, writer, ctx, [*history, user_message], metrics, result, stream=stream, emit=emit
            )
        await finish_agent(rt, ctx, result, available, suffix=f":{rt.name}")
    except BaseException as exc:
        failure = exc
        raise
    finally:
        _observe.run_finished(observed, error=failure)


def typed_answer(rt: AgentRuntime, content: str | None) -> Any:
    """A nested run's answer for its host: the typed value when the agent has an
    `output_schema` (checked already at its step), else the text."""
    if rt.output is None or content is None:
        return content
    return rt.output.parse(content)


def as_content(value: Any) -> str | None:
    """What `before_agent`/`after_agent` returned, as the run's answer."""
    if isinstance(value, str):
        return value
    if isinstance(value, (ModelResponse, Message)):
        return value.content
    return str(value)


async def finish_agent(
    rt: AgentRuntime,
    ctx: RunContext,
    result: StepsResult,
    available: Mapping[str, Any],
    *,
    suffix: str = "",
) -> None:
    """Store the answer under `output_key`, then run `after_agent` (which sees it in state
    and may replace the answer; `output_key` then holds the replacement)."""
    working = ctx._working
    assert working is not None
    if rt.output_key:
        ctx.session_state[rt.output_key] = answer_value(rt, result.content)
        working.mark(f"output_key{suffix}")
    if not rt.callbacks.after_agent:
        return
    replaced = await first_result(rt.callbacks.after_agent, available)
    if replaced is not None:
        result.content = as_content(replaced)
        if result.messages and result.messages[-1].role == "assistant":
            result.messages[-1] = Message(role="assistant", content=result.content)
        if rt.output_key:
            ctx.session_state[rt.output_key] = answer_value(rt, result.content)
    working.mark(f"callback:after_agent{suffix}")


def answer_value(rt: AgentRuntime, content: Any) -> Any:
    """What `output_key` stores: the answer's text, or a typed answer as plain JSON (as
    ADK stores it; the commit checks it against `state_schema`)."""
    if rt.output is None or content is None:
        return content
    return rt.output.to_json(rt.output.parse(content))
