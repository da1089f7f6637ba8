"""What `/openapi.json` says: response models, the problem document every error uses, the
statuses each route can answer, and the session state typed from the served objects'
`state_schema`.

Routes declare their bodies here with `responses=` only (no `response_model`), so FastAPI
never filters or re-validates what a handler returns; the tests check that what the server
sends matches these declarations (schemathesis, and a client generated from the schema).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime
from http import HTTPStatus
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, WithJsonSchema

from statewise.agent.service import REDACTED

if TYPE_CHECKING:
    from statewise.server._registry import Registry

PROBLEM_JSON = "application/problem+json"
STATE_REF = "#/components/schemas/SessionState"
PROBLEM_REF = "#/components/schemas/Problem"

# ---- errors ------------------------------------------------------------------------------


class ValidationIssue(BaseModel):
    """One reason a request was refused (422)."""

    loc: list[str | int] = Field(description="Where: e.g. ['body', 'input']")
    msg: str
    type: str | None = None


class ProblemDetails(BaseModel):
    """An error, as RFC 9457 problem details (`application/problem+json`)."""

    model_config = ConfigDict(extra="allow", title="Problem")

    type: str = Field(default="about:blank", description="Always about:blank")
    title: str = Field(description="A short summary of the kind of error")
    status: int = Field(description="The HTTP status code")
    detail: str = Field(description="What went wrong and what to change")
    instance: str | None = Field(default=None, description="The request path")
    errors: list[ValidationIssue] | None = Field(
        default=None, description="422 only: each invalid part of the request"
    )
    current_version: int | None = Field(
        default=None, description="412 only: the state version to base the change on"
    )


_WHY: dict[int, str] = {
    400: "Malformed request: invalid JSON, an invalid id or a bad If-Match header",
    401: "No API key, or an invalid one (only when the server has API keys)",
    403: "The API key may not do this, or (no API keys configured) the client is remote",
    404: "No such session, run, agent, team or workflow (others' sessions look absent)",
    409: "Conflict: the session already exists, or a change conflicts with another",
    410: "The session was deleted while the request was using it",
    412: "If-Match names a stale state version; `current_version` is the latest",
    413: "The request body is larger than the server's limit",
    422: "The request is well-formed but invalid; `errors` lists each reason",
    499: "The client disconnected before the run finished: the run was cancelled and ends "
    "failed with that reason (nobody receives this answer; the access log shows it)",
    500: "The run or the server failed; the detail says why",
    502: "The model provider failed (after retries)",
    503: "The database is unavailable",
    504: "The run passed its run_timeout; it is recorded as failed",
}


def problems(*codes: int) -> dict[int | str, dict[str, Any]]:
    """`responses=` entries declaring these statuses with the problem schema."""
    return {
        code: {
            "description": _WHY[code] if code in _WHY else HTTPStatus(code).phrase,
            "content": {PROBLEM_JSON: {"schema": {"$ref": PROBLEM_REF}}},
        }
        for code in codes
    }


def ok(
    model: type[BaseModel], description: str, *, status: int = 200, headers: Iterable[str] = ()
) -> dict[int | str, dict[str, Any]]:
    """A `responses=` entry for the success body (declared, never re-validated)."""
    entry: dict[str, Any] = {"model": model, "description": description}
    if headers:
        entry["headers"] = {name: _HEADERS[name] for name in headers}
    return {status: entry}


_HEADERS: dict[str, dict[str, Any]] = {
    "ETag": {
        "description": 'The state version, quoted ("3"): send it back as If-Match',
        "schema": {"type": "string"},
    },
    "Location": {"description": "The session's URL", "schema": {"type": "string"}},
}

# Statuses shared by groups of routes.
AUTH = (401, 403)  # every /v1 route: a missing/invalid key; a remote client without keys
DB = (500, 503)  # anything that reads or writes the database
BODY = (400, 413, 422)  # anything with a JSON body
SESSION = (400, *AUTH, 404, 410, 422, *DB)  # routes under /v1/sessions/{session_id}

# ---- the session state -------------------------------------------------------------------

_STATE_MARK = "x-statewise-session-state"
SessionState = Annotated[dict[str, Any], WithJsonSchema({"type": "object", _STATE_MARK: True})]
"""A session's state: the served objects' `state_schema` when they have one (the schema
points at `#/components/schemas/SessionState`, see `link_state`)."""


def link_state(node: Any) -> Any:
    """Replace each SessionState placeholder in a schema with a `$ref` to the component
    (pydantic cannot refer to a component it did not make)."""
    if isinstance(node, dict):
        if node.get(_STATE_MARK):
            extra = {k: v for k, v in node.items() if k in ("description", "title")}
            return {"$ref": STATE_REF, **extra}
        return {k: link_state(v) for k, v in node.items()}
    if isinstance(node, list):
        return [link_state(v) for v in node]
    return node


def state_components(registry: Registry) -> dict[str, Any]:
    """`SessionState` (and what it refers to) for `components.schemas`.

    One served object with a `state_schema`: that schema. Several, or some without one:
    any of them (an object without a schema allows any JSON object). Keys the schema does
    not declare are allowed (the engine validates declared keys only), declared keys may
    be missing (only the keys a commit touches are checked), and secret keys read "***".
    """
    out: dict[str, Any] = {}
    variants: list[dict[str, Any]] = []
    untyped = False
    for served in registry.all():
        schema = getattr(served.obj, "schema", None)
        tp = getattr(schema, "type", None)
        if tp is None:
            untyped = True
            continue
        prefix = "State" + "".join(
            p[:1].upper() + p[1:] for p in re.split(r"[^A-Za-z0-9]+", served.name) if p
        )
        try:
            js = TypeAdapter(tp).json_schema(
                mode="serialization", ref_template=f"#/components/schemas/{prefix}_{{model}}"
            )
        except Exception:  # a type JSON Schema cannot express: say "any object"
            untyped = True
            continue
        for name, sub in js.pop("$defs", {}).items():
            out[f"{prefix}_{name}"] = sub
        js.pop("required", None)
        js["title"] = prefix
        js["description"] = (
            f"The state of {served.kind_name} {served.name!r}'s sessions (its state_schema)."
        )
        properties = js.setdefault("properties", {})
        for key in served.sessions.secret_keys(served.app_name or "default"):
            properties[key] = {
                "const": REDACTED,
                "type": "string",
                "description": "A secret key: its value is never sent",
            }
        out[prefix] = js
        variants.append({"$ref": f"#/components/schemas/{prefix}"})
    free = {"type": "object", "additionalProperties": True}
    if not variants:
        state: dict[str, Any] = {**free, "description": "The session's state (any JSON object)"}
    elif len(variants) == 1 and not untyped:
        state = variants[0]
    else:
        state = {
            "anyOf": [*variants, free] if untyped else variants,
            "description": "The state of a session of one of the served objects",
        }
    out["SessionState"] = state
    return out


# ---- bodies ------------------------------------------------------------------------------


class Health(BaseModel):
    status: str = Field(description='"ok"')
    auth: bool = Field(description="Whether the server needs API keys")


class ServedApp(BaseModel):
    kind: str = Field(description="agents, teams or workflows")
    name: str
    app_name: str | None
    description: str | None
    runs_url: str = Field(description="POST here to run it")
    sends_history: bool = Field(
        description="Whether earlier runs of the session go to the model with each new run "
        "(add_history_to_context); if not, the model sees only the state and this input"
    )


class AppList(BaseModel):
    apps: list[ServedApp]


class Me(BaseModel):
    user_id: str | None = Field(description="The user the API key acts as (null: no keys)")
    admin: bool


class RunMetrics(BaseModel):
    input_tokens: int
    output_tokens: int
    total_tokens: int
    model_requests: int
    tool_calls: int
    duration: float
    time_to_first_token: float | None
    model: str | None = Field(default=None, description="The model that answered (provider:id)")


class PendingToolCall(BaseModel):
    """A tool call a paused run waits on."""

    tool_call_id: str
    tool_name: str
    arguments: Any
    kind: str = Field(description="approval, or client (a tool the client runs)")
    reason: str | None


class RunResult(BaseModel):
    """A finished (or paused) run."""

    run_id: str
    session_id: str
    user_id: str | None
    agent_name: str | None
    status: str = Field(description="completed, paused, failed, ...")
    pending_tool_calls: list[PendingToolCall] = Field(
        description="A paused run's tool calls waiting for an answer (empty otherwise)"
    )
    content: Any = Field(description="The answer: text, or structured output")
    metrics: RunMetrics
    conflicts: list[dict[str, Any]] = Field(description="State conflicts the run resolved")
    session_state: SessionState = Field(description="The state as the run left it")


class PausedRun(BaseModel):
    run_id: str
    session_id: str
    agent_name: str | None
    input: Any
    status: str
    pending_tool_calls: list[PendingToolCall]
    updated_at: datetime = Field(description="RFC 3339, UTC")


class PausedRunList(BaseModel):
    session_id: str
    runs: list[PausedRun]


class PausedRunInbox(BaseModel):
    """Paused runs the caller may approve, across sessions, oldest first."""

    runs: list[PausedRun]
    scanned_sessions: int = Field(
        description="How many of the most recently updated sessions were looked through"
    )


class SessionInfo(BaseModel):
    session_id: str
    user_id: str | None
    app_name: str | None
    kind: str | None = Field(description="agent, team or workflow")
    created_at: datetime = Field(description="RFC 3339, UTC")
    updated_at: datetime = Field(description="RFC 3339, UTC")
    last_seq: int
    metadata: dict[str, Any] | None


class SessionPage(BaseModel):
    sessions: list[SessionInfo]
    limit: int
    offset: int
    next_offset: int | None = Field(description="Pass as offset for the next page")
    next_cursor: str | None = Field(
        default=None,
        description="Pass as cursor for the next page (as fast at any depth); null on the last",
    )


class ToolCallSummary(BaseModel):
    name: str | None
    arguments: Any
    result: str | None = Field(default=None, description="What the tool answered")


class RunSummary(BaseModel):
    run_id: str
    status: str
    agent_name: str | None
    input: Any
    content: Any
    error: str | None
    metrics: dict[str, Any] | None
    tool_calls: list[ToolCallSummary]
    created_at: datetime = Field(description="RFC 3339, UTC")
    updated_at: datetime = Field(description="RFC 3339, UTC")


class RunDetail(RunSummary):
    messages: list[Any] = Field(description="The run's messages, as sent to the model")


class SessionDetail(BaseModel):
    session: SessionInfo
    served_by: ServedApp
    version: int = Field(description="The state version (also the ETag)")
    state: SessionState
    runs: list[RunSummary]


class StateDoc(BaseModel):
    """A session's state at a version. The ETag header carries the version too."""

    session_id: str
    version: int
    state: SessionState


class ForkResult(StateDoc):
    forked_from: str


class Event(BaseModel):
    session_id: str
    seq: int
    type: str
    run_id: str | None
    data: dict[str, Any]
    created_at: datetime = Field(description="RFC 3339, UTC")


class EventPage(BaseModel):
    events: list[Event]
    next_after: int | None = Field(description="Pass as after for the next page")


class Commit(BaseModel):
    version: int
    run_id: str | None
    step: int | None
    sources: list[str | None]
    ops: list[dict[str, Any]] = Field(description="JSON-patch-like operations")
    conflicts: list[dict[str, Any]]
    created_at: datetime = Field(description="RFC 3339, UTC")


class History(BaseModel):
    session_id: str
    history: list[Commit]
    next_after_version: int | None = Field(
        default=None, description="The next page forward: `after_version=` this (None: last)"
    )
    next_before: int | None = Field(
        default=None, description="Paging back: the next older page is `before=` this"
    )


class Change(BaseModel):
    path: list[str | int]
    kind: str = Field(description="added, removed or changed")
    before: Any = None
    after: Any = None


class Diff(BaseModel):
    session_id: str
    run: str | None
    from_: int | str | None = Field(alias="from")
    to: int | str | None
    changes: list[Change]


EVENT_STREAM_DOC = """\
Server-Sent Events, one per run event: `event:` names it (run_started, content_delta,
tool_call_started, tool_call_completed, state_changed, step_started, step_completed,
run_completed, ...), `id:` counts from 1 and `data:` is the event as JSON. The last event is
`run_completed` (its `output` is the finished run) or `error` (its data is a problem
document)."""

EVENT_STREAM: dict[str, Any] = {
    "schema": {"type": "string", "description": "text/event-stream"},
    "itemSchema": {
        "type": "object",
        "properties": {
            "event": {"type": "string"},
            "id": {"type": "string"},
            "data": {"type": "string", "contentMediaType": "application/json"},
        },
        "required": ["event", "data"],
    },
}
