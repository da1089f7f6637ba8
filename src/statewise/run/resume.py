"""Continuing a paused run (see `run.pause`): claim it once, answer its pending tool
calls, and run on from there with the session's state as it is now.

The process continuing a run holds the run's lease (`BaseDb.claim_run`, renewed while it
works, released at the end), as a resumed workflow does. If it dies, the run stays
`running` only until the lease expires: then it can be continued again from its pause.
Pending calls the dead process already answered and committed keep their recorded results
(an approved tool is not run twice); if it got further (a model step committed), the run
is marked failed instead, its committed work kept, and the caller is told why.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from statewise.db.base import BaseDb
from statewise.db.records import (
    Commit,
    DeltaSegment,
    NewEvent,
    RunRecord,
    ScopeKey,
    ScopeWrite,
    SessionRecord,
)
from statewise.db.store import SessionSpec, StateStore, new_id
from statewise.exceptions import RunNotFoundError, RunNotPausedError, VersionConflict
from statewise.models.messages import Message, ToolCall
from statewise.run.deadline import bounded
from statewise.run.driver import agent_lifecycle, end_run, history_messages
from statewise.run.emit import Emit, masking
from statewise.run.events import RunCompleted, RunStarted, ToolCallCompleted
from statewise.run.lease import RunLease
from statewise.run.loop import StepsResult, run_steps
from statewise.run.output import RunMetrics, RunOutput
from statewise.run.pause import (
    CONTINUED_EVENT,
    PAUSED_EVENT,
    Approval,
    PendingToolCall,
    check_answers,
)
from statewise.run.runtime import AgentRuntime
from statewise.run.tool_calls import call_tool, tool_call_event

CLAIM_SECONDS = 10.0
CONTINUE_LEASE_SECONDS = 30.0  # a dead continuer's run can be continued again after this
_ANSWER_EVENTS = frozenset({"tool_call", "state_delta", "conflict_resolved"})


@dataclass(kw_only=True, slots=True)
class PausedRun:
    """A paused run and the tool calls it waits on."""

    run: RunRecord
    pending: list[PendingToolCall]
    step: int
    # Pending calls a continuation that died had answered and committed: id -> (result,
    # is_error). They are not run again.
    answered: dict[str, tuple[str, bool]] = field(default_factory=dict)

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
    run_timeout: float | None = None  # seconds; past them the run ends `failed`


def _pending_of(db: BaseDb, run: RunRecord) -> tuple[list[PendingToolCall], int]:
    events = db.read_events(run.session_id, types=[PAUSED_EVENT], run_id=run.run_id)
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


def get_paused_run(db: BaseDb, session_id: str, run_id: str, *, leased: bool = False) -> PausedRun:
    """The paused run `run_id`. With `leased` (the caller holds the run's lease), also a
    run whose continuation died (`running`, continued since its last pause)."""
    run = db.get_run(session_id, run_id)
    if run is None:
        raise RunNotFoundError(f"session {session_id!r} has no run {run_id!r}")
    if run.status == "running" and leased:
        stalled = _stalled_continuation(db, run)
        if stalled is not None:
            return stalled
    if run.status != "paused":
        raise RunNotPausedError(
            f"run {run_id!r} is {run.status}, not paused: a paused run is continued once "
            "(it was continued already, or it never paused)",
            run.status,
        )
    pending, step = _pending_of(db, run)
    return PausedRun(run=run, pending=pending, step=step)


class _ContinuationProgressed(Exception):
    """A dead continuation had committed a model step: it cannot be redone from the pause."""


def _stalled_continuation(db: BaseDb, run: RunRecord) -> PausedRun | None:
    """A `running` run whose last continuation stopped (its lease is gone): the pause it
    was continued from, with the answers it committed. None if it was never continued."""
    sid = run.session_id
    marks = db.read_events(sid, types=[PAUSED_EVENT, CONTINUED_EVENT], run_id=run.run_id)
    if len(marks) < 2 or marks[-1].type != CONTINUED_EVENT:
        return None
    pending, step = _pending_of(db, run)
    ids = {p.tool_call_id for p in pending}
    answered: dict[str, tuple[str, bool]] = {}
    for event in db.read_events(sid, after=marks[-1].seq, run_id=run.run_id):
        call_id = str(event.data.get("tool_call_id"))
        if event.type not in _ANSWER_EVENTS or (event.type == "tool_call" and call_id not in ids):
            raise _ContinuationProgressed(event.seq)
        if event.type == "tool_call":
            answered[call_id] = (event.data.get("result") or "", bool(event.data.get("is_error")))
    return PausedRun(run=run, pending=pending, step=step, answered=answered)


def claim_paused_run(
    db: BaseDb,
    session_id: str,
    run_id: str,
    approvals: Mapping[str, Any] | None,
    owner: str,
    lease_seconds: float,
) -> tuple[PausedRun, dict[str, Approval]]:
    """Take a paused run for continuing, exactly once, and the run's lease for `owner`.

    The lease keeps every other continuer out while this one works (and lets one in
    once it expires, if this process dies). The claim is a commit that sets the run
    `running`, based on the session scope's version it read the run at: of two racing
    claims one lands, the other loses the compare-and-swap, reads the run again and
    finds it no longer paused. The caller releases the lease (`BaseDb.release_run`).
    """
    if not db.claim_run(session_id, run_id, owner, lease_seconds):
        raise RunNotPausedError(
            f"run {run_id!r} is being continued by another process (it holds the run's "
            f"lease); if that process died, continue the run again once its lease expires "
            f"(within {lease_seconds:g} s)",
            "running",
        )
    try:
        return _claim(db, session_id, run_id, approvals)
    except BaseException:
        with contextlib.suppress(Exception):
            db.release_run(session_id, run_id, owner)
        raise


def _claim(
    db: BaseDb, session_id: str, run_id: str, approvals: Mapping[str, Any] | None
) -> tuple[PausedRun, dict[str, Approval]]:
    key = ScopeKey("session", session_id)
    give_up = time.monotonic() + CLAIM_SECONDS
    attempt = 0
    while True:
        attempt += 1
        session, versions = db.probe(session_id, [key])
        if session is None:
            raise RunNotFoundError(f"no session {session_id!r}")
        try:
            paused = get_paused_run(db, session_id, run_id, leased=True)
        except _ContinuationProgressed as stopped:
            run = db.get_run(session_id, run_id)
            assert run is not None
            error = (
                f"the process continuing run {run_id!r} stopped after committing more of it "
                f"(event {stopped.args[0]}); its committed work stays, the run cannot be "
                "continued from its pause again"
            )
            run.status, run.error = "failed", error
            commit = _run_commit(session, key, versions[key], run, "run_failed", {"error": error})
        else:
            answers = check_answers(paused.pending, approvals)
            paused.run.status = "running"
            data = {"approvals": {k: a.to_dict() for k, a in answers.items()}}
            commit = _run_commit(
                session, key, versions[key], paused.run, CONTINUED_EVENT, data, f"continue:{run_id}"
            )
        try:
            db.commit(commit)
        except VersionConflict:
            if time.monotonic() > give_up:
                raise
            time.sleep(random.uniform(0, min(0.05, 0.001 * 2 ** min(attempt, 6))))
            continue
        if commit.run is not None and commit.run.status == "failed":
            raise RunNotPausedError(f"run {run_id!r} is failed: {commit.run.error}", "failed")
        return paused, answers


def _run_commit(
    session: SessionRecord,
    key: ScopeKey,
    base_version: int,
    run: RunRecord,
    event_type: str,
    data: dict[str, Any],
    source: str = "continue",
) -> Commit:
    """A commit of a run record and one event, racing on the session scope's version."""
    return Commit(
        session=session,
        writes=[
            ScopeWrite(
                key=key, base_version=base_version, segments=[DeltaSegment(source=source, ops=[])]
            )
        ],
        events=[NewEvent(type=event_type, run_id=run.run_id, data=data)],
        run=run,
        run_id=run.run_id,
    )


def _answer_text(call: PendingToolCall, answer: Approval) -> str:
    if call.kind == "client":
        return answer.result or ""
    reason = f": {answer.reason}" if answer.reason else "."
    return f"The user rejected this call of {call.tool_name}{reason}"


async def drive_continue(
    rt: AgentRuntime, store: StateStore, request: ContinueRequest, emit: Emit | None = None
) -> RunOutput:
    """Continue a paused run: answer its pending calls, commit, run on, end the run; its
    events go to `emit`."""
    spec = request.spec
    db = store.db
    owner, ttl = new_id(), CONTINUE_LEASE_SECONDS
    paused, answers = await db.run_io(
        claim_paused_run, db, spec.session_id, request.run_id, request.approvals, owner, ttl
    )
    lease = RunLease(db, spec.session_id, request.run_id, owner, ttl).start()
    try:
        return await _continue_claimed(rt, store, request, paused, answers, emit)
    finally:
        await lease.arelease()


async def _continue_claimed(
    rt: AgentRuntime,
    store: StateStore,
    request: ContinueRequest,
    paused: PausedRun,
    answers: dict[str, Approval],
    emit: Emit | None,
) -> RunOutput:
    spec = request.spec
    started = time.perf_counter()
    record = paused.run
    metrics = RunMetrics(**{k: v for k, v in record.metrics.items() if k in RunMetrics.__slots__})
    before = [Message.from_dict(m) for m in record.messages]
    result = StepsResult()
    async with agent_lifecycle(
        rt,
        store,
        spec,
        record,
        mode="existing",
        session_user=True,
        step=paused.step,
        metrics=metrics,  # team members count in this run
        run_timeout=request.run_timeout,
    ) as life:
        ctx, writer = life.ctx, life.writer
        emit = masking(emit, ctx.secret_values)  # secret values never leave in an event
        if emit is not None:
            await emit(
                RunStarted(run_id=record.run_id, session_id=spec.session_id, agent_name=rt.name)
            )
        available = {"callback_context": ctx, "run_context": ctx, "agent": rt.agent}
        events = []
        for call in paused.pending:
            answer = answers[call.tool_call_id]
            arguments = answer.arguments if answer.arguments is not None else call.arguments
            recorded = paused.answered.get(call.tool_call_id)
            if recorded is not None:
                # Answered and committed by a continuation that died: not run again.
                text, is_error = recorded
            elif answer.approved and call.kind == "approval":
                approved = ToolCall(call.tool_name, arguments, call.tool_call_id)
                outcome = await bounded(ctx.metadata, call_tool(rt, writer, ctx, approved, answer))
                text, is_error = outcome if isinstance(outcome, tuple) else ("", True)
                metrics.tool_calls += 1
            else:
                text, is_error = _answer_text(call, answer), not answer.approved
            result.messages.append(
                Message(
                    role="tool", content=text, tool_call_id=call.tool_call_id, name=call.tool_name
                )
            )
            if recorded is None:
                events.append(
                    tool_call_event(
                        record.run_id,
                        rt.name,
                        paused.step,
                        call.tool_call_id,
                        call.tool_name,
                        arguments,
                        text,
                        is_error,
                        approval=answer.to_dict(),
                    )
                )
            if emit is not None:
                await emit(
                    ToolCallCompleted(
                        tool_call_id=call.tool_call_id,
                        tool_name=call.tool_name,
                        result=text,
                        is_error=is_error,
                        agent_name=rt.name,
                    )
                )
        changed = await writer.commit(events, run=record, step=paused.step, source="continue")
        if changed is not None and emit is not None:
            await emit(changed)
        history: Sequence[Message] = await history_messages(
            store, spec.session_id, request.history_runs
        )
        await run_steps(
            rt,
            writer,
            ctx,
            [*history, *before],
            metrics,
            result,
            stream=request.stream,
            emit=emit,
            defer_final_commit=not rt.callbacks.after_agent,
        )
        changed, output = await end_run(
            rt, writer, ctx, record, result, before, metrics, available, started
        )
        if emit is not None:
            if changed is not None:
                await emit(changed)
            await emit(RunCompleted(output=output))
        return output
