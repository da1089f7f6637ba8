"""One model step: render the prompt from state, ask the model, run the tool calls it asked
for; the result is a `StepRecord`, which the loop (`run.loop`) hands to its consumers: the
commit policy (commit it now, hold it for the run end, record it as a durable commit
point), durable replay (the messages it added, its answer) and the caller (its content).

What must happen live happens here: the model's streamed text and the tool calls'
events go to `emit` as they happen, and the model request and each tool call get their
span and debug log.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from statewise.db.records import NewEvent
from statewise.exceptions import RunError, StateError
from statewise.models.base import Model
from statewise.models.messages import (
    FINAL_ANSWER_TOOL,
    Message,
    ModelResponse,
    RequestInfo,
    TextDelta,
    ToolCall,
    ToolDefinition,
)
from statewise.run import _observe
from statewise.run.callbacks import first_result
from statewise.run.context import RunContext
from statewise.run.deadline import Deadline
from statewise.run.emit import Emit
from statewise.run.events import ContentDelta, ToolCallCompleted, ToolCallStarted
from statewise.run.output import RunMetrics
from statewise.run.pause import PendingToolCall
from statewise.run.runtime import AgentRuntime
from statewise.run.tool_calls import call_tool, call_tool_relaying, tool_call_event
from statewise.run.writer import RunWriter
from statewise.state.jsonvalue import clean_text, to_json_value

T = TypeVar("T")


@dataclass(kw_only=True, eq=False)
class ModelRequest:
    """What `before_model_callback` sees (as `llm_request`) and may edit."""

    messages: list[Message]
    info: RequestInfo


@dataclass(kw_only=True, eq=False, slots=True)
class StepRecord:
    """What one model step did: the model's answer, the events to commit for it, the
    messages it added to the conversation, and the calls it paused on."""

    number: int
    response: ModelResponse
    events: list[NewEvent]
    added: list[Message]
    # The model answered without asking for tools: the run's steps are over.
    final: bool
    pending: list[PendingToolCall] = field(default_factory=list)


@dataclass(kw_only=True, eq=False, slots=True)
class Stepper:
    """Takes a run's model steps: what stays the same from one step to the next."""

    rt: AgentRuntime
    writer: RunWriter
    ctx: RunContext
    model: Model
    tools: list[ToolDefinition]
    conversation: list[Message]  # history and this run's user message
    messages: list[Message]  # the messages this run added so far (appended to live)
    metrics: RunMetrics
    stream: bool
    emit: Emit | None
    quiet: bool  # neither traced nor logged: nothing is asked to record anything
    deadline: Deadline | None
    started: float = field(default_factory=time.perf_counter)

    async def take(self, step: int) -> StepRecord:
        """Step `step`: ask the model (or the callback answering for it), then run the
        tool calls it asked for, in order, until one has to wait for an answer."""
        rt, writer, ctx = self.rt, self.writer, self.ctx
        start = len(self.messages)
        system = rt.system_prompt(ctx)
        messages = [Message(role="system", content=system)] if system else []
        messages += self.conversation
        messages += self.messages
        info = RequestInfo(
            tools=self.tools,
            run_id=ctx.run_id,
            step=step,
            output=rt.output.spec if rt.output is not None else None,
        )
        response = None
        available: dict[str, Any] = {}
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
                writer.working.mark("callback:before_model")
                messages, info = request.messages, request.info  # (maybe edited)
        if response is not None:
            # The callback answered for the model: no model call, nothing streamed by one.
            if self.stream and self.emit is not None and response.content:
                await self.emit(ContentDelta(content=response.content, agent_name=rt.name))
        else:
            response = await self._ask(messages, info, step)
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
            writer.working.mark("callback:after_model")
        _check_response(response)
        if rt.output is not None:
            _take_final_answer(response)
        assistant = response.to_message()
        self.messages.append(assistant)
        events = [
            NewEvent(
                type="model_response",
                run_id=ctx.run_id,
                data={
                    "agent": rt.name,
                    "step": step,
                    "message": assistant.to_dict(),
                    "usage": response.usage.to_dict(),
                    "request": _request_record(rt, writer, system, messages),
                },
            )
        ]
        record = StepRecord(
            number=step,
            response=response,
            events=events,
            added=[],
            final=not response.tool_calls,
        )
        for call in response.tool_calls:
            await self._call(call, record)
        record.added = self.messages[start:]
        return record

    async def _ask(self, messages: list[Message], info: RequestInfo, step: int) -> ModelResponse:
        """The model's answer (streamed to `emit` as it comes, with `stream`)."""
        model, metrics, deadline = self.model, self.metrics, self.deadline
        observed = (
            _observe.QUIET
            if self.quiet
            else _observe.model_request(self.ctx, model, messages, info.tools, step)
        )
        response = None
        try:
            if self.stream:
                async for chunk in _bounded_stream(deadline, model.request_stream(messages, info)):
                    if isinstance(chunk, ModelResponse):
                        response = chunk
                    elif isinstance(chunk, TextDelta) and chunk.content:
                        if metrics.time_to_first_token is None:
                            metrics.time_to_first_token = time.perf_counter() - self.started
                        if self.emit is not None:
                            await self.emit(
                                ContentDelta(content=chunk.content, agent_name=self.rt.name)
                            )
                if response is None:
                    raise RunError(f"model {model.name} ended its stream without a response")
            elif deadline is not None:
                response = await deadline.bound(model.request(messages, info))
            else:
                response = await model.request(messages, info)
        except BaseException as exc:
            _observe.model_failed(observed, exc)
            raise
        if not self.quiet:
            _observe.model_response(observed, response)
        metrics.model_requests += 1
        metrics.model = model.name
        metrics.input_tokens += response.usage.input_tokens
        metrics.output_tokens += response.usage.output_tokens
        return response

    async def _call(self, call: ToolCall, record: StepRecord) -> None:
        """Run one tool call, adding its result to the conversation and the step's events
        (or, when it must wait for an answer, to the step's pending calls)."""
        rt, writer, ctx, emit = self.rt, self.writer, self.ctx, self.emit
        if emit is not None:
            await emit(
                ToolCallStarted(
                    tool_call_id=call.id,
                    tool_name=call.name,
                    arguments=call.arguments,
                    agent_name=rt.name,
                )
            )
        observed = _observe.QUIET if self.quiet else _observe.tool_started(ctx, writer, call)
        try:
            if self.stream and emit is not None:
                # Agents the tool runs (team members) stream their events live.
                outcome = await call_tool_relaying(rt, writer, ctx, call, emit)
            elif self.deadline is not None:
                outcome = await self.deadline.bound(call_tool(rt, writer, ctx, call))
            else:
                outcome = await call_tool(rt, writer, ctx, call)
        except BaseException as exc:
            _observe.finish(observed, exc)
            raise
        if isinstance(outcome, PendingToolCall):
            if not self.quiet:
                _observe.tool_finished(observed, "paused: waiting for an answer", False)
            record.pending.append(outcome)
            return
        text, is_error = outcome
        if not self.quiet:
            _observe.tool_finished(observed, text, is_error)
        self.metrics.tool_calls += 1
        self.messages.append(
            Message(role="tool", content=text, tool_call_id=call.id, name=call.name)
        )
        record.events.append(
            tool_call_event(
                ctx.run_id,
                rt.name,
                record.number,
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
    rt: AgentRuntime, writer: RunWriter, system: str | None, messages: list[Message]
) -> dict[str, Any]:
    """What the model was sent, for the event log: the system prompt as rendered and the
    messages new since the model's last answer (earlier ones are in earlier events), each
    cut at a few thousand characters. A prompt showing secrets to the model is not kept."""
    if (
        system is not None
        and getattr(rt.agent, "expose_secrets_to_model", False)
        and writer.store.secret_keys_in(writer.working.root)
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


def _take_final_answer(response: ModelResponse) -> None:
    """A provider without native structured output answers by calling the final-answer
    tool: its arguments are the answer. The call becomes the answer's text, so the stored
    conversation holds no tool call without a result (a provider would refuse it)."""
    finals = [c for c in response.tool_calls if c.name == FINAL_ANSWER_TOOL]
    if not finals:
        return
    response.tool_calls = [c for c in response.tool_calls if c.name != FINAL_ANSWER_TOOL]
    if not response.tool_calls:  # other calls first: the answer comes once they ran
        response.content = json.dumps(finals[-1].arguments, ensure_ascii=False)
