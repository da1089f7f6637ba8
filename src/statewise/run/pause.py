"""Runs that pause for a person (or a frontend) and are continued later, from anywhere.

A run pauses before a tool call when the tool was declared `requires_confirmation=True`,
when a `before_tool_callback` returns `RequestApproval(...)`, or when the model calls a
*client-side* tool (one the frontend runs, declared per run). Everything the run did so
far is committed; the run record is stored with status `paused` and a `run_paused` event
lists its pending tool calls. `continue_run` answers them (approve, reject with a reason
the model sees, edit the arguments, or give a client tool's result) and goes on with the
session's state as it is *then*.

A paused run is continued exactly once: continuing first claims the run with a
compare-and-swap on the session's version (the claim commit also flips the run record to
`running`), so of two racing continues one wins and the other gets `RunNotPausedError`.
The continuing process holds the run's lease; if it dies, the run can be continued again
once the lease expires (see `run.resume`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from statewise.exceptions import InvalidApprovalError, StateSerializationError
from statewise.state.jsonvalue import to_json_value

__all__ = [
    "Approval",
    "PendingToolCall",
    "RequestApproval",
    "as_approval",
    "check_answers",
]

PAUSED_EVENT = "run_paused"
CONTINUED_EVENT = "run_continued"


@dataclass(kw_only=True, frozen=True, slots=True)
class RequestApproval:
    """Return this from a `before_tool_callback` to pause the run until a person decides.

    `reason` is shown to whoever approves (the web page, an AG-UI interrupt's message).
    When the run is continued with an approval, the callbacks run again with `approval`
    available; returning `RequestApproval` again then is ignored.
    """

    reason: str = "this tool call needs approval"


@dataclass(kw_only=True, slots=True)
class PendingToolCall:
    """A tool call a paused run waits on.

    `kind` is "approval" (a person approves, rejects or edits it) or "client" (a
    client-side tool: the frontend runs it and sends back its result).
    """

    tool_call_id: str
    tool_name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    kind: Literal["approval", "client"] = "approval"
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "tool_call_id": self.tool_call_id,
            "tool_name": self.tool_name,
            "arguments": self.arguments,
            "kind": self.kind,
            "reason": self.reason,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PendingToolCall:
        kind = data.get("kind", "approval")
        return cls(
            tool_call_id=str(data["tool_call_id"]),
            tool_name=str(data["tool_name"]),
            arguments=dict(data.get("arguments") or {}),
            kind="client" if kind == "client" else "approval",
            reason=data.get("reason"),
        )


@dataclass(kw_only=True, frozen=True, slots=True)
class Approval:
    """The answer to one pending tool call.

    `Approval()` approves; `Approval(approved=False, reason="...")` rejects (the model gets
    the reason as the tool's result); `Approval(arguments={...})` approves with edited
    arguments; `Approval(result="...")` answers a client-side tool.
    """

    approved: bool = True
    reason: str | None = None
    arguments: dict[str, Any] | None = None
    result: str | None = None

    @classmethod
    def reject(cls, reason: str = "") -> Approval:
        return cls(approved=False, reason=reason)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"approved": self.approved}
        if self.reason is not None:
            data["reason"] = self.reason
        if self.arguments is not None:
            data["arguments"] = self.arguments
        if self.result is not None:
            data["result"] = self.result
        return data


_WORDS = {"approve": True, "approved": True, "yes": True, "reject": False, "rejected": False}


def as_approval(value: Any, call_id: str = "?") -> Approval:
    """`True`/`False`, "approve"/"reject", a dict like `{"approved": false, "reason": ...}`
    or `{"arguments": {...}}`, or an `Approval`."""
    if isinstance(value, Approval):
        return value
    if isinstance(value, bool):
        return Approval(approved=value)
    if isinstance(value, str) and value.lower() in _WORDS:
        return Approval(approved=_WORDS[value.lower()])
    if isinstance(value, Mapping):
        unknown = set(value) - {"approved", "reason", "arguments", "result"}
        if unknown:
            raise InvalidApprovalError(
                f"approval for tool call {call_id!r} has unknown fields {sorted(unknown)}; "
                "use approved, reason, arguments or result"
            )
        approved = value.get("approved", True)
        reason = value.get("reason")
        arguments = value.get("arguments")
        result = value.get("result")
        if not isinstance(approved, bool):
            raise InvalidApprovalError(f"approval for {call_id!r}: approved must be true or false")
        if reason is not None and not isinstance(reason, str):
            raise InvalidApprovalError(f"approval for {call_id!r}: reason must be a string")
        if arguments is not None and not isinstance(arguments, Mapping):
            raise InvalidApprovalError(f"approval for {call_id!r}: arguments must be a JSON object")
        if arguments is not None:
            arguments = _json_arguments(arguments, call_id)
        if result is not None and not isinstance(result, str):
            result = str(result)
        return Approval(
            approved=approved,
            reason=reason,
            arguments=dict(arguments) if arguments is not None else None,
            result=result,
        )
    raise InvalidApprovalError(
        f"cannot read the approval for tool call {call_id!r}: give true/false, "
        f'"approve"/"reject", an Approval, or {{"approved": ..., "reason": ..., '
        f'"arguments": ...}}; got {type(value).__name__}'
    )


def _json_arguments(arguments: Mapping[str, Any], call_id: str) -> dict[str, Any]:
    """Edited arguments as plain JSON, or the reason they are not: NaN, infinities and lone
    surrogates parse from hostile JSON text but are nothing a tool, the event log or any
    backend can take, so they are refused before anything is claimed or written."""
    try:
        plain: dict[str, Any] = to_json_value(dict(arguments))
    except StateSerializationError as exc:
        where = str(exc).removeprefix("state")
        raise InvalidApprovalError(
            f"approval for tool call {call_id!r}: arguments{where}"
        ) from None
    return plain


def check_answers(
    pending: list[PendingToolCall], approvals: Mapping[str, Any] | None
) -> dict[str, Approval]:
    """Every pending call answered, nothing else: the answers by tool call id."""
    answers = {str(k): as_approval(v, str(k)) for k, v in (approvals or {}).items()}
    known = {p.tool_call_id: p for p in pending}
    unknown = sorted(set(answers) - set(known))
    if unknown:
        raise InvalidApprovalError(
            f"no pending tool call {', '.join(map(repr, unknown))} in this run; it waits on "
            f"{', '.join(map(repr, known)) or 'nothing'}"
        )
    missing = [p.tool_call_id for p in pending if p.tool_call_id not in answers]
    if missing:
        raise InvalidApprovalError(
            f"answer every pending tool call: missing {', '.join(map(repr, missing))}"
        )
    for call in pending:
        answer = answers[call.tool_call_id]
        if call.kind == "approval" and answer.result is not None:
            raise InvalidApprovalError(
                f"tool call {call.tool_call_id!r} ({call.tool_name}) waits for approval: "
                "approve, reject or edit its arguments; a result only answers a client-side tool"
            )
        if call.kind == "client" and answer.approved and answer.result is None:
            raise InvalidApprovalError(
                f"tool call {call.tool_call_id!r} ({call.tool_name}) runs in the client: "
                "give its result (result=...) or reject it"
            )
    return answers
