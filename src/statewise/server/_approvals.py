"""Paused runs over HTTP: list the ones waiting for a person, continue one.

`GET /v1/sessions/{id}/paused-runs` lists a session's paused runs with their pending tool
calls; `POST /v1/sessions/{id}/runs/{run_id}/continue` answers them (approve, reject with
a reason the model sees, edit the arguments) and runs on. A paused run is continued once:
a second continue answers 409. `GET /v1/paused-runs` is an approver's inbox: the paused
runs of every session the caller may approve.

Approving is a permission (`create_app(approve=...)`; default: the session's owner or an
admin). A session whose runs the caller may not approve answers 404, as if absent.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi import Path as PathParam
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from statewise._workers import run_blocking
from statewise.agent.service import SessionRecord, validate_id
from statewise.server._auth import ApprovalRule, Principal
from statewise.server._deps import get_principal, get_registry
from statewise.server._errors import Problem
from statewise.server._registry import Registry, Served
from statewise.server._runs import output_json
from statewise.server._schema import (
    SESSION,
    PausedRunInbox,
    PausedRunList,
    RunResult,
    ok,
    problems,
)
from statewise.server._serialize import jsonable, with_times

router = APIRouter(tags=["sessions"])

SessionId = Annotated[str, PathParam(min_length=1, max_length=256)]
RunId = Annotated[str, PathParam(min_length=1, max_length=256)]
Reg = Annotated[Registry, Depends(get_registry)]
Who = Annotated[Principal, Depends(get_principal)]


class ApprovalBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    approved: bool = Field(default=True, description="Run the call (true) or reject it")
    reason: str | None = Field(
        default=None, max_length=2000, description="Why it was rejected; the model sees it"
    )
    arguments: dict[str, Any] | None = Field(
        default=None, description="Run the call with these arguments instead"
    )
    result: str | None = Field(
        default=None, max_length=100_000, description="The result of a client-side tool"
    )


class ContinueBody(BaseModel):
    """Answers to a paused run's pending tool calls, by tool call id."""

    model_config = ConfigDict(extra="forbid")

    approvals: dict[str, ApprovalBody] = Field(
        description="Every pending tool call's answer, by its tool_call_id"
    )


async def get_approve_rule(request: Request) -> ApprovalRule:
    rule: ApprovalRule = request.app.state.statewise_approve
    return rule


Rule = Annotated[ApprovalRule, Depends(get_approve_rule)]


def _approvable(
    registry: Registry, principal: Principal, rule: ApprovalRule, session_id: str
) -> tuple[SessionRecord, Served]:
    validate_id(session_id)
    found = registry.find_session(session_id)
    if found is None or not rule(principal, found[0]):
        raise Problem(404, f"no session {session_id!r}", title="Session not found")
    return found


INBOX_SCAN = 1000
"""`GET /v1/paused-runs` looks through this many of the most recently updated sessions of
each database: a run paused in a session nobody touched since is found by its session."""


def _pausable(served: Served) -> Any:
    if not served.pausable:
        raise Problem(
            409,
            f"{served.kind}/{served.name} does not pause its runs; only agents and teams do",
            title="Run is not paused",
        )
    return served.obj


@router.get(
    "/v1/sessions/{session_id}/paused-runs",
    summary="The session's runs waiting for approval, with their pending tool calls",
    response_model=None,
    responses={**ok(PausedRunList, "The paused runs"), **problems(*SESSION)},
)
def list_paused_runs(
    session_id: SessionId, registry: Reg, principal: Who, rule: Rule
) -> dict[str, Any]:
    _record, served = _approvable(registry, principal, rule, session_id)
    runs = served.sessions.paused_runs(session_id)
    return {
        "session_id": session_id,
        "runs": jsonable([with_times(r.to_dict()) for r in runs]),
    }


@router.get(
    "/v1/paused-runs",
    summary="Every paused run the caller may approve, across sessions",
    response_model=None,
    responses={**ok(PausedRunInbox, "The paused runs, oldest first"), **problems(401, 403)},
)
def list_approvable_runs(registry: Reg, principal: Who, rule: Rule) -> dict[str, Any]:
    found: list[Any] = []
    scanned = 0
    for _db, served in registry.databases():
        for record in served.sessions.list_sessions(limit=INBOX_SCAN):
            scanned += 1
            if rule(principal, record):
                found.extend(served.sessions.paused_runs(record.session_id))
    found.sort(key=lambda p: p.run.updated_at)
    runs = [with_times(p.to_dict()) for p in found]
    return {"runs": jsonable(runs), "scanned_sessions": scanned}


@router.post(
    "/v1/sessions/{session_id}/runs/{run_id}/continue",
    summary="Approve, reject or edit a paused run's tool calls and continue it",
    response_model=None,
    responses={
        **ok(RunResult, "The continued run (paused again if it needs another answer)"),
        **problems(*SESSION, 409, 413, 502, 504),
        404: {**problems(404)[404], "description": "No such session or run (or another user's)"},
        409: {
            **problems(409)[409],
            "description": "The run is not paused (already continued, or never paused)",
        },
        422: {
            **problems(422)[422],
            "description": "Approvals that do not answer every pending tool call",
        },
    },
)
async def continue_run(
    session_id: SessionId,
    run_id: RunId,
    body: ContinueBody,
    registry: Reg,
    principal: Who,
    rule: Rule,
) -> JSONResponse:
    _record, served = await run_blocking(_approvable, registry, principal, rule, session_id)
    validate_id(run_id, "run_id")
    obj = _pausable(served)
    approvals = {k: v.model_dump(exclude_none=True) for k, v in body.approvals.items()}
    output = await obj.acontinue_run(
        run_id, session_id=session_id, approvals=approvals, run_timeout=served.run_timeout
    )
    data = await output_json(served.sessions, output)
    return JSONResponse(data)
