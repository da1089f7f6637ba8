"""`POST /v1/{kind}/{name}/runs`: a run as one JSON result, or its events as SSE."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from statewise import RunOutput, Sessions
from statewise._workers import run_blocking
from statewise.agent.service import check_writable, validate_id
from statewise.exceptions import SessionExistsError
from statewise.server._auth import Principal
from statewise.server._deps import caller
from statewise.server._errors import Problem, log, problem_for
from statewise.server._registry import KIND_NAMES, Registry, Served
from statewise.server._schema import (
    AUTH,
    BODY,
    DB,
    EVENT_STREAM,
    EVENT_STREAM_DOC,
    RunResult,
    ok,
    problems,
)
from statewise.server._serialize import event_json, needs_read, output_needs_read, sse

Kind = Literal["agents", "teams", "workflows"]
MAX_INPUT_CHARS = 100_000


class RunBody(BaseModel):
    """A run request. Leave `session_id` out to start a new session."""

    model_config = ConfigDict(extra="forbid")

    input: str = Field(max_length=MAX_INPUT_CHARS, description="The user's message.")
    session_id: str | None = Field(
        default=None, min_length=1, max_length=256, description="Continue this session."
    )
    user_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        description="Run as this user (admins only when keys are configured).",
    )
    session_state: dict[str, Any] | None = Field(
        default=None, description="Merged into the session's state before the run."
    )


router = APIRouter(tags=["runs"])


def served_or_404(registry: Registry, kind: str, name: str) -> Served:
    served = registry.get(kind, name)
    if served is None:
        known = ", ".join(f"{s.kind}/{s.name}" for s in registry.all())
        raise Problem(
            404, f"no {KIND_NAMES.get(kind, kind)} named {name!r} here; this server serves: {known}"
        )
    return served


def user_for(principal: Principal, requested: str | None, served: Served) -> str | None:
    if requested is not None:
        validate_id(requested, "user_id")
        if not principal.admin and requested != principal.user_id:
            raise Problem(
                403,
                f"this API key runs as user {principal.user_id!r}; it cannot run as {requested!r}",
            )
        return requested
    if principal.user_id is not None:
        return principal.user_id
    return served.default_user


async def _start(
    served: Served, body: RunBody, session_id: str, user_id: str | None, stream: bool
) -> Any:
    obj = served.obj
    return await obj.arun(
        body.input,
        session_id=session_id,
        user_id=user_id,
        session_state=body.session_state,
        stream=stream,
        run_timeout=served.run_timeout,
    )


RUN_ERRORS = problems(*BODY, *AUTH, 404, 409, 410, *DB, 502, 504)


async def _prepare(
    body: RunBody, kind: str, name: str, registry: Registry, principal: Principal
) -> tuple[Served, str, str | None]:
    served = served_or_404(registry, kind, name)
    if body.session_state:
        principal.check_shared_write(body.session_state, "session_state")
        check_writable(body.session_state)
    user_id = user_for(principal, body.user_id, served)
    session_id = validate_id(body.session_id) if body.session_id else str(uuid.uuid4())
    user_id = await run_blocking(
        _own_session, registry, principal, served, session_id, user_id, body
    )
    return served, session_id, user_id


def _own_session(
    registry: Registry,
    principal: Principal,
    served: Served,
    session_id: str,
    user_id: str | None,
    body: RunBody,
) -> str | None:
    """Find the session or create it (one hop off the loop for both); the user it runs as."""
    found = registry.find_session(session_id)
    if found is None:
        # A new session is created before the run, as a create: when two callers create
        # the same id at once, exactly one gets it. The other joins it only if it may see
        # the winner's session and runs as the same user (one client's parallel first
        # requests); otherwise it gets an error, never a write into (or a read of) the
        # winner's session.
        try:
            served.obj.create_session(session_id, user_id=user_id)
            return user_id
        except SessionExistsError:
            found = registry.find_session(session_id)
            if found is None or found[0].user_id != user_id:
                raise
    if not principal.can_see(found[0]):
        raise Problem(404, f"no session {session_id!r}", title="Session not found")
    if body.user_id is None:
        return found[0].user_id  # the session keeps its owner
    return user_id


CLIENT_GONE = 499  # "client closed request": never read by anyone, a log's status


class ClientGone(Exception):
    """The client disconnected before its answer was ready."""


async def until_disconnected(request: Request, work: Awaitable[Any]) -> Any:
    """`work`'s result, or cancel it when the client disconnects first (as a streamed
    response does): nobody is left to read the answer, so nothing should go on running
    on its behalf. The run's lifecycle records the cancellation and its reason; raises
    `ClientGone` then."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnect(request))
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not task.done():
            task.cancel("the client disconnected before the run finished")
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
    if task.cancelled():
        raise ClientGone(f"client left {request.url.path}")
    return task.result()


async def _disconnect(request: Request) -> None:
    """Returns when the client disconnects (the body is read by then, so the next ASGI
    message is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _event_stream(served: Served, events: AsyncIterator[Any]) -> StreamingResponse:
    return StreamingResponse(
        _stream(events, served.sessions),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@router.post(
    "/v1/{kind}/{name}/runs",
    summary="Run an agent, team or workflow",
    description="Runs to the end and answers with the result. To watch the run as it "
    "happens, use `POST .../runs/stream` (sending `Accept: text/event-stream` here streams "
    "too, as that endpoint does).",
    response_model=None,
    responses={
        **ok(RunResult, "The finished run", headers=["Location"]),
        **RUN_ERRORS,
        **problems(CLIENT_GONE),
    },
)
async def create_run(
    body: RunBody,
    kind: Annotated[Kind, Path(description="agents, teams or workflows")],
    name: Annotated[str, Path(max_length=128)],
    request: Request,
) -> Response:
    registry, principal = caller(request)
    served, session_id, user_id = await _prepare(body, kind, name, registry, principal)
    if "text/event-stream" in request.headers.get("accept", ""):
        events = await _start(served, body, session_id, user_id, stream=True)
        return await _event_stream(served, events)
    try:
        output = await until_disconnected(
            request, _start(served, body, session_id, user_id, stream=False)
        )
    except ClientGone as exc:
        raise Problem(CLIENT_GONE, str(exc), title="Client closed request") from None
    data = await output_json(served.sessions, output)
    return JSONResponse(data, headers={"Location": f"/v1/sessions/{session_id}"})


@router.post(
    "/v1/{kind}/{name}/runs/stream",
    summary="Run an agent, team or workflow, streaming its events",
    description=EVENT_STREAM_DOC,
    response_model=None,
    response_class=StreamingResponse,
    responses={
        200: {"description": "The run's events", "content": {"text/event-stream": EVENT_STREAM}},
        **RUN_ERRORS,
    },
)
async def stream_run(
    body: RunBody,
    kind: Annotated[Kind, Path(description="agents, teams or workflows")],
    name: Annotated[str, Path(max_length=128)],
    request: Request,
) -> StreamingResponse:
    registry, principal = caller(request)
    served, session_id, user_id = await _prepare(body, kind, name, registry, principal)
    events = await _start(served, body, session_id, user_id, stream=True)
    return await _event_stream(served, events)


async def output_json(sessions: Sessions, output: RunOutput) -> dict[str, Any]:
    """A run's output as `Sessions` gives it (redacted by its session's data), read off
    the loop when that needs the database (see `needs_read`)."""
    if output_needs_read(output):
        return await run_blocking(sessions.output_json, output)
    return sessions.output_json(output)


async def _stream(events: AsyncIterator[Any], sessions: Sessions) -> AsyncIterator[bytes]:
    n = 0
    try:
        async for event in events:
            n += 1
            if needs_read(event):
                data = await run_blocking(event_json, event, sessions)
            else:
                data = event_json(event, sessions)
            yield sse(data["event"], data, n)
    except Exception as exc:
        problem = problem_for(exc)
        if problem.status >= 500:
            log.error("streamed run failed", exc_info=exc)
        yield sse("error", problem.to_dict(), n + 1)
