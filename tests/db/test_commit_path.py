"""The commit path's reports: the state changes a commit returns are exactly the ops of
the `state_delta` events it stored (secrets hidden), and a run's commits on a shared
event loop still reach the database through its async policy."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from statewise import Agent
from statewise.db import InMemoryDb
from statewise.db.records import NewEvent
from statewise.db.store import SessionSpec, StateStore
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo, ToolCall


def test_the_changes_a_commit_reports_are_the_ops_of_its_state_delta_events() -> None:
    pytest.importorskip("cryptography")
    from cryptography.fernet import Fernet

    from statewise.state.secrets import Cipher

    db = InMemoryDb()
    store = StateStore(db, secret_keys={"token"}, cipher=Cipher(Fernet.generate_key()))
    spec = SessionSpec(session_id="s", user_id="u")
    with store.begin(spec) as txn:
        quiet = txn.commit([NewEvent(type="note", data={"n": 1})], source="start")
        txn.state["items"] = ["a"]
        txn.state["user:name"] = "Ada"
        txn.state["token"] = "hunter2"
        txn.mark("tool:x")
        txn.state["items"].append("b")
        changed = txn.commit(source="step")
    assert quiet.changes == [] and quiet.versions == {}
    events = db.read_events("s")
    deltas = [e.data for e in events if e.type == "state_delta"]
    assert [e.type for e in events][:1] == ["note"]
    stored = [
        {"scope": d["scope"], **op} for d in deltas for seg in d["segments"] for op in seg["ops"]
    ]
    assert changed.changes == stored
    # (the app scope records which keys are secret: every agent of the app agrees)
    assert {c["scope"] for c in changed.changes} == {"session", "user", "app"}
    assert "hunter2" not in repr(changed.changes)  # the secret is hidden, as in the log
    assert {key.kind for key in changed.versions} == {"session", "user", "app"}


def _script(messages: list[Message], info: RequestInfo) -> ModelResponse:
    if messages[-1].role == "tool":
        return ModelResponse(content="done")
    return ModelResponse(tool_calls=[ToolCall("add", {"item": "x"}, "c1")])


def _add(session_state: dict[str, Any], item: str) -> str:
    """Add an item."""
    session_state.setdefault("items", []).append(item)
    return "ok"


def test_a_run_on_a_shared_loop_commits_through_the_databases_async_policy() -> None:
    db = InMemoryDb()
    through: list[str] = []

    async def counted(fn: Any, *args: Any, **kwargs: Any) -> Any:
        # Inline rather than on the shared worker threads: once started they stay, and
        # test_faults' PostgreSQL proxy rounds then time differently (an extra rebase).
        through.append(getattr(fn, "__name__", "?"))
        return fn(*args, **kwargs)

    db._run_async = counted  # type: ignore[method-assign]
    agent = Agent(model=FunctionModel(_script), tools=[_add], db=db)
    out = asyncio.run(agent.arun("go", session_id="s"))
    assert out.content == "done"
    # run start, the tool step, run end: each built on the loop, written through the policy
    # (the run start of a session the process holds nothing of lands with what it reads:
    # `BaseDb.commit_new`, from the store's landing)
    assert through.count("_land_once") == 1
    assert through.count("commit") == 2
    # On a sync call's own loop every database runs inline: no detour through it.
    through.clear()
    assert agent.run("go", session_id="s").content == "done"
    assert through.count("commit") == 0
    assert [item for item in db.read_runs("s")[-1].messages if item["role"] == "tool"]
