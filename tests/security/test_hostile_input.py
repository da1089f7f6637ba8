"""Hostile input against every backend: each case is a clear, typed error, nothing is
persisted, and the session stays readable afterwards.

One table of cases drives the Python API (state API, update_session_state, merge patch,
runs); the run cases check that a bad write from a tool or from the model comes back to
the model as a tool error while the run goes on."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from statewise import Agent
from statewise.agent.sessions import merge_patch_session_state, replace_session_state
from statewise.db.base import BaseDb
from statewise.db.records import ScopeKey
from statewise.db.testing import Harness
from statewise.exceptions import (
    InvalidIdError,
    InvalidInputError,
    ReservedKeyError,
    StateError,
    StateSerializationError,
)
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo, ToolCall
from statewise.models._assemble import parse_arguments
from statewise.state.jsonvalue import MAX_DEPTH

SID = "victim"


def nested(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = {"d": value}
    return value


@dataclass
class Case:
    name: str
    act: Callable[[Agent], Any]
    error: type[BaseException]
    message: str


def _set(key: str, value: Any) -> Callable[[Agent], Any]:
    return lambda a: a.state.for_session(SID).set(key, value)


CASES = [
    Case("state.set __ttl__", _set("__ttl__", {"items": 0}), ReservedKeyError, "reserved"),
    Case("state.set __class__", _set("__class__", 1), ReservedKeyError, "reserved"),
    Case("state.set user:__x__", _set("user:__secrets__", []), ReservedKeyError, "reserved"),
    Case(
        "state.delete __ttl__",
        lambda a: a.state.for_session(SID).delete("__ttl__"),
        ReservedKeyError,
        "reserved",
    ),
    Case(
        "update_session_state __ttl__",
        lambda a: a.update_session_state({"__ttl__": "garbage"}, SID),
        ReservedKeyError,
        "reserved",
    ),
    Case(
        "merge patch __ttl__",
        lambda a: merge_patch_session_state(a, SID, {"__ttl__": {"count": 1}}),
        ReservedKeyError,
        "reserved",
    ),
    Case(
        "merge patch deletes __ttl__",
        lambda a: merge_patch_session_state(a, SID, {"__ttl__": None}),
        ReservedKeyError,
        "reserved",
    ),
    Case(
        "replace with __ttl__",
        lambda a: replace_session_state(a, SID, {"items": [], "__ttl__": 5}),
        ReservedKeyError,
        "reserved",
    ),
    Case(
        "run session_state __ttl__",
        lambda a: a.run("hi", session_id=SID, session_state={"__ttl__": {"items": 0}}),
        ReservedKeyError,
        "reserved",
    ),
    Case("NaN value", _set("x", float("nan")), StateSerializationError, "NaN"),
    Case("infinity value", _set("x", [float("inf")]), StateSerializationError, "infinity"),
    Case("lone surrogate value", _set("x", "ok \ud800"), StateSerializationError, "surrogate"),
    Case("lone surrogate key", _set("\udfff", 1), StateSerializationError, "surrogate"),
    Case(
        "lone surrogate nested key",
        _set("x", {"a": {"\ud800b": 1}}),
        StateSerializationError,
        "surrogate",
    ),
    Case(
        "lone surrogate session id",
        lambda a: a.state.for_session("s\ud800").set("x", 1),
        InvalidIdError,
        "surrogate",
    ),
    Case(
        "lone surrogate run session id",
        lambda a: a.run("hi", session_id="\ud800"),
        InvalidIdError,
        "surrogate",
    ),
    Case(
        "lone surrogate user id",
        lambda a: a.run("hi", session_id=SID, user_id="u\udc00"),
        InvalidIdError,
        "surrogate",
    ),
    Case(
        "lone surrogate run input",
        lambda a: a.run("hello \ud800", session_id=SID),
        InvalidInputError,
        "surrogate",
    ),
    Case(
        "lone surrogate run session_state",
        lambda a: a.run("hi", session_id=SID, session_state={"x": "\ud800"}),
        StateSerializationError,
        "surrogate",
    ),
    Case(
        f"nesting {MAX_DEPTH + 1} levels",
        _set("x", nested(MAX_DEPTH + 1)),
        StateSerializationError,
        f"deeper than {MAX_DEPTH}",
    ),
    Case("nesting 480 levels", _set("x", nested(480)), StateSerializationError, "deeper"),
    Case(
        "nesting 600 levels by merge patch",
        lambda a: merge_patch_session_state(a, SID, {"x": nested(600)}),
        StateSerializationError,
        "deeper",
    ),
    Case("huge int", _set("x", 10**5000), StateSerializationError, "too large"),
    Case("huge negative int", _set("x", [-(2**5000)]), StateSerializationError, "too large"),
    Case("set value", _set("x", {1, 2}), StateSerializationError, "store a list"),
    Case("bytes value", _set("x", b"\x00"), StateSerializationError, "bytes"),
    Case("object value", _set("x", object()), StateSerializationError, "not JSON"),
    Case("function value", _set("x", print), StateSerializationError, "functions"),
    Case("non-str key", _set("x", {1: "a"}), StateSerializationError, "not a string"),
    Case(
        "50 MB string",
        _set("x", "a" * (50 * 1024 * 1024)),
        StateSerializationError,
        "too long",
    ),
    Case(
        "increment past the int limit",
        lambda a: a.state.for_session(SID).increment("count", 2**4096),
        StateSerializationError,
        "too large",
    ),
    Case(
        "temp key outside a run",
        _set("temp:x", 1),
        StateError,
        "temp:",
    ),
    Case(
        "empty session id",
        lambda a: a.state.for_session(" ").set("x", 1),
        InvalidIdError,
        "empty",
    ),
    Case(
        "control characters in session id",
        lambda a: a.state.for_session("a\x00b").set("x", 1),
        InvalidIdError,
        "control",
    ),
    Case(
        "session id ending in a newline",
        lambda a: a.state.for_session("bad id\n").set("x", 1),
        InvalidIdError,
        "control",
    ),
    Case(
        "overlong session id",
        lambda a: a.state.for_session("s" * 300).set("x", 1),
        InvalidIdError,
        "limit",
    ),
]


def _fingerprint(db: BaseDb) -> tuple[Any, ...]:
    """Everything a write would change: the scope versions, the event log, the runs."""
    record, versions = db.probe(
        SID,
        [ScopeKey("session", SID), ScopeKey("user", "mallory"), ScopeKey("app", "target")],
    )
    events = db.read_events(SID)
    return (
        record.last_seq if record else None,
        versions,
        [(e.seq, e.type) for e in events],
        [r.run_id for r in db.read_runs(SID)],
    )


def _model(messages: list[Message], info: RequestInfo) -> ModelResponse:
    return ModelResponse(content="ok")


def make_agent(db: BaseDb, model: Any = None, **kwargs: Any) -> Agent:
    return Agent(
        name="target",
        model=model or FunctionModel(_model),
        db=db,
        user_id="mallory",
        session_state={"items": ["a"], "count": 1},
        **kwargs,
    )


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_input_is_a_clear_error_and_persists_nothing(backend: Harness, case: Case) -> None:
    agent = make_agent(backend.db)
    agent.run("hello", session_id=SID)
    agent.state.for_session(SID).set("ephemeral", 1, ttl=3600)
    before = _fingerprint(backend.db)
    state_before = agent.get_session_state(SID)
    with pytest.raises(case.error, match=re.escape(case.message)):
        case.act(agent)
    assert _fingerprint(backend.db) == before
    # A fresh process sees the same, readable session.
    other = make_agent(backend.reopen())
    assert other.get_session_state(SID) == state_before
    assert other.run("again", session_id=SID).status == "completed"


# ---- during a run: a tool or the model sends something bad ------------------------------


def writes_ttl(session_state: dict[str, Any]) -> str:
    """Write the engine's bookkeeping."""
    session_state["__ttl__"] = "garbage"
    return "done"


def writes_nested_ttl(session_state: dict[str, Any]) -> str:
    """Write inside the engine's bookkeeping."""
    session_state["__ttl__"]["items"] = 0
    return "done"


def writes_surrogate(session_state: dict[str, Any]) -> str:
    """Write a lone surrogate."""
    session_state["x"] = "\ud800"
    return "done"


def returns_surrogate() -> str:
    """Return a lone surrogate."""
    return "result \udc80"


def raises_surrogate() -> str:
    """Raise with a lone surrogate in the message."""
    raise ValueError("bad \ud800 thing")


def echo(value: Any = None) -> str:
    """Echo a value.

    Args:
        value: Anything.
    """
    return "echoed"


RUN_CASES: list[tuple[str, ToolCall, str]] = [
    ("tool writes __ttl__", ToolCall("writes_ttl", {}, "c1"), "reserved"),
    ("tool writes inside __ttl__", ToolCall("writes_nested_ttl", {}, "c1"), "reserved"),
    (
        "agentic tool sets __ttl__",
        ToolCall("update_session_state", {"set": {"__ttl__": {"items": 0}}}, "c1"),
        "reserved",
    ),
    (
        "agentic tool deletes __ttl__",
        ToolCall("update_session_state", {"delete": ["__ttl__"]}, "c1"),
        "reserved",
    ),
    ("tool writes a lone surrogate", ToolCall("writes_surrogate", {}, "c1"), "surrogate"),
    ("tool returns a lone surrogate", ToolCall("returns_surrogate", {}, "c1"), "surrogate"),
    ("tool raises with a lone surrogate", ToolCall("raises_surrogate", {}, "c1"), "bad"),
    ("NaN arguments", ToolCall("echo", {"value": float("nan")}, "c1"), "not valid JSON"),
    ("Infinity arguments", ToolCall("echo", {"value": [float("-inf")]}, "c1"), "not valid JSON"),
    ("lone surrogate arguments", ToolCall("echo", {"value": "\ud800"}, "c1"), "surrogate"),
    ("deep arguments", ToolCall("echo", {"value": nested(700)}, "c1"), "deeper"),
    ("huge int arguments", ToolCall("echo", {"value": 2**5000}, "c1"), "too large"),
    ("huge int in raw JSON arguments", ToolCall("echo", {}, "c1"), "digits"),
    (
        "NaN in raw JSON arguments",
        ToolCall("echo", {}, "c1", arguments_error=None),
        "NaN is not a JSON value",
    ),
]


@pytest.mark.parametrize(("name", "call", "message"), RUN_CASES, ids=[c[0] for c in RUN_CASES])
def test_bad_writes_and_arguments_in_a_run_go_back_to_the_model(
    backend: Harness, name: str, call: ToolCall, message: str
) -> None:
    raw = {
        "NaN in raw JSON arguments": '{"value": NaN}',
        "huge int in raw JSON arguments": '{"value": 1' + "0" * 5000 + "}",
    }.get(name)
    if raw is not None:
        arguments, error = parse_arguments(raw)
        call = ToolCall("echo", arguments, "c1", arguments_error=error)
    seen: list[str] = []

    def model(messages: list[Message], info: RequestInfo) -> ModelResponse:
        last = messages[-1]
        if last.role == "tool":
            seen.append(last.content or "")
            return ModelResponse(content="recovered")
        if last.content != "go":
            return ModelResponse(content="hi")
        text = "calling \udc00" if "raises" in name else None  # the model's text may be odd too
        return ModelResponse(tool_calls=[call], content=text)

    agent = make_agent(
        backend.db,
        FunctionModel(model),
        tools=[
            writes_ttl,
            writes_nested_ttl,
            writes_surrogate,
            returns_surrogate,
            raises_surrogate,
            echo,
        ],
        enable_agentic_state=True,
    )
    agent.run("hello", session_id=SID)
    agent.state.for_session(SID).set("ephemeral", 1, ttl=3600)
    state_before = agent.get_session_state(SID)
    out = agent.run("go", session_id=SID)
    assert out.status == "completed"
    assert out.content == "recovered"
    assert len(seen) == 1 and seen[0].startswith("Error") and message in seen[0], seen
    other = make_agent(backend.reopen())
    assert other.get_session_state(SID) == state_before
    assert other.state.for_session(SID).get("ephemeral") == 1  # the TTL still works
    runs = backend.db.read_runs(SID)
    assert runs[-1].status == "completed"


def test_nesting_up_to_the_limit_is_stored_and_read_back(backend: Harness) -> None:
    agent = make_agent(backend.db)
    agent.state.for_session(SID).set("x", nested(MAX_DEPTH))
    assert make_agent(backend.reopen()).state.for_session(SID).get("x") == nested(MAX_DEPTH)
