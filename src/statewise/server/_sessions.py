"""Sessions: list, read, delete; state read and version-checked writes; events, history,
diffs, rollback, fork and export. Other users' sessions answer 404, as if absent.

Every route goes through the public session service (`statewise.Sessions`) of the object
that owns the session, whose reads come back redacted by the session's own data: nothing
here redacts.

The routes are plain functions: FastAPI runs them in its thread pool, so a database that
blocks (PostgreSQL, Redis) never stalls the event loop that streams runs. The state GET,
which clients poll during runs, is async and makes its one hop itself.
"""

from __future__ import annotations

import itertools
import json
import re
import uuid
from collections.abc import Iterator
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Header, Query, Response
from fastapi import Path as PathParam
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from statewise.agent.service import (
    RunRecord,
    SessionRecord,
    StateRead,
    merged_listing,
    validate_id,
)
from statewise.server._auth import Principal
from statewise.server._deps import get_principal, get_registry
from statewise.server._errors import Problem
from statewise.server._registry import Registry, Served
from statewise.server._schema import (
    AUTH,
    DB,
    SESSION,
    AppList,
    Diff,
    EventPage,
    ForkResult,
    History,
    Me,
    RunDetail,
    SessionDetail,
    SessionPage,
    StateDoc,
    ok,
    problems,
)
from statewise.server._serialize import jsonable, refine_list_changes, rfc3339, with_times

router = APIRouter(tags=["sessions"])

SessionId = Annotated[str, PathParam(min_length=1, max_length=256)]
Reg = Annotated[Registry, Depends(get_registry)]
Who = Annotated[Principal, Depends(get_principal)]
MAX_PAGE = 1000


def _session(
    registry: Registry, principal: Principal, session_id: str
) -> tuple[SessionRecord, Served]:
    validate_id(session_id)
    found = registry.find_session(session_id)
    if found is None or not principal.can_see(found[0]):
        raise Problem(404, f"no session {session_id!r}", title="Session not found")
    return found


def _read(registry: Registry, principal: Principal, session_id: str) -> tuple[StateRead, Served]:
    """`_session` and the session's state in one read."""
    validate_id(session_id)
    return _seen(registry.read_state(session_id), principal, session_id)


def _seen(
    found: tuple[StateRead, Served] | None, principal: Principal, session_id: str
) -> tuple[StateRead, Served]:
    if found is None or not principal.can_see(found[0].record):
        raise Problem(404, f"no session {session_id!r}", title="Session not found")
    return found


def _state_body(session_id: str, state: dict[str, Any], version: int) -> JSONResponse:
    return JSONResponse(
        {"session_id": session_id, "version": version, "state": state},
        headers={"ETag": f'"{version}"'},
    )


def _read_body(read: StateRead) -> JSONResponse:
    return _state_body(read.record.session_id, read.state, read.version)


def _parse_if_match(value: str | None) -> int | None:
    if value is None or value.strip() == "*":
        return None
    match = re.fullmatch(r'\s*(?:W/)?"?(\d{1,18})"?\s*', value)
    if not match:
        raise Problem(
            400,
            f'If-Match must be a state version such as "3" (as the ETag header gives it), '
            f"got {value[:40]!r}",
            title="Bad If-Match header",
        )
    return int(match.group(1))


def _version_ref(value: int | str | None, what: str) -> int | str | None:
    """A version number or a run id, as the query string or body gives it."""
    if value is None or isinstance(value, int):
        if isinstance(value, int) and value < 0:
            raise Problem(422, f"{what} must be a version >= 0 or a run id, got {value}")
        return value
    if value.isdigit() and len(value) < 19:
        return int(value)
    validate_id(value, what)
    return value


def _check_version(served: Served, session_id: str, ref: int | str | None, what: str) -> None:
    if isinstance(ref, int):
        current = served.sessions.version(session_id)
        if ref > current:
            raise Problem(
                422,
                f"{what}={ref} is past the session's latest state version {current}",
            )


def _tool_calls(messages: list[Any]) -> list[dict[str, Any]]:
    """A run's tool calls, each with the result the tool gave (the chat shows both)."""
    results = {
        m.get("tool_call_id"): m.get("content")
        for m in messages
        if isinstance(m, dict) and m.get("role") == "tool"
    }
    return [
        {
            "name": call.get("name"),
            "arguments": jsonable(call.get("arguments")),
            "result": jsonable(results.get(call.get("id"))),
        }
        for message in messages
        if isinstance(message, dict)
        for call in message.get("tool_calls") or []
        if isinstance(call, dict)
    ]


def _run_summary(run: RunRecord) -> dict[str, Any]:
    return {
        "run_id": run.run_id,
        "status": run.status,
        "agent_name": run.agent_name,
        "input": run.input,
        "content": jsonable(run.content),
        "error": run.error,
        "metrics": run.metrics,
        "tool_calls": _tool_calls(run.messages),
        "created_at": rfc3339(run.created_at),
        "updated_at": rfc3339(run.updated_at),
    }


# ---- the caller and what is served ------------------------------------------------------


@router.get(
    "/v1/apps",
    tags=["meta"],
    summary="The agents, teams and workflows served",
    response_model=None,
    responses={**ok(AppList, "What this server serves"), **problems(*AUTH)},
)
def list_apps(registry: Reg, principal: Who) -> dict[str, Any]:
    return {"apps": [s.describe() for s in registry.all()]}


@router.get(
    "/v1/me",
    tags=["meta"],
    summary="Who the API key belongs to",
    response_model=None,
    responses={**ok(Me, "The caller"), **problems(*AUTH)},
)
def whoami(request_principal: Who, registry: Reg) -> dict[str, Any]:
    return {"user_id": request_principal.user_id, "admin": request_principal.admin}


# ---- sessions ----------------------------------------------------------------------------


@router.get(
    "/v1/sessions",
    summary="List sessions, most recently updated first",
    response_model=None,
    responses={**ok(SessionPage, "A page of sessions"), **problems(400, *AUTH, 422, *DB)},
)
def list_sessions(
    registry: Reg,
    principal: Who,
    user_id: Annotated[str | None, Query(min_length=1, max_length=256)] = None,
    app: Annotated[str | None, Query(min_length=1, max_length=256, description="app_name")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    offset: Annotated[
        int, Query(ge=0, le=1_000_000, description="Skip this many (slower the more it skips)")
    ] = 0,
    cursor: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=2048,
            description="A next_cursor: the page after it, as fast at any depth",
        ),
    ] = None,
) -> dict[str, Any]:
    if user_id is not None:
        validate_id(user_id, "user_id")
    if app is not None:
        validate_id(app, "app")
    empty = {"limit": limit, "offset": offset, "next_offset": None, "next_cursor": None}
    if not principal.admin:
        if user_id is not None and user_id != principal.user_id:
            return {"sessions": [], **empty}
        user_id = principal.user_id
    # Each database lists its first sessions after the cursor; merged in the same order,
    # the first `limit` of them are the page (the cursor is the same on every database).
    records: list[SessionRecord] = []
    for db, _served in registry.databases():
        records.extend(
            db.list_sessions(
                user_id=user_id, app_name=app, limit=limit + offset + 1, offset=0, cursor=cursor
            )
        )
    page = merged_listing(records, offset=offset, limit=limit)
    more = page.next_cursor is not None
    return {
        "sessions": [with_times(r.to_dict()) for r in page.sessions],
        "limit": limit,
        "offset": offset,
        "next_offset": offset + limit if more and cursor is None else None,
        "next_cursor": page.next_cursor,
    }


@router.get(
    "/v1/sessions/{session_id}",
    summary="A session: its record, state, version, runs",
    response_model=None,
    responses={**ok(SessionDetail, "The session", headers=["ETag"]), **problems(*SESSION)},
)
def get_session(session_id: SessionId, registry: Reg, principal: Who) -> JSONResponse:
    read, served = _read(registry, principal, session_id)
    runs = served.sessions.runs(session_id)
    return JSONResponse(
        {
            "session": with_times(read.record.to_dict()),
            "served_by": served.describe(),
            "version": read.version,
            "state": read.state,
            "runs": [_run_summary(r) for r in runs],
        },
        headers={"ETag": f'"{read.version}"'},
    )


@router.delete(
    "/v1/sessions/{session_id}",
    status_code=204,
    summary="Delete a session",
    response_model=None,
    responses={204: {"description": "Deleted"}, **problems(*SESSION)},
)
def delete_session(session_id: SessionId, registry: Reg, principal: Who) -> Response:
    _record, served = _session(registry, principal, session_id)
    served.sessions.delete(session_id)
    return Response(status_code=204)


@router.get(
    "/v1/sessions/{session_id}/runs/{run_id}",
    summary="One run with its messages",
    response_model=None,
    responses={**ok(RunDetail, "The run"), **problems(*SESSION)},
)
def get_run(
    session_id: SessionId,
    run_id: Annotated[str, PathParam(min_length=1, max_length=256)],
    registry: Reg,
    principal: Who,
) -> dict[str, Any]:
    _record, served = _session(registry, principal, session_id)
    run = served.sessions.run(session_id, run_id)
    if run is None:
        raise Problem(404, f"session {session_id!r} has no run {run_id!r}", title="Run not found")
    return {**_run_summary(run), "messages": jsonable(run.messages)}


# ---- state -------------------------------------------------------------------------------


@router.get(
    "/v1/sessions/{session_id}/state",
    summary="The session's state and its version",
    response_model=None,
    responses={**ok(StateDoc, "The state", headers=["ETag"]), **problems(*SESSION)},
)
async def get_state(session_id: SessionId, registry: Reg, principal: Who) -> JSONResponse:
    # The one route readers poll while runs write: the read goes through the database's
    # async driver on the loop where it has one, so it never queues behind a run's work in
    # a thread (a sync route would take a thread for its dependencies' sake too).
    validate_id(session_id)
    read, _served = _seen(await registry.aread_state(session_id), principal, session_id)
    return _read_body(read)


STATE_WRITE_ERRORS = problems(*SESSION, 409, 412, 413)

IfMatch = Annotated[
    str | None,
    Header(
        alias="If-Match",
        description="The state version the change is based on (the ETag); 412 if stale.",
    ),
]


@router.put(
    "/v1/sessions/{session_id}/state",
    summary="Replace the session's state",
    response_model=None,
    responses={**ok(StateDoc, "The new state", headers=["ETag"]), **STATE_WRITE_ERRORS},
)
def put_state(
    session_id: SessionId,
    registry: Reg,
    principal: Who,
    state: Annotated[dict[str, Any], Body(description="The whole new state")],
    if_match: IfMatch = None,
) -> JSONResponse:
    _record, served = _session(registry, principal, session_id)
    principal.check_shared_write(state, "this PUT")
    expected = _parse_if_match(if_match)
    new_state, version = served.sessions.replace_state(session_id, state, if_version=expected)
    return _state_body(session_id, new_state, version)


@router.patch(
    "/v1/sessions/{session_id}/state",
    summary="Change the session's state with a JSON merge patch (RFC 7396)",
    response_model=None,
    responses={**ok(StateDoc, "The new state", headers=["ETag"]), **STATE_WRITE_ERRORS},
)
def patch_state(
    session_id: SessionId,
    registry: Reg,
    principal: Who,
    patch: Annotated[
        dict[str, Any],
        Body(
            media_type="application/merge-patch+json",
            description="Keys to set; null deletes a key; objects merge recursively.",
        ),
    ],
    if_match: IfMatch = None,
) -> JSONResponse:
    _record, served = _session(registry, principal, session_id)
    principal.check_shared_write(patch, "this PATCH")
    expected = _parse_if_match(if_match)
    new_state, version = served.sessions.merge_patch_state(session_id, patch, if_version=expected)
    return _state_body(session_id, new_state, version)


# ---- history -----------------------------------------------------------------------------


@router.get(
    "/v1/sessions/{session_id}/events",
    summary="The session's event log, paged",
    response_model=None,
    responses={**ok(EventPage, "A page of events"), **problems(*SESSION)},
)
def list_events(
    session_id: SessionId,
    registry: Reg,
    principal: Who,
    after: Annotated[int | None, Query(ge=0, le=2**62, description="Events after this seq")] = None,
    before: Annotated[
        int | None, Query(ge=0, le=2**62, description="Events before this seq")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    run_id: Annotated[str | None, Query(min_length=1, max_length=256)] = None,
) -> dict[str, Any]:
    _record, served = _session(registry, principal, session_id)
    if after is None and before is None:
        after = 0
    events = served.sessions.events(
        session_id, after=after, before=before, limit=limit, run_id=run_id
    )
    return {
        "events": [with_times(jsonable(e.to_dict())) for e in events],
        "next_after": events[-1].seq if len(events) == limit and events else None,
    }


HISTORY_PAGE = 100


@router.get(
    "/v1/sessions/{session_id}/history",
    summary="The commits of the session's state, a page at a time",
    description="Oldest first. `after_version` pages forward from a version (the next "
    "page starts after `next_after_version`); `before` pages back from a version (the "
    "next older page is `before=next_before`). Without either, the first page.",
    response_model=None,
    responses={**ok(History, "A page of commits, oldest first"), **problems(*SESSION)},
)
def get_history(
    session_id: SessionId,
    registry: Reg,
    principal: Who,
    after_version: Annotated[int, Query(ge=0, le=2**62)] = 0,
    before: Annotated[
        int | None, Query(ge=1, le=2**62, description="Commits before this version")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = HISTORY_PAGE,
) -> dict[str, Any]:
    _record, served = _session(registry, principal, session_id)
    history = served.sessions.get_state_history(
        session_id, limit=limit, after_version=after_version, before=before
    )
    full = len(history) == limit
    return {
        "session_id": session_id,
        "history": [with_times(e) for e in jsonable(history)],
        "next_after_version": history[-1]["version"] if full and before is None else None,
        "next_before": (
            history[0]["version"]
            if before is not None and history and history[0]["version"] > after_version + 1
            else None
        ),
    }


@router.get(
    "/v1/sessions/{session_id}/diff",
    summary="What changed between two versions or runs",
    response_model=None,
    responses={**ok(Diff, "The changes"), **problems(*SESSION)},
)
def get_diff(
    session_id: SessionId,
    registry: Reg,
    principal: Who,
    from_: Annotated[
        str | None, Query(alias="from", max_length=256, description="Version or run id")
    ] = None,
    to: Annotated[str | None, Query(max_length=256, description="Version or run id")] = None,
    run: Annotated[
        str | None,
        Query(min_length=1, max_length=256, description="The changes this one run made"),
    ] = None,
) -> dict[str, Any]:
    _record, served = _session(registry, principal, session_id)
    start: int | str | None
    end: int | str | None
    if run is not None:
        validate_id(run, "run")
        versions = served.sessions.run_versions(session_id, run)
        if not versions and served.sessions.run(session_id, run) is None:
            raise Problem(404, f"session {session_id!r} has no run {run!r}", title="Run not found")
        if not versions:
            return {"session_id": session_id, "run": run, "from": None, "to": None, "changes": []}
        start, end = min(versions) - 1, max(versions)
    else:
        start = _version_ref(from_, "from") if from_ else 0
        end = _version_ref(to, "to") if to else None
        _check_version(served, session_id, start, "from")
        _check_version(served, session_id, end, "to")
    changes = served.sessions.diff_state(session_id, from_=start or 0, to=end)
    return {
        "session_id": session_id,
        "run": run,
        "from": start,
        "to": end,
        "changes": jsonable(refine_list_changes(changes)),
    }


class RollbackBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    to: int | str = Field(description="A state version, or a run id (the state after it)")
    include_shared: bool = Field(
        default=False,
        description="Also bring the session's user: and app: scopes back (shared with "
        "other sessions)",
    )


@router.post(
    "/v1/sessions/{session_id}/rollback",
    summary="Bring the state back, as a new commit",
    response_model=None,
    responses={
        **ok(StateDoc, "The state after the rollback", headers=["ETag"]),
        **problems(*SESSION, 409, 413),
    },
)
def rollback(
    session_id: SessionId, body: RollbackBody, registry: Reg, principal: Who
) -> JSONResponse:
    _record, served = _session(registry, principal, session_id)
    if body.include_shared and not principal.admin:
        raise Problem(
            403,
            "include_shared=true rolls back the app: scope, which every user of the app "
            "shares: only an admin key may do that",
            title="Shared state needs an admin key",
        )
    to = _version_ref(body.to, "to")
    assert to is not None
    _check_version(served, session_id, to, "to")
    served.sessions.rollback_state(session_id, to=to, include_shared=body.include_shared)
    return _read_body(served.sessions.read_state(session_id))


class ForkBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    at: int | str | None = Field(default=None, description="Version or run id; default: now")
    new_session_id: str | None = Field(default=None, min_length=1, max_length=256)


@router.post(
    "/v1/sessions/{session_id}/fork",
    status_code=201,
    summary="A new session from a past state",
    response_model=None,
    responses={
        **ok(ForkResult, "The new session's state", status=201, headers=["Location"]),
        **problems(*SESSION, 409, 413),
    },
)
def fork(
    session_id: SessionId, registry: Reg, principal: Who, body: ForkBody | None = None
) -> JSONResponse:
    body = body or ForkBody()
    _record, served = _session(registry, principal, session_id)
    at = _version_ref(body.at, "at")
    _check_version(served, session_id, at, "at")
    new_id = validate_id(body.new_session_id) if body.new_session_id else str(uuid.uuid4())
    if registry.find_session(new_id) is not None:
        raise Problem(409, f"session {new_id!r} already exists", title="Session exists")
    served.sessions.fork_session(session_id, at=at, new_session_id=new_id)
    read = served.sessions.read_state(new_id)
    return JSONResponse(
        {
            "session_id": new_id,
            "forked_from": session_id,
            "version": read.version,
            "state": read.state,
        },
        status_code=201,
        headers={"Location": f"/v1/sessions/{new_id}"},
    )


@router.get(
    "/v1/sessions/{session_id}/export",
    summary="The session as JSON Lines (session, deltas, events, runs)",
    response_model=None,
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "One JSON object per line; `type` says what each line is",
            "content": {
                "application/jsonl": {
                    "schema": {"type": "string"},
                    "itemSchema": {"type": "object", "additionalProperties": True},
                }
            },
        },
        **problems(*SESSION),
    },
)
def export(session_id: SessionId, registry: Reg, principal: Who) -> StreamingResponse:
    _record, served = _session(registry, principal, session_id)
    lines = served.sessions.iter_export(session_id)  # redacted, read a page at a time
    first = next(lines)  # a session deleted meanwhile answers 404 here, not mid-stream

    def body() -> Iterator[bytes]:
        # Starlette iterates a plain iterator in its thread pool, a hop per item: whole
        # lines are sent in chunks of about EXPORT_CHUNK bytes, so a long session streams
        # out in constant memory without a hop per line.
        chunk: list[bytes] = []
        size = 0
        for line in itertools.chain([first], lines):
            data = (json.dumps(jsonable(line)) + "\n").encode()
            chunk.append(data)
            size += len(data)
            if size >= EXPORT_CHUNK:
                yield b"".join(chunk)
                chunk, size = [], 0
        if chunk:
            yield b"".join(chunk)

    return StreamingResponse(
        body(),
        media_type="application/jsonl",
        headers={
            "Content-Disposition": f'attachment; filename="session-{_safe(session_id)}.jsonl"'
        },
    )


EXPORT_CHUNK = 64 * 1024


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)[:80]
