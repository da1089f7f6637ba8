"""Secrets never leave the engine in plaintext, on every backend.

After runs that write, conflict on, roll back, fork and export secret keys, with two
agents on one database of which only one declares the keys secret, the plaintext is
searched for in: the raw SQLite file (and its WAL), every table of the PostgreSQL test
schema, every Redis key of the test prefix, every HTTP response (JSON and SSE), the export
file, every log line, every prompt, and the objects a run returns. The library API still
reads the plaintext back (no value is left encrypted twice)."""

from __future__ import annotations

import json
import logging
import secrets
from pathlib import Path
from typing import Any

import pytest

from statewise import Agent
from statewise.db import SqliteDb
from statewise.db.testing import Harness
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo, ToolCall
from statewise.server import create_app
from tests.security._walk import Target, walk
from tests.server.conftest import start_server, stop_server

SID = "vault-session"
TAG = secrets.token_hex(4)
S = {
    name: f"PLAINTEXT{name.upper()}{TAG}"
    for name in ("first", "card", "theirs", "ours", "b1", "b2", "api")
}


class World:
    """Everything the agents produced that must not hold a secret."""

    def __init__(self) -> None:
        self.prompts: list[str] = []
        self.texts: list[str] = []


def _agents(db: Any, world: World) -> tuple[Agent, Agent]:
    holder: dict[str, Agent] = {}

    def set_token(session_state: dict[str, Any]) -> str:
        """Store the first token."""
        session_state["api_token"] = S["first"]
        session_state["user:card"] = S["card"]
        return "stored"

    def racer(session_state: dict[str, Any]) -> str:
        """Store a token while another writer stores one too."""
        _ = session_state["api_token"]
        holder["b"].state.for_session(SID).set("api_token", S["theirs"])
        session_state["api_token"] = S["ours"]
        return "raced"

    def model(messages: list[Message], info: RequestInfo) -> ModelResponse:
        world.prompts.extend(m.content or "" for m in messages)
        last = messages[-1]
        if last.role == "tool":
            return ModelResponse(content="done")
        text = last.content or ""
        if text == "store":
            return ModelResponse(tool_calls=[ToolCall("set_token", {}, "c1")])
        if text == "race":
            return ModelResponse(tool_calls=[ToolCall("racer", {}, "c2")])
        if text == "agentic":
            call = ToolCall("update_session_state", {"set": {"note": "n"}}, "c3")
            return ModelResponse(tool_calls=[call])
        return ModelResponse(content="hello")

    common: dict[str, Any] = dict(
        name="vault",
        db=db,
        model=FunctionModel(model),
        tools=[set_token, racer],
        enable_agentic_state=True,
        user_id="alice",
        instructions="Token {api_token}, card {user:card}, note {note?}",
    )
    a = Agent(**common, secret_keys=["api_token", "user:card"])
    b = Agent(**common)  # declares nothing: the data says what is secret
    holder["b"] = b
    return a, b


def _raw_storage(harness: Harness) -> bytes:
    """Every byte the backend holds for this test."""
    if harness.name == "sqlite":
        db = harness.db
        assert isinstance(db, SqliteDb)
        out = b""
        for suffix in ("", "-wal"):
            path = Path(db.db_file + suffix)
            if path.exists():
                out += path.read_bytes()
        return out
    if harness.name == "postgres":
        import psycopg

        schema: str = harness.schema  # type: ignore[attr-defined]
        url: str = harness.url  # type: ignore[attr-defined]
        chunks: list[str] = []
        with psycopg.connect(url, autocommit=True) as conn:
            tables = conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                (schema,),
            ).fetchall()
            assert len(tables) >= 5, tables
            for (table,) in tables:
                rows = conn.execute(f'SELECT t::text FROM "{schema}"."{table}" t').fetchall()
                chunks.extend(r[0] for r in rows)
        return "\n".join(chunks).encode()
    import redis

    prefix: str = harness.prefix  # type: ignore[attr-defined]
    url = harness.url  # type: ignore[attr-defined]
    client: Any = redis.Redis.from_url(url)
    parts: list[bytes] = []
    keys = list(client.scan_iter(match=f"*{prefix}*", count=1000))
    assert keys
    for key in keys:
        kind = client.type(key)
        if kind == b"string":
            parts.append(client.get(key) or b"")
        elif kind == b"hash":
            parts.extend(k + b"=" + v for k, v in client.hgetall(key).items())
        elif kind == b"list":
            parts.extend(client.lrange(key, 0, -1))
        elif kind == b"zset":
            parts.extend(client.zrange(key, 0, -1))
        elif kind == b"set":
            parts.extend(client.smembers(key))
        elif kind == b"stream":
            parts.extend(repr(fields).encode() for _id, fields in client.xrange(key))
        else:
            pytest.fail(f"unexpected Redis type {kind!r} for {key!r}")
    client.close()
    return b"\n".join(parts)


def _leaks(blob: bytes | str) -> list[str]:
    data = blob.encode() if isinstance(blob, str) else blob
    return [name for name, value in S.items() if value.encode() in data]


def test_no_plaintext_secret_anywhere(
    backend: Harness, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    world = World()
    caplog.set_level(logging.DEBUG)
    a, b = _agents(backend.db, world)
    outputs = []
    outputs.append(a.run("store", session_id=SID))
    assert a.get_session_state(SID)["api_token"] == S["first"]
    v_first = a.get_state_history(SID)[-1]["version"]
    outputs.append(a.run("race", session_id=SID))  # a conflict on a secret key
    assert outputs[-1].conflicts, "the race must conflict"
    outputs.append(a.run("agentic", session_id=SID))  # the tool's reply names no value
    # the agent that declares nothing writes the secret key: encrypted all the same
    b.state.for_session(SID).set("api_token", S["b1"])
    assert a.get_session_state(SID)["api_token"] == S["b1"]
    b.state.for_session(SID).delete("api_token")
    b.state.for_session(SID).set("api_token", S["b2"])
    outputs.append(b.run("hi", session_id=SID))
    assert b.get_session_state(SID)["api_token"] == S["b2"]
    assert a.get_session_state(SID)["api_token"] == S["b2"]
    # roll back and fork: plaintext comes back once decrypted, never encrypted twice
    a.rollback_state(SID, to=v_first)
    assert b.get_session_state(SID)["api_token"] == S["first"]
    fork = b.fork_session(SID, new_session_id="forked")
    assert a.get_session_state(fork)["api_token"] == S["first"]
    assert a.get_session_state(fork)["user:card"] == S["card"]
    export_file = tmp_path / "export.jsonl"
    b.export_session(SID, export_file)
    a.export_session(fork, tmp_path / "fork.jsonl")
    history = a.get_state_history(SID) + b.get_state_history(fork)
    diffs = a.diff_state(SID, 0) + b.diff_state(SID, 0)
    # a past state reads back in plaintext, like the current one (library callers are trusted)
    assert b.get_state_at(SID, v_first)["api_token"] == S["first"]

    # over HTTP, served by the agent that declares nothing
    responses: list[bytes] = []
    live = start_server(create_app([b]))
    try:
        with live.client() as client:
            sse = client.post(
                "/v1/agents/vault/runs",
                json={"input": "store", "session_id": SID},
                headers={"Accept": "text/event-stream"},
            )
            responses.append(sse.content)
            responses.append(
                client.post(
                    "/v1/agents/vault/runs", json={"input": "race", "session_id": SID}
                ).content
            )
            run_id = json.loads(responses[-1])["run_id"]
            r = client.patch(f"/v1/sessions/{SID}/state", json={"api_token": "***", "x": 1})
            assert r.status_code == 200
            responses.append(r.content)
            # every route of the OpenAPI schema (AG-UI included), not a hand-kept list
            responses += walk(client, Target(SID, run_id, "agents", "vault", "forked", v_first))
    finally:
        stop_server(live)
    assert a.get_session_state(SID)["api_token"] == S["first"]  # "***" kept the value

    storage = _raw_storage(backend)
    assert b"$secret" in storage and b"api_token" in storage  # the search sees real data
    found = {
        "storage": _leaks(storage),
        "http": _leaks(b"\n".join(responses)),
        "export": _leaks(export_file.read_bytes() + (tmp_path / "fork.jsonl").read_bytes()),
        "logs": _leaks("\n".join(r.getMessage() for r in caplog.records)),
        "prompts": _leaks("\n".join(world.prompts)),
        "history": _leaks(json.dumps([history, diffs])),
        "run outputs": _leaks(
            json.dumps(
                [[o.conflicts, [m.to_dict() for m in o.messages], o.content] for o in outputs]
            )
        ),
        "events": _leaks(json.dumps([e.to_dict() for e in backend.db.read_events(SID)])),
    }
    assert {k: v for k, v in found.items() if v} == {}
