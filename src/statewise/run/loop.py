"""The agent loop: render instructions, ask the model, call tools, commit; repeat.

One step is one model call plus the tool calls it asked for, and ends with a commit
(DESIGN §3 commit point b). Instructions are rendered from state before *every* model
call, so the model always sees what earlier tool calls wrote. Errors a model can act on
(unknown tool, bad arguments, a tool that raises) go back to it as the tool's result;
that call's state writes are undone.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from statewise.db.base import on_private_loop
from statewise.db.records import NewEvent
from statewise.exceptions import RunError, StateError, StatewiseError
from statewise.models.messages import (
    Message,
    ModelResponse,
    RequestInfo,
    TextDelta,
    ToolCall,
)
from statewise.run import _observe
from statewise.run.callbacks import first_result
from statewise.run.checkpoints import (
    CommitPoints,
    commit_point,
    counters,
    replay_step,
    step_outcome,
)
from statewise.run.context import RunContext
from statewise.run.deadline import Deadline, bounded, deadline_of
from statewise.run.emit import Emit
from statewise.run.events import ContentDelta, RunEvent, ToolCallCompleted, ToolCallStarted
from statewise.run.output import RunMetrics
from statewise.run.pause import Approval, PendingToolCall, RequestApproval
from statewise.run.runtime import AgentRuntime
from statewise.run.scope import RunScope
from statewise.state.jsonvalue import clean_text, text_problem, to_json_value
from statewise.tools import ToolArgumentsError, call_with_hooks, format_tool_result

T = TypeVar("T")


@dataclass(kw_only=True, eq=False)
class ModelRequest:
    """What `before_model_callback` sees (as `llm_request`) and may edit."""

    messages: list[Message]
    info: RequestInfo


@dataclass(kw_only=True, eq=False)
class StepsResult:
    content: str | None = None
    messages: list[Message] = field(default_factory=list)
    pending_events: list[NewEvent] = field(default_factory=list)
    final_step: int | None = None
    pending: list[PendingToolCall] = field(default_factory=list)  # the run paused on these


async def run_steps(
    rt: AgentRuntime,
    scope: RunScope,
    ctx: RunContext,
    conversation: list[Message],
    metrics: RunMetrics,
    result: StepsResult,
    *,
    stream: bool,
    emit: Emit | None = None,
    defer_final_commit: bool = False,
    points: CommitPoints | None = None,
) -> None:
    """Run model/tool steps until the model answers without tool calls, sending their
    events to `emit` (none are made without one). With `stream`, the model streams its
    answer and `emit` gets it as `ContentDelta`s.

    With `points` (a durable run, `run.checkpoints`), a step an earlier execution of the
    run completed is taken from its recorded outcome, and each step's commit is recorded.

    With `defer_final_commit`, the last step's events are left in `result.pending_events`
    for the caller's run-end commit instead of being committed on their own.

    `conversation` holds history and this run's user message; new messages are appended
    to `result.messages` as they happen.
    """
    if rt.model is None:
        raise RunError(f"agent {rt.name or '(unnamed)'} has no model; pass model=... to run it")
    model = rt.model
    if rt.tool_sources:
        rt = await with_listed_tools(rt)
    tools = [f.definition() for f in rt.functions.values()]
    tools += [d for d in rt.client_tools if d.name not in rt.functions]
    started = time.perf_counter()
    # Neither traced nor logged (decided when the run started, and so for all its steps):
    # nothing below records anything, so nothing is asked to.
    quiet = _observe.quiet_under(ctx)
    first = ctx.step + 1
    deadline = deadline_of(ctx.metadata)
    for step in range(first, first + rt.max_steps):
        if deadline is not None:
            deadline.check()  # (a model that asks for tools forever stops here)
        ctx.step = step
        if points is not None:
            scope.enter(step)
            replayed = await points.replay(step)
            if replayed is not None:
                if replay_step(replayed, result.messages, metrics):
                    result.content = replayed.get("content")
                    result.final_step = step
                    return
                continue
            added, counted = len(result.messages), counters(metrics)
        observed_step = (
            _observe.QUIET
            if quiet
            else _observe.step_started(ctx, scope, f"{rt.name or 'agent'} #{step}")
        )
        step_error: BaseException | None = None
        try:
            system = rt.system_prompt(ctx)
            messages = [Message(role="system", content=system)] if system else []
            messages += conversation
            messages += result.messages
            info = RequestInfo(tools=tools, run_id=ctx.run_id, step=step)
            response = None
            if rt.callbacks.before_model or rt.callbacks.after_model:
                request = ModelRequest(messages=messages, info=info)
                available = {
                    "callback_context": ctx,
                    "run_context": ctx,
                    "llm_request": request,
                    "agent": rt.agent,
                }
                if rt.callbacks.before_model:
                    response = as_response(
                        await first_result(rt.callbacks.before_model, available),
                        "before_model_callback",
                    )
                    scope.working.mark("callback:before_model")
                    messages, info = request.messages, request.info  # (maybe edited)
            if response is not None:
                # The callback answered for the model: no model call, nothing streamed by one.
                if stream and emit is not None and response.content:
                    await emit(ContentDelta(content=response.content, agent_name=rt.name))
            else:
                observed_call = (
                    _observe.QUIET
                    if quiet
                    else _observe.model_request(ctx, model, messages, info.tools, step)
                )
                try:
                    if stream:
                        async for chunk in _bounded_stream(
                            deadline, model.request_stream(messages, info)
                        ):
                            if isinstance(chunk, ModelResponse):
                                response = chunk
                            elif isinstance(chunk, TextDelta) and chunk.content:
                                if metrics.time_to_first_token is None:
                                    metrics.time_to_first_token = time.perf_counter() - started
                                if emit is not None:
                                    await emit(
                                        ContentDelta(content=chunk.content, agent_name=rt.name)
                                    )
                        if response is None:
                            raise RunError(
                                f"model {model.name} ended its stream without a response"
                            )
                    elif deadline is not None:
                        response = await deadline.bound(model.request(messages, info))
                    else:
                        response = await model.request(messages, info)
                except BaseException as exc:
                    _observe.model_failed(observed_call, exc)
                    raise
                if not quiet:
                    _observe.model_response(observed_call, response)
                metrics.model_requests += 1
                metrics.input_tokens += response.usage.input_tokens
                metrics.output_tokens += response.usage.output_tokens
            if rt.callbacks.after_model:
                ctx.metadata["model_response"] = response
                replaced = as_response(
                    await first_result(
                        rt.callbacks.after_model, {**available, "llm_response": response}
                    ),
                    "after_model_callback",
                )
                if replaced is not None:
                    response = replaced
                ctx.metadata.pop("model_response", None)
                scope.working.mark("callback:after_model")
            _check_response(response)
            assistant = response.to_message()
            result.messages.append(assistant)
            events = [
                NewEvent(
                    type="model_response",
                    run_id=ctx.run_id,
                    data={
                        "agent": rt.name,
                        "step": step,
                        "message": assistant.to_dict(),
                        "usage": response.usage.to_dict(),
                        "request": _request_record(rt, scope, system, messages),
                    },
                )
            ]
            for call in response.tool_calls:
                if emit is not None:
                    await emit(
                        ToolCallStarted(
                            tool_call_id=call.id,
                            tool_name=call.name,
                            arguments=call.arguments,
                            agent_name=rt.name,
                        )
                    )
                observed_tool = _observe.QUIET if quiet else _observe.tool_started(ctx, scope, call)
                try:
                    if stream and emit is not None:
                        # Agents the tool runs (team members) stream their events live.
                        outcome = await _call_tool_relaying(rt, scope, ctx, call, emit)
                    elif deadline is not None:
                        outcome = await deadline.bound(call_tool(rt, scope, ctx, call))
                    else:
                        outcome = await call_tool(rt, scope, ctx, call)
                except BaseException as exc:
                    _observe.finish(observed_tool, exc)
                    raise
                if isinstance(outcome, PendingToolCall):
                    if not quiet:
                        _observe.tool_finished(
                            observed_tool, "paused: waiting for an answer", False
                        )
                    result.pending.append(outcome)
                    continue
                text, is_error = outcome
                if not quiet:
                    _observe.tool_finished(observed_tool, text, is_error)
                metrics.tool_calls += 1
                result.messages.append(
                    Message(role="tool", content=text, tool_call_id=call.id, name=call.name)
                )
                events.append(
                    tool_call_event(
                        ctx.run_id,
                        rt.name,
                        step,
                        call.id,
                        call.name,
                        call.arguments,
                        text,
                        is_error,
                    )
                )
                if emit is not None:
                    await emit(
                        ToolCallCompleted(
                            tool_call_id=call.id,
                            tool_name=call.name,
                            result=text,
                            is_error=is_error,
                            agent_name=rt.name,
                        )
                    )
            if result.pending:
                # Paused before these calls: what ran so far is committed with the step;
                # the caller stores the run as paused (it is continued once, later).
                changed = await scope.end_step(events, step=step, source="step")
                if changed is not None and emit is not None:
                    await emit(changed)
                result.final_step = step
                return
            if not response.tool_calls and defer_final_commit:
                # Nothing observable runs between this step and the run end: one commit
                # (one fsync) serves both; the caller commits these events with the run end.
                result.content = response.content
                result.pending_events = events
                result.final_step = step
                return
            if points is None:
                changed = await scope.end_step(events, step=step, source="step")
            else:
                recorded = step_outcome(
                    result.messages[added:],
                    metrics,
                    counted,
                    None if response.tool_calls else response.content,
                    not response.tool_calls,
                )
                changed = await commit_point(points, scope, events, step, "step", recorded)
            if changed is not None and emit is not None:
                await emit(changed)
            if not response.tool_calls:
                result.content = response.content
                return
        except BaseException as exc:
            step_error = exc
            raise
        finally:
            if not quiet:
                _observe.finish(observed_step, step_error)
    raise RunError(
        f"agent {rt.name or '(unnamed)'} made {rt.max_steps} model calls without a final "
        f"answer; raise max_steps if it needs more"
    )


async def _bounded_stream(deadline: Deadline | None, stream: AsyncIterator[T]) -> AsyncIterator[T]:
    """`stream`, each wait for its next chunk bounded by the run's deadline (the chunks
    are emitted between waits, outside the bound)."""
    if deadline is None:
        async for chunk in stream:
            yield chunk
        return
    try:
        while True:
            try:
                chunk = await deadline.bound(anext(stream))
            except StopAsyncIteration:
                return
            yield chunk
    finally:
        closing = getattr(stream, "aclose", None)
        if closing is not None:
            await closing()


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


def _check_response(response: ModelResponse) -> None:
    """Make what the model sent storable: arguments that are not JSON (NaN, infinity, lone
    surrogates, too deep) become an argument error the model is told about, like invalid
    JSON; lone surrogates in its text are replaced."""
    if response.content is not None:
        response.content = clean_text(response.content)
    for call in response.tool_calls:
        call.name = clean_text(call.name)
        if call.id is not None:
            call.id = clean_text(call.id)
        if call.arguments_error is not None:
            call.arguments_error = clean_text(call.arguments_error)
            call.arguments = {}
            continue
        try:
            call.arguments = to_json_value(call.arguments, ("arguments",))
        except StateError as exc:
            call.arguments_error = str(exc).replace("state['arguments']", "arguments")
            call.arguments = {}


_KEEP_CHARS = 8000


def _request_record(
    rt: AgentRuntime, scope: RunScope, system: str | None, messages: list[Message]
) -> dict[str, Any]:
    """What the model was sent, for the event log: the system prompt as rendered and the
    messages new since the model's last answer (earlier ones are in earlier events), each
    cut at a few thousand characters. A prompt showing secrets to the model is not kept."""
    if (
        system is not None
        and getattr(rt.agent, "expose_secrets_to_model", False)
        and scope.store.secret_keys_in(scope.working.root)
    ):
        system = "(not recorded: it shows secret values to the model)"
    start = len(messages)  # just after the model's last answer
    while start and messages[start - 1].role != "assistant":
        start -= 1
    recorded = []
    for m in [m for m in messages[start:] if m.role != "system"][-20:]:
        data = m.to_dict()
        if m.content is not None and len(m.content) > _KEEP_CHARS:
            data["content"] = _cut(m.content)
        recorded.append(data)
    return {"system": _cut(system), "message_count": len(messages), "new_messages": recorded}


def _cut(text: str | None) -> str | None:
    if text is None or len(text) <= _KEEP_CHARS:
        return text
    return text[:_KEEP_CHARS] + f"… ({len(text) - _KEEP_CHARS} more characters)"


def as_response(value: Any, what: str) -> ModelResponse | None:
    """What a model callback returned, as a response: None (go on), a ModelResponse, or a
    str (a text answer)."""
    if value is None or isinstance(value, ModelResponse):
        return value
    if isinstance(value, str):
        return ModelResponse(content=value)
    raise RunError(
        f"{what} returned {type(value).__name__}; return a ModelResponse, a str, or None to go on"
    )


class ToolResultError(ValueError):
    """A tool returned something that cannot be stored or sent to the model."""


EVENT_SINK = "statewise.event_sink"
"""`RunContext.metadata` key of the queue where a streamed run collects the events of the
agents a tool runs inside it (team members), to yield them as they happen."""


async def _call_tool_relaying(
    rt: AgentRuntime, scope: RunScope, ctx: RunContext, call: ToolCall, emit: Emit
) -> tuple[str, bool] | PendingToolCall:
    """`call_tool`, emitting the events nested runs put in the sink while it runs."""
    sink: asyncio.Queue[RunEvent] = asyncio.Queue()
    previous = ctx.metadata.get(EVENT_SINK)
    ctx.metadata[EVENT_SINK] = sink
    task = asyncio.ensure_future(bounded(ctx.metadata, call_tool(rt, scope, ctx, call)))
    try:
        while not task.done():
            getter = asyncio.ensure_future(sink.get())
            done, _ = await asyncio.wait({task, getter}, return_when=asyncio.FIRST_COMPLETED)
            if getter in done:
                await emit(getter.result())
            else:
                getter.cancel()
        while not sink.empty():
            await emit(sink.get_nowait())
        return task.result()
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        if previous is None:
            ctx.metadata.pop(EVENT_SINK, None)
        else:
            ctx.metadata[EVENT_SINK] = previous


def _pending(call: ToolCall, kind: str, reason: str | None) -> PendingToolCall:
    if call.id is None:
        call.id = f"call_{uuid.uuid4().hex[:16]}"  # the answer names the call by its id
    return PendingToolCall(
        tool_call_id=call.id,
        tool_name=call.name,
        arguments=dict(call.arguments),
        kind="client" if kind == "client" else "approval",
        reason=reason,
    )


_NO_PAUSE = (
    "Error: tool {name!r} needs a person's approval, which cannot be asked for here "
    "(inside a team member or a workflow step)."
)


def tool_call_event(
    run_id: str | None,
    agent: str | None,
    step: int,
    tool_call_id: str | None,
    name: str,
    arguments: Any,
    result: str,
    is_error: bool,
    **extra: Any,
) -> NewEvent:
    """The `tool_call` record of one answered call (history, the web page, AG-UI)."""
    data = {
        "agent": agent,
        "step": step,
        "tool_call_id": tool_call_id,
        "name": name,
        "arguments": arguments,
        "result": result,
        "is_error": is_error,
    }
    return NewEvent(type="tool_call", run_id=run_id, data={**data, **extra})


async def call_tool(
    rt: AgentRuntime,
    scope: RunScope,
    ctx: RunContext,
    call: ToolCall,
    approval: Approval | None = None,
) -> tuple[str, bool] | PendingToolCall:
    """Run one tool call atomically: its state writes are kept only if it succeeds.

    Returns a `PendingToolCall` instead when the call must wait for a person (or the
    client) first; `approval` is that answer when a paused run is continued.
    """
    working = scope.working
    savepoint = working.recorder.savepoint()
    ops_before = len(working.recorder.ops)
    function = rt.functions.get(call.name)
    if function is None:
        if any(d.name == call.name for d in rt.client_tools) and rt.allow_pause:
            return _pending(call, "client", None)
        known = ", ".join(sorted(rt.functions)) or "none"
        return f"Error: unknown tool {call.name!r}. Available tools: {known}.", True
    if function.requires_confirmation and approval is None:
        if not rt.allow_pause:
            return _NO_PAUSE.format(name=call.name), True
        return _pending(call, "approval", f"{call.name} requires confirmation")
    if call.arguments_error is not None:
        return (
            f"Error: the arguments for tool {call.name!r} are not valid JSON "
            f"({call.arguments_error}). Call it again with a JSON object."
        ), True
    callbacks = rt.callbacks.before_tool or rt.callbacks.after_tool
    if callbacks:
        available: dict[str, Any] = {
            "callback_context": ctx,
            "tool_context": ctx,
            "run_context": ctx,
            "agent": rt.agent,
            "tool_name": call.name,
            "tool": function,
            "args": call.arguments,
            "arguments": call.arguments,
            "approval": approval,
        }
    try:
        value = await first_result(rt.callbacks.before_tool, available) if callbacks else None
        if isinstance(value, RequestApproval):
            if approval is None:
                working.rollback_to(savepoint)
                if not rt.allow_pause:
                    return _NO_PAUSE.format(name=call.name), True
                return _pending(call, "approval", value.reason)
            value = None  # approved: the call goes ahead
        if value is None:
            state = ctx.session_state
            injected = {
                **rt.injected,
                "run_context": ctx,
                "tool_context": ctx,
                "callback_context": ctx,
                "session_state": state,
                "agent_state": state,
                "agent": rt.agent,
            }
            offload = not on_private_loop()
            value = await (
                call_with_hooks(function, call.arguments, rt.tool_hooks, injected, offload=offload)
                if rt.tool_hooks
                else function.call(call.arguments, injected, offload=offload)
            )
        if rt.callbacks.after_tool:
            replaced = await first_result(
                rt.callbacks.after_tool, {**available, "tool_response": value, "result": value}
            )
            if replaced is not None:
                value = replaced
        if scope.store.schema is not None:
            # A nested run (a team member) may have committed meanwhile: then every op
            # still pending is this call's.
            ops = working.recorder.ops
            new_ops = ops if savepoint < working.clean else ops[ops_before:]
            scope.store.validate(working, {str(op.path[0]) for op in new_ops})
        text = format_tool_result(value)
        problem = text_problem(text)
        if problem is not None:
            raise ToolResultError(f"the tool's result {problem}")
    except ToolArgumentsError as exc:
        working.rollback_to(savepoint)
        return clean_text(f"Error: {exc}"), True
    except (Exception, StatewiseError) as exc:
        working.rollback_to(savepoint)
        return clean_text(f"Error: {type(exc).__name__}: {exc}"), True
    working.mark(f"tool:{call.name}" + (f"#{call.id}" if call.id else ""))
    return text, False
