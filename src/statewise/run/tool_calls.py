"""One tool call of a model step, run atomically: its state writes are kept only if it
succeeds; an error the model can act on (unknown tool, bad arguments, a tool that raises)
goes back to it as the call's result. A call that must wait for a person or the client
comes back as a `PendingToolCall` (the run pauses).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any

from statewise.db.records import NewEvent
from statewise.exceptions import StatewiseError
from statewise.models.messages import ToolCall
from statewise.run.callbacks import first_result
from statewise.run.context import RunContext
from statewise.run.deadline import bounded
from statewise.run.emit import Emit
from statewise.run.events import RunEvent
from statewise.run.pause import Approval, PendingToolCall, RequestApproval
from statewise.run.runtime import AgentRuntime
from statewise.run.writer import RunWriter
from statewise.state.jsonvalue import clean_text, text_problem
from statewise.tools import ToolArgumentsError, call_with_hooks, format_tool_result


class ToolResultError(ValueError):
    """A tool returned something that cannot be stored or sent to the model."""


EVENT_SINK = "statewise.event_sink"
"""`RunContext.metadata` key of the queue where a streamed run collects the events of the
agents a tool runs inside it (team members), to yield them as they happen."""


async def call_tool_relaying(
    rt: AgentRuntime, writer: RunWriter, ctx: RunContext, call: ToolCall, emit: Emit
) -> tuple[str, bool] | PendingToolCall:
    """`call_tool`, emitting the events nested runs put in the sink while it runs."""
    sink: asyncio.Queue[RunEvent] = asyncio.Queue()
    previous = ctx.metadata.get(EVENT_SINK)
    ctx.metadata[EVENT_SINK] = sink
    task = asyncio.ensure_future(bounded(ctx.metadata, call_tool(rt, writer, ctx, call)))
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
    writer: RunWriter,
    ctx: RunContext,
    call: ToolCall,
    approval: Approval | None = None,
) -> tuple[str, bool] | PendingToolCall:
    """Run one tool call atomically: its state writes are kept only if it succeeds.

    Returns a `PendingToolCall` instead when the call must wait for a person (or the
    client) first; `approval` is that answer when a paused run is continued.
    """
    working = writer.working
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
            value = await (
                call_with_hooks(function, call.arguments, rt.tool_hooks, injected)
                if rt.tool_hooks
                else function.call(call.arguments, injected)
            )
        if rt.callbacks.after_tool:
            replaced = await first_result(
                rt.callbacks.after_tool, {**available, "tool_response": value, "result": value}
            )
            if replaced is not None:
                value = replaced
        if writer.store.schema is not None:
            # A nested run (a team member) may have committed meanwhile: then every op
            # still pending is this call's.
            ops = working.recorder.ops
            new_ops = ops if savepoint < working.clean else ops[ops_before:]
            writer.store.validate(working, {str(op.path[0]) for op in new_ops})
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
