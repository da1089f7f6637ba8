"""`POST /v1/{kind}/{name}/agui`: the AG-UI protocol, for frontends (CopilotKit, ...).

Takes an AG-UI `RunAgentInput` (`threadId` is the session id) and answers a stream of
AG-UI events as Server-Sent Events, built with the `ag-ui-protocol` package's types and
encoder. State is a `STATE_SNAPSHOT` at run start, then a `STATE_DELTA` (RFC 6902 JSON
Patch made from the recorded ops) at every commit point; the frontend's own `state` is
merged as a concurrent writer (see `_agui_state`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from ag_ui import core as agui
from ag_ui.core import RunAgentInput
from ag_ui.encoder import EventEncoder
from fastapi import APIRouter, Body, Depends, Path
from fastapi.responses import StreamingResponse

from statewise import (
    ContentDelta,
    PendingToolCall,
    RunCompleted,
    StateChanged,
    StepCompleted,
    StepStarted,
    ToolCallCompleted,
    ToolCallStarted,
)
from statewise._workers import run_blocking
from statewise.agent.service import FrontendSync, SessionRecord, check_answers, validate_id
from statewise.exceptions import InvalidIdError
from statewise.models import ToolDefinition
from statewise.server._auth import Principal
from statewise.server._deps import get_principal, get_registry
from statewise.server._errors import Problem, log, problem_for
from statewise.server._registry import Registry, Served
from statewise.server._runs import Kind, served_or_404, user_for
from statewise.server._schema import AUTH, BODY, DB, problems

router = APIRouter(tags=["ag-ui"])

MEMBER_TOOLS = frozenset({"delegate_task_to_member", "transfer_to_member"})


def _text(content: Any) -> str:
    """A user message's content (a string, or parts of which the text ones count)."""
    if isinstance(content, str):
        return content
    parts = [getattr(part, "text", None) for part in content or []]
    return "\n".join(p for p in parts if isinstance(p, str))


def _is_continuation(body: RunAgentInput) -> bool:
    """A run that answers a paused one: resume entries, or client tool results last."""
    return bool(body.resume) or bool(body.messages and body.messages[-1].role == "tool")


def _input_text(body: RunAgentInput) -> str:
    messages = body.messages
    if not messages or messages[-1].role != "user":
        last = messages[-1].role if messages else "nothing"
        raise Problem(
            422,
            f"messages must end with the user's new message (role 'user'); it ends with {last!r}",
            title="Invalid request",
        )
    text = _text(messages[-1].content)
    if body.context:
        lines = "\n".join(f"- {c.description}: {c.value}" for c in body.context)
        text = f"{text}\n\nContext from the application:\n{lines}"
    return text


def _base_versions(body: RunAgentInput, sync: FrontendSync) -> dict[str, int] | None:
    """`forwardedProps.statewise.versions`: the state versions the frontend's copy is at,
    as the last RUN_FINISHED's metadata gave them. A frontend that sends them back is
    merged exactly even when several frontends share the thread."""
    props = body.forwarded_props
    if not isinstance(props, dict) or not isinstance(props.get("statewise"), dict):
        return None
    raw = props["statewise"].get("versions")
    if raw is None:
        return None
    if not isinstance(raw, dict) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in raw.values()
    ):
        raise Problem(
            422,
            "forwardedProps.statewise.versions must map scopes (session, user, app) to "
            "state versions (integers >= 0), as RUN_FINISHED's metadata gives them",
            title="Invalid request",
        )
    return {scope: int(raw.get(scope, 0)) for scope in sync.scopes}


@router.post(
    "/v1/{kind}/{name}/agui",
    summary="Run over the AG-UI protocol (Server-Sent Events)",
    response_model=None,
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "AG-UI events",
            "content": {
                "text/event-stream": {"schema": {"type": "string", "description": "AG-UI events"}}
            },
        },
        **problems(*BODY, *AUTH, 404, 409, 410, *DB, 502),
    },
)
async def agui_run(
    body: Annotated[RunAgentInput, Body(description="An AG-UI RunAgentInput")],
    kind: Annotated[Kind, Path(description="agents, teams or workflows")],
    name: Annotated[str, Path(max_length=128)],
    registry: Annotated[Registry, Depends(get_registry)],
    principal: Annotated[Principal, Depends(get_principal)],
) -> StreamingResponse:
    served = served_or_404(registry, kind, name)
    try:
        session_id = validate_id(body.thread_id, "threadId")
    except InvalidIdError as exc:
        raise Problem(422, str(exc), title="Invalid request") from None
    continuing = _is_continuation(body)
    text = "" if continuing else _input_text(body)
    user_id = user_for(principal, None, served)
    found = await run_blocking(registry.find_session, session_id)
    record: SessionRecord | None = None
    if found is not None:
        record = found[0]
        if not principal.can_see(record):
            raise Problem(404, f"no session {session_id!r}", title="Session not found")
        user_id = record.user_id
    # A session someone else creates meanwhile is never opened.
    sync = served.sessions.frontend(session_id, user_id=user_id, record=record)
    resume: ResumePlan | None = None
    if continuing:
        if record is None:
            raise Problem(409, f"thread {session_id!r} has no paused run to continue")
        resume = await run_blocking(plan_resume, served, session_id, body)
    synced = await run_blocking(sync.last_synced)
    base = _base_versions(body, sync)
    if base is not None:
        synced = (base, synced[1] if synced else 0)

    def check_shared(keys: list[str]) -> None:
        if keys and not principal.admin:
            raise Problem(
                403,
                f"the app: scope is shared by every user; only an admin key can change "
                f"{', '.join(keys)}",
            )

    conflicts = await run_blocking(
        sync.merge_client_state, body.state, synced[0] if synced else None, check_shared
    )
    initial = body.state if record is None and isinstance(body.state, dict) else None
    stream = AguiStream(
        served=served,
        sync=sync,
        body=body,
        user_id=user_id,
        text=text,
        initial_state=initial,
        synced_messages=synced[1] if synced and resume is None else None,
        conflicts=conflicts,
        resume=resume,
    )
    return StreamingResponse(
        stream.encoded(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


class AguiStream:
    """Translates one statewise run into AG-UI events."""

    def __init__(
        self,
        *,
        served: Served,
        sync: FrontendSync,
        body: RunAgentInput,
        user_id: str | None,
        text: str,
        initial_state: dict[str, Any] | None,
        synced_messages: int | None,
        conflicts: list[dict[str, Any]],
        resume: ResumePlan | None = None,
    ) -> None:
        self.served = served
        self.sync = sync
        self.body = body
        self.user_id = user_id
        self.text = text
        self.initial_state = initial_state
        self.synced_messages = synced_messages
        self.conflicts = conflicts
        self.resume = resume
        self.client_results = resume.client_ids if resume is not None else frozenset()
        self.thread_id = body.thread_id
        self.run_id = body.run_id
        self.message_id: str | None = None  # the assistant message of the current step
        self.text_open = False
        self._member_calls: dict[str, str] = {}  # a leader's delegate call id -> its step

    async def encoded(self) -> AsyncIterator[str]:
        encoder = EventEncoder()
        async for event in self.events():
            yield encoder.encode(event)

    async def events(self) -> AsyncIterator[Any]:
        yield agui.RunStartedEvent(
            thread_id=self.thread_id,
            run_id=self.run_id,
            protocol_version=agui.PROTOCOL_VERSION,
        )
        try:
            async for event in self._run():
                yield event
        except Exception as exc:
            problem = problem_for(exc)
            if problem.status >= 500:
                log.error("AG-UI run failed", exc_info=exc)
            for event in self._close_text():
                yield event
            yield agui.RunErrorEvent(message=problem.detail, code=str(problem.status))

    async def _run(self) -> AsyncIterator[Any]:
        snapshot = await run_blocking(self.sync.snapshot)
        yield agui.StateSnapshotEvent(snapshot=snapshot)
        client_tools = [
            ToolDefinition(
                name=t.name,
                description=t.description,
                parameters=t.parameters or {"type": "object", "properties": {}},
            )
            for t in self.body.tools or []
        ]
        # Workflows run their own steps: a frontend's tools are not offered to them.
        pausable = self.served.pausable
        extra: dict[str, Any] = {"client_tools": client_tools} if client_tools and pausable else {}
        if self.resume is not None:
            events = await self.served.obj.acontinue_run(
                self.resume.run_id,
                session_id=self.thread_id,
                approvals=self.resume.approvals,
                stream=True,
                run_timeout=self.served.run_timeout,
                **extra,
            )
        else:
            history = await self._messages_snapshot()
            if history is not None:
                yield history
            events = await self.served.obj.arun(
                self.text,
                session_id=self.thread_id,
                user_id=self.user_id,
                session_state=self.initial_state,
                stream=True,
                run_timeout=self.served.run_timeout,
                **extra,
            )
        output = None
        async for event in events:
            if isinstance(event, RunCompleted):
                output = event.output
                continue
            for out in await self._translate(event):
                yield out
        for out in self._close_text():
            yield out
        delta = await self._delta()
        if delta is not None:
            yield delta
        assert output is not None
        before = self.synced_messages
        if before is None:
            before = await run_blocking(self._count_history, output.run_id)
        await run_blocking(self.sync.record_sync, output.run_id, before + len(output.messages))
        result = None
        if output.status == "completed":
            # (may read the stored state)
            result = await run_blocking(self.served.sessions.output_content, output)
        yield agui.RunFinishedEvent(
            thread_id=self.thread_id,
            run_id=self.run_id,
            result=result,
            outcome=outcome_of(output.pending_tool_calls),
            metadata={
                "statewise": {
                    "run_id": output.run_id,
                    "status": output.status,
                    "versions": self.sync.sent,
                    "conflicts": len(self.conflicts) + len(output.conflicts),
                }
            },
        )

    def _count_history(self, exclude_run: str) -> int:
        runs = self.served.sessions.runs(self.thread_id)
        return sum(len(r.messages) for r in runs if r.run_id != exclude_run)

    async def _messages_snapshot(self) -> Any:
        """MESSAGES_SNAPSHOT when the frontend has fewer messages than the session."""
        prior = len(self.body.messages) - 1
        if self.sync.record is None:
            return None
        known = self.synced_messages
        if known is None:
            known = await run_blocking(self._count_history, "")
        if prior >= known:
            return None
        runs = await run_blocking(self.served.sessions.runs, self.thread_id)
        messages: list[Any] = []
        for run in runs:
            messages.extend(stored_messages(run.run_id, run.messages))
        messages.append(self.body.messages[-1])
        return agui.MessagesSnapshotEvent(messages=messages)

    async def _delta(self) -> Any:
        patch = await run_blocking(self.sync.catch_up)
        if isinstance(patch, dict):
            return agui.StateSnapshotEvent(snapshot=patch)
        if not patch:
            return None
        return agui.StateDeltaEvent(delta=patch)

    def _close_text(self) -> list[Any]:
        if not self.text_open:
            return []
        self.text_open = False
        assert self.message_id is not None
        return [agui.TextMessageEndEvent(message_id=self.message_id)]

    def _assistant_id(self) -> str:
        if self.message_id is None:
            self.message_id = f"msg-{uuid.uuid4().hex}"
        return self.message_id

    async def _translate(self, event: Any) -> Sequence[Any]:
        if isinstance(event, ContentDelta):
            if not event.content:
                return []
            out: list[Any] = []
            if not self.text_open:
                self.message_id = None
                out.append(
                    agui.TextMessageStartEvent(message_id=self._assistant_id(), role="assistant")
                )
                self.text_open = True
            out.append(
                agui.TextMessageContentEvent(message_id=self._assistant_id(), delta=event.content)
            )
            return out
        if isinstance(event, ToolCallStarted):
            out = self._close_text()
            call_id = event.tool_call_id or f"call-{uuid.uuid4().hex}"
            event.tool_call_id = call_id
            if event.tool_name in MEMBER_TOOLS:
                self._member_calls[call_id] = _member_step(event.arguments)
                out.append(agui.StepStartedEvent(step_name=self._member_calls[call_id]))
            out += [
                agui.ToolCallStartEvent(
                    tool_call_id=call_id,
                    tool_call_name=event.tool_name,
                    parent_message_id=self._assistant_id(),
                ),
                agui.ToolCallArgsEvent(tool_call_id=call_id, delta=json.dumps(event.arguments)),
                agui.ToolCallEndEvent(tool_call_id=call_id),
            ]
            return out
        if isinstance(event, ToolCallCompleted):
            if event.tool_call_id in self.client_results:
                return []  # the client's own result: it already holds that message
            out = [
                *self._close_text(),  # a team member's words end with its leader's call
                agui.ToolCallResultEvent(
                    message_id=f"tool-{uuid.uuid4().hex}",
                    tool_call_id=event.tool_call_id or "",
                    content=event.result,
                    role="tool",
                ),
            ]
            step = self._member_calls.pop(event.tool_call_id or "", None)
            if step is not None:
                out.append(agui.StepFinishedEvent(step_name=step))
            self.message_id = None  # the model's next words are a new message
            return out
        if isinstance(event, StateChanged):
            delta = await self._delta()
            return [delta] if delta is not None else []
        if isinstance(event, StepStarted):
            return [*self._close_text(), agui.StepStartedEvent(step_name=event.step_name)]
        if isinstance(event, StepCompleted):
            out = self._close_text()
            self.message_id = None
            return [*out, agui.StepFinishedEvent(step_name=event.step_name)]
        return []


def outcome_of(pending: Sequence[PendingToolCall]) -> Any:
    """A paused run's RUN_FINISHED outcome: an interrupt per call waiting for approval;
    client-side tool calls alone finish the run with them pending."""
    approvals = [p for p in pending if p.kind == "approval"]
    if approvals:
        return agui.RunFinishedInterruptOutcome(
            interrupts=[
                agui.Interrupt(
                    id=p.tool_call_id,
                    reason="tool_approval",
                    message=p.reason or f"Approve {p.tool_name}?",
                    tool_call_id=p.tool_call_id,
                    response_schema=APPROVAL_SCHEMA,
                    metadata={"tool_name": p.tool_name, "arguments": p.arguments},
                )
                for p in approvals
            ]
        )
    if pending:
        return agui.RunFinishedSuccessOutcome(
            pending_tool_call_ids=[p.tool_call_id for p in pending]
        )
    return None


APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approved": {"type": "boolean", "description": "Run the tool call (true) or not"},
        "reason": {"type": "string", "description": "Why not; the model sees it"},
        "arguments": {"type": "object", "description": "Run it with these arguments"},
    },
}


@dataclass(kw_only=True, frozen=True)
class ResumePlan:
    run_id: str
    approvals: dict[str, Any]
    client_ids: frozenset[str]


def _resume_answer(entry: Any) -> Any:
    if entry.status == "cancelled":
        reason = None
        if isinstance(entry.payload, dict):
            reason = entry.payload.get("reason")
        return {"approved": False, "reason": reason or "cancelled by the user"}
    payload = entry.payload
    if payload is None:
        return True
    return payload


def _trailing_tool_messages(body: RunAgentInput) -> list[Any]:
    """The tool messages that end the request: a frontend's results of client-side tools."""
    out: list[Any] = []
    for message in reversed(body.messages):
        if message.role != "tool":
            break
        out.append(message)
    return out


def plan_resume(served: Served, session_id: str, body: RunAgentInput) -> ResumePlan:
    """Which paused run this request continues, and its answers: resume entries answer
    interrupts (approvals), trailing tool messages answer client-side tool calls."""
    answers: dict[str, Any] = {}
    for entry in body.resume or []:
        answers[entry.interrupt_id] = _resume_answer(entry)
    for message in _trailing_tool_messages(body):
        answers.setdefault(message.tool_call_id, {"result": _text(message.content)})
    told = {m.tool_call_id for m in _trailing_tool_messages(body)}
    waiting = served.sessions.paused_runs(session_id)
    for paused in waiting:
        ids = {p.tool_call_id for p in paused.pending}
        approvals = sorted(p.tool_call_id for p in paused.pending if p.kind == "approval")
        misused = [i for i in approvals if i in told]
        if misused:
            raise Problem(
                422,
                f"tool call {', '.join(map(repr, misused))} waits for approval: answer it with "
                "a resume entry (interruptId); a tool message only answers a client-side tool",
                title="Invalid request",
            )
        if ids & set(answers):
            client = frozenset(p.tool_call_id for p in paused.pending if p.kind == "client")
            mine = {k: v for k, v in answers.items() if k in ids}
            check_answers(paused.pending, mine)  # 422 now rather than an error mid-stream
            return ResumePlan(run_id=paused.run.run_id, approvals=mine, client_ids=client)
    asked = ", ".join(sorted(answers)) or "nothing"
    raise Problem(
        409,
        f"no paused run on thread {session_id!r} waits on {asked}: it was continued already "
        "(a paused run is continued once), or it never paused",
        title="Run is not paused",
    )


def _member_step(arguments: dict[str, Any]) -> str:
    return f"member:{arguments.get('member_name') or arguments.get('member') or '?'}"


def stored_messages(run_id: str, messages: Sequence[dict[str, Any]]) -> list[Any]:
    """A stored run's messages as AG-UI messages (ids made from the run id)."""
    out: list[Any] = []
    for i, message in enumerate(messages):
        role = message.get("role")
        mid = f"{run_id}:{i}"
        content = message.get("content")
        if role == "user":
            out.append(agui.UserMessage(id=mid, content=content or ""))
        elif role == "assistant":
            calls = [
                agui.ToolCall(
                    id=call.get("id") or f"{mid}:{n}",
                    function=agui.FunctionCall(
                        name=call.get("name", ""), arguments=json.dumps(call.get("arguments") or {})
                    ),
                )
                for n, call in enumerate(message.get("tool_calls") or [])
            ]
            out.append(agui.AssistantMessage(id=mid, content=content, tool_calls=calls or None))
        elif role == "tool":
            out.append(
                agui.ToolMessage(
                    id=mid, content=content or "", tool_call_id=message.get("tool_call_id") or ""
                )
            )
    return out
