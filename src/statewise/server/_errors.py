"""RFC 9457 problem details: every error the API returns is `application/problem+json`
with a `title`, the HTTP `status` and a `detail` that says what to fix.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse

from statewise.exceptions import (
    CommitIdExpiredError,
    ConfigurationError,
    DatabaseUnavailableError,
    HistoryCompactedError,
    InvalidApprovalError,
    InvalidIdError,
    InvalidInputError,
    ModelError,
    RunError,
    RunNotFoundError,
    RunNotPausedError,
    RunTimeoutError,
    SessionDeletedError,
    SessionExistsError,
    SessionNotFoundError,
    StaleStateVersionError,
    StateConflictError,
    StateError,
    StatewiseError,
    StorageError,
)

PROBLEM_JSON = "application/problem+json"
log = logging.getLogger("statewise.server")


class Problem(Exception):
    """Raise from a route to answer with a problem document."""

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        title: str | None = None,
        headers: Mapping[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.title = title or HTTPStatus(status).phrase
        self.headers = dict(headers or {})
        self.extra = extra

    def to_dict(self, instance: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "type": "about:blank",
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
        }
        if instance:
            body["instance"] = instance
        body.update(self.extra)
        return body


def problem_response(problem: Problem, instance: str | None = None) -> JSONResponse:
    return JSONResponse(
        problem.to_dict(instance),
        status_code=problem.status,
        media_type=PROBLEM_JSON,
        headers=problem.headers,
    )


def problem_for(exc: BaseException) -> Problem:
    """The problem document for a statewise error (or any other exception)."""
    if isinstance(exc, Problem):
        return exc
    if isinstance(exc, StaleStateVersionError):
        return Problem(412, str(exc), title="State version is stale", current_version=exc.actual)
    if isinstance(exc, SessionDeletedError):
        return Problem(410, str(exc), title="Session deleted")
    if isinstance(exc, RunNotFoundError):
        return Problem(404, str(exc), title="Run not found")
    if isinstance(exc, RunNotPausedError):
        return Problem(409, str(exc), title="Run is not paused", run_status=exc.status)
    if isinstance(exc, InvalidApprovalError):
        return Problem(422, str(exc), title="Invalid approvals")
    if isinstance(exc, SessionNotFoundError):
        return Problem(404, str(exc), title="Session not found")
    if isinstance(exc, SessionExistsError):
        return Problem(409, str(exc), title="Session exists")
    if isinstance(exc, InvalidIdError):
        return Problem(400, str(exc), title="Invalid id")
    if isinstance(exc, StateConflictError):
        return Problem(409, str(exc), title="State conflict")
    if isinstance(exc, StateError):
        return Problem(422, str(exc), title="Invalid state change")
    if isinstance(exc, InvalidInputError):
        return Problem(422, str(exc), title="Invalid run input")
    if isinstance(exc, HistoryCompactedError):
        return Problem(410, str(exc), title="History compacted", oldest_version=exc.oldest)
    if isinstance(exc, CommitIdExpiredError):
        return Problem(409, str(exc), title="Commit id expired")
    if isinstance(exc, DatabaseUnavailableError):
        return Problem(503, str(exc), title="Database unavailable")
    if isinstance(exc, StorageError):
        return Problem(500, str(exc), title="Storage error")
    if isinstance(exc, RunTimeoutError):
        return Problem(504, str(exc), title="Run timed out")
    if isinstance(exc, ModelError):
        return Problem(502, f"{type(exc).__name__}: {exc}", title="Model request failed")
    if isinstance(exc, RunError | ConfigurationError):
        return Problem(500, f"{type(exc).__name__}: {exc}", title="Run failed")
    if isinstance(exc, StatewiseError):
        return Problem(500, f"{type(exc).__name__}: {exc}")
    return Problem(500, "internal error; the server log has the details")


def _validation_problem(exc: RequestValidationError) -> Problem:
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        where = next(e for e in errors if e.get("type") == "json_invalid")
        ctx = where.get("ctx") or {}
        return Problem(
            400,
            f"the request body is not valid JSON: {ctx.get('error', where.get('msg'))}",
            title="Malformed JSON",
        )
    parts = []
    clean = []
    for e in errors:
        loc = ".".join(str(p) for p in e.get("loc", ()))
        parts.append(f"{loc}: {e.get('msg')}")
        clean.append({"loc": list(e.get("loc", ())), "msg": e.get("msg"), "type": e.get("type")})
    return Problem(
        422, "; ".join(parts) or "invalid request", title="Invalid request", errors=clean
    )


def install_error_handlers(app: FastAPI) -> None:
    async def on_problem(request: Request, exc: Exception) -> JSONResponse:
        return problem_response(problem_for(exc), request.url.path)

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        if exc.status_code == 404 and detail == "Not Found":
            detail = f"no route {request.method} {request.url.path}; see /docs"
        if exc.status_code == 400 and detail == "There was an error parsing the body":
            detail = (
                "the request body could not be read as JSON: it is not UTF-8, nests too deeply, "
                "or holds a number with more than 4300 digits"
            )
        if exc.status_code == 405:
            detail = f"{request.method} is not allowed on {request.url.path}; see /docs"
        return problem_response(
            Problem(exc.status_code, detail, headers=exc.headers), request.url.path
        )

    async def on_validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return problem_response(_validation_problem(exc), request.url.path)

    async def on_error(request: Request, exc: Exception) -> JSONResponse:
        problem = problem_for(exc)
        if problem.status >= 500:
            log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        return problem_response(problem, request.url.path)

    app.add_exception_handler(Problem, on_problem)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StatewiseError, on_error)
    app.add_exception_handler(Exception, on_error)
