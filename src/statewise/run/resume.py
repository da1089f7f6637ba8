"""Continuing a paused run (see `run.pause`): claim it once, answer its pending tool
calls, and run on from there with the session's state as it is now."""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from statewise.db.base import BaseDb
from statewise.db.records import (
    Commit,
    DeltaSegment,
    NewEvent,
    RunRecord,
    ScopeKey,
    ScopeWrite,
)
from statewise.db.store import SessionSpec, StateStore
from statewise.exceptions import RunNotFoundError, RunNotPausedError, VersionConflict
from statewise.models.messages import Message, ToolCall
from statewise.run import _observe
from statewise.run.context import RunContext
from statewise.run.driver import end_run, history_messages
from statewise.run.events import RunEvent, RunStarted, ToolCallCompleted
from statewise.run.loop import StepsResult, call_tool, run_steps
from statewise.run.output import METRICS_KEY, RunMetrics
from statewise.run.pause import (
    CONTINUED_EVENT,
    PAUSED_EVENT,
    Approval,
    PendingToolCall,
    check_answers,
)
from statewise.run.runtime import AgentRuntime
from statewise.run.scope import RunScope

CLAIM_SECONDS = 10.0


@dataclass(kw_only=True, slots=True)
class PausedRun:
    """A paused run and the tool calls it waits on."""

    run: RunRecord
    pending: list[PendingToolCall]
    step: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run.run_id,
            "session_id": self.run.session_id,
            "agent_name": self.run.agent_name,
            "input": self.run.input,
            "status": self.run.status,
            "pending_tool_calls": [p.to_dict() for p in self.pending],
            "updated_at": self.run.updated_at,
        }


@dataclass(kw_only=True, eq=False)
class ContinueRequest:
    run_id: str
    spec: SessionSpec
    approvals: Mapping[str, Any] | None = None
    history_runs: int | None = None
    stream: bool = False


def _pending_of(db: BaseDb, run: RunRecord) -> tuple[list[PendingToolCall], int]:
    events = [
        e for e in db.read_events(run.session_id, types=[PAUSED_EVENT]) if e.run_id == run.run_id
    ]
    if not events:
        return [], 0
    data = events[-1].data
    return [PendingToolCall.from_dict(p) for p in data.get("pending", [])], int(
        data.get("step") or 0
    )


def paused_runs(db: BaseDb, session_id: str) -> list[PausedRun]:
    """The session's paused runs, oldest first."""
    out = []
    for run in db.read_runs(session_id, status="paused"):
        pending, step = _pending_of(db, run)
        out.append(PausedRun(run=run, pending=pending, step=step))
    return out


def get_paused_run(db: BaseDb, session_id: str, run_id: str) -> PausedRun:
    run = db.get_run(session_id, run_id)
    if run is None:
        raise RunNotFoundError(f"session {session_id!r} has no run {run_id!r}")
    if run.status != "paused":
        raise RunNotPausedError(
            f"run {run_id!r} is {run.status}, not paused: a paused run is continued once "
            "(it was continued already, or it never paused)",
            run.status,
        )
    pending, step = _pending_of(db, run)
    return PausedRun(run=run, pending=pending, step=step)


def claim_paused_run(
    db: BaseDb, session_id: str, run_id: str, approvals: Mapping[str, Any] | None
) -> tuple[PausedRun, dict[str, Approval]]:
    """Take a paused run for continuing, exactly once.

    The claim is a commit that sets the run `running`, based on the session scope's
    version it read the run at: of two racing claims one lands, the other loses the
    compare-and-swap, reads the run again and finds it no longer paused.
    """
    key = ScopeKey("session", session_id)
    give_up = time.monotonic() + CLAIM_SECONDS
    attempt = 0
    while True:
        attempt += 1
        session, versions = db.probe(session_id, [key])
        if session is None:
            raise RunNotFoundError(f"no session {session_id!r}")
        paused = get_paused_run(db, session_id, run_id)
        answers = check_answers(paused.pending, approvals)
        paused.run.status = "running"
        commit = Commit(
            session=session,
            writes=[
                ScopeWrite(
                    key=key,
                    base_version=versions[key],
                    segments=[DeltaSegment(source=f"continue:{run_id}", ops=[])],
                )
            ],
            events=[
                NewEvent(
                    type=CONTINUED_EVENT,
                    run_id=run_id,
                    data={"approvals": {k: a.to_dict() for k, a in answers.items()}},
                )
            ],
            run=paused.run,
            run_id=run_id,
        )
        try:
            db.commit(commit)
        except VersionConflict:
            if time.monotonic() > give_up:
                raise
            time.sleep(random.uniform(0, min(0.05, 0.001 * 2 ** min(attempt, 6))))
            continue
        return paused, answers


def _answer_text(call: PendingToolCall, answer: Approval) -> str:
    if call.kind == "client":
        return answer.result or ""
    reason = f": {answer.reason}" if answer.reason else "."
    return f"The user rejected this call of {call.tool_name}{reason}"


async def drive_continue(
    rt: AgentRuntime, store: StateStore, request: ContinueRequest
) -> AsyncIterator[RunEvent]:
    """Continue a paused run: answer its pending calls, commit, run on, end the run."""
    spec = request.spec
    started = time.perf_counter()
    db = store.db
    paused, answers = await db.run_io(
        claim_paused_run, db, spec.session_id, request.run_id, request.approvals
    )
    record = paused.run
    txn = await store.abegin(spec, mode="existing")
    working = txn.working
    ctx = RunContext(
        run_id=record.run_id,
        session_id=spec.session_id,
        user_id=working.spec.user_id,
        agent=rt.agent,
        agent_name=rt.name,
        step=paused.step,
        _working=working,
        _store=store,
        _txn=txn,
    )
    scope = RunScope(txn=txn, run_id=record.run_id)
    metrics = RunMetrics(**{k: v for k, v in record.metrics.items() if k in RunMetrics.__slots__})
    ctx.metadata[METRICS_KEY] = metrics  # team members count in this run
    before = [Message.from_dict(m) for m in record.messages]
    result = StepsResult()
    keep = True
    observed = _observe.run_started(
        ctx,
        scope,
        kind=getattr(rt.agent, "_kind", "agent"),
        name=rt.name,
        session_id=spec.session_id,
        run_id=record.run_id,
        debug=bool(getattr(rt.agent, "debug_mode", False)),
    )
    failure: BaseException | None = None
    try:
        yield RunStarted(run_id=record.run_id, session_id=spec.session_id, agent_name=rt.name)
        available = {"callback_context": ctx, "run_context": ctx, "agent": rt.agent}
        events = []
        for call in paused.pending:
            answer = answers[call.tool_call_id]
            arguments = answer.arguments if answer.arguments is not None else call.arguments
            if answer.approved and call.kind == "approval":
                outcome = await call_tool(
                    rt, scope, ctx, ToolCall(call.tool_name, arguments, call.tool_call_id), answer
                )
                text, is_error = outcome if isinstance(outcome, tuple) else ("", True)
                metrics.tool_calls += 1
            else:
                text, is_error = _answer_text(call, answer), not answer.approved
            result.messages.append(
                Message(
                    role="tool", content=text, tool_call_id=call.tool_call_id, name=call.tool_name
                )
            )
            events.append(
                NewEvent(
                    type="tool_call",
                    run_id=record.run_id,
                    data={
                        "agent": rt.name,
                        "step": paused.step,
                        "tool_call_id": call.tool_call_id,
                        "name": call.tool_name,
                        "arguments": arguments,
                        "result": text,
                        "is_error": is_error,
                        "approval": answer.to_dict(),
                    },
                )
            )
            yield ToolCallCompleted(
                tool_call_id=call.tool_call_id,
                tool_name=call.tool_name,
                result=text,
                is_error=is_error,
                agent_name=rt.name,
            )
        changed = await scope.commit(events, run=record, step=paused.step, source="continue")
        if changed is not None:
            yield changed
        history: Sequence[Message] = await history_messages(
            store, spec.session_id, request.history_runs
        )
        async for event in run_steps(
            rt,
            scope,
            ctx,
            [*history, *before],
            metrics,
            result,
            stream=request.stream,
            defer_final_commit=not rt.callbacks.after_agent,
        ):
            yield event
        async for event in end_run(
            rt, scope, ctx, record, result, before, metrics, available, started
        ):
            yield event
    except BaseException as exc:
        keep = False
        failure = exc
        txn.discard()
        record.status = "failed"
        record.error = f"{type(exc).__name__}: {exc}"
        with contextlib.suppress(Exception):
            await scope.commit(
                [NewEvent(type="run_failed", run_id=record.run_id, data={"error": record.error})],
                run=record,
                source="run_failed",
            )
        raise
    finally:
        txn.close(keep=keep)
        _observe.run_finished(observed, metrics=metrics.to_dict(), error=failure)
