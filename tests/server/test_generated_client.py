"""A client generated with openapi-python-client from the live `/openapi.json` drives every
endpoint: every answer, errors included, parses into the declared type, and every status the
server gives is one the schema declares (`raise_on_unexpected_status=True`)."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

if os.environ.get("CI", "").lower() != "true":
    pytest.importorskip(
        "openapi_python_client", reason="pip install openapi-python-client (required when CI=true)"
    )

from statewise import Agent
from statewise.db import SqliteDb
from statewise.exceptions import ModelError
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo
from statewise.server import create_app
from tests.run.test_pause import bank
from tests.server.conftest import (
    ADMIN,
    ALICE,
    BOB,
    LiveServer,
    add_item,
    list_model,
    start_server,
    stop_server,
)
from tests.server.test_agui import run_input

PACKAGE = "statewise_generated_client"
MAX_BODY = 64 * 1024


class ListState(BaseModel):
    items: list[str] = []
    count: int = 0


def broken_model(messages: list[Message], info: RequestInfo) -> ModelResponse:
    raise ModelError("the provider is down")


def generate_client(schema: dict[str, Any], where: Path, package: str = PACKAGE) -> tuple[Any, str]:
    """Generate the client package into `where` (offline); return it and the tool's output."""
    spec = where / "openapi.json"
    spec.write_text(json.dumps(schema))
    config = where / "config.yml"
    # JSON Lines (the export) has no generator support: read it as bytes.
    config.write_text(
        "post_hooks: []\ncontent_type_overrides:\n  application/jsonl: application/octet-stream\n"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "openapi_python_client",
            "generate",
            "--path",
            str(spec),
            "--config",
            str(config),
            "--output-path",
            str(where / package),
            "--meta",
            "none",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_COLOR": "1"},
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    sys.path.insert(0, str(where))
    try:
        return importlib.import_module(package), output
    finally:
        sys.path.remove(str(where))


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, Any, str]]:
    from cryptography.fernet import Fernet

    os.environ.setdefault("STATEWISE_ENCRYPTION_KEY", Fernet.generate_key().decode())
    where = tmp_path_factory.mktemp("generated")
    db = SqliteDb(db_file=str(where / "api.db"))
    lister = Agent(
        name="lister",
        model=FunctionModel(list_model, id="list-player"),
        db=db,
        state_schema=ListState,
        secret_keys=["api_token"],
        tools=[add_item],
        instructions="Items: {items}",
    )
    broken = Agent(name="broken", model=FunctionModel(broken_model, id="broken"), db=db)
    app = create_app(
        [lister, broken, bank(db)],
        api_keys={ALICE: "alice", BOB: "bob"},
        admin_keys={ADMIN: "ops"},
        max_body_bytes=MAX_BODY,
    )
    live = start_server(app)
    with live.client(ALICE) as c:
        schema = c.get("/openapi.json").json()
    client, output = generate_client(schema, where)
    yield live, client, output
    stop_server(live)
    sys.modules.pop(PACKAGE, None)
    db.close()


def api(env: tuple[LiveServer, Any, str], name: str) -> Any:
    _live, client, _output = env
    for group in ("runs", "sessions", "meta", "ag_ui"):
        try:
            return importlib.import_module(f"{client.__name__}.api.{group}.{name}")
        except ModuleNotFoundError:
            continue
    raise AssertionError(f"the generated client has no operation {name}")


def connect(env: tuple[LiveServer, Any, str], key: str | None = ALICE) -> Any:
    live, client, _output = env
    if key is None:
        return client.Client(base_url=live.url, raise_on_unexpected_status=True, timeout=30)
    return client.AuthenticatedClient(
        base_url=live.url, token=key, raise_on_unexpected_status=True, timeout=30
    )


def model(env: tuple[LiveServer, Any, str], name: str) -> Any:
    _live, client, _output = env
    return getattr(importlib.import_module(f"{client.__name__}.models"), name)


def problem(env: tuple[LiveServer, Any, str], response: Any, status: int) -> Any:
    assert response.status_code == status, response.content
    assert response.headers["content-type"].startswith("application/problem+json")
    parsed = response.parsed
    assert isinstance(parsed, model(env, "Problem")), parsed
    assert parsed.status == status
    assert isinstance(parsed.detail, str) and parsed.detail
    return parsed


def test_generation_is_clean(env: tuple[LiveServer, Any, str]) -> None:
    _live, _client, output = env
    assert "Warning" not in output and "WARNING" not in output, output


def test_runs_and_state_through_the_generated_client(env: tuple[LiveServer, Any, str]) -> None:
    with connect(env) as c:
        _walk_every_endpoint(env, c)


def _walk_every_endpoint(env: tuple[LiveServer, Any, str], c: Any) -> None:
    state_type = model(env, "StateLister")

    health = api(env, "healthz").sync_detailed(client=c)
    assert health.status_code == 200 and health.parsed.status == "ok" and health.parsed.auth
    apps = api(env, "list_apps").sync_detailed(client=c).parsed
    assert {a.name for a in apps.apps} == {"lister", "broken", "bank"}
    me = api(env, "whoami").sync_detailed(client=c).parsed
    assert me.user_id == "alice" and me.admin is False

    RunBody = model(env, "RunBody")
    run = api(env, "create_run").sync_detailed(
        "agents",
        "lister",
        client=c,
        body=RunBody.from_dict({"input": "add a, b", "session_id": "g1"}),
    )
    assert run.status_code == 200 and run.headers["location"] == "/v1/sessions/g1"
    result = run.parsed
    assert result.status == "completed" and result.content.startswith("Done")
    assert result.metrics.tool_calls == 2
    assert isinstance(result.session_state, state_type)  # typed from state_schema
    assert result.session_state.items == ["a", "b"] and result.session_state.count == 2

    stream = api(env, "stream_run").sync_detailed(
        "agents", "lister", client=c, body=RunBody.from_dict({"input": "add c", "session_id": "g1"})
    )
    assert stream.status_code == 200
    assert stream.headers["content-type"].startswith("text/event-stream")
    assert isinstance(stream.parsed, str) and "event: run_completed" in stream.parsed
    assert "event: tool_call_started" in stream.parsed

    page = api(env, "list_sessions").sync_detailed(client=c).parsed
    assert [s.session_id for s in page.sessions] == ["g1"] and page.next_offset is None

    detail = api(env, "get_session").sync_detailed("g1", client=c)
    assert detail.headers["etag"] == f'"{detail.parsed.version}"'
    assert detail.parsed.state.items == ["a", "b", "c"]
    assert [r.status for r in detail.parsed.runs] == ["completed", "completed"]
    run_id = detail.parsed.runs[0].run_id
    one = api(env, "get_run").sync_detailed("g1", run_id, client=c).parsed
    assert one.run_id == run_id and one.messages and one.tool_calls[0].name == "add_item"

    got = api(env, "get_state").sync_detailed("g1", client=c)
    version = got.parsed.version
    assert got.headers["etag"] == f'"{version}"' and isinstance(got.parsed.state, state_type)

    PutBody = model(env, "PutStateState")
    put = api(env, "put_state").sync_detailed(
        "g1",
        client=c,
        body=PutBody.from_dict({"items": ["x"], "count": 1}),
        if_match=f'"{version}"',
    )
    assert put.status_code == 200 and put.parsed.version == version + 1
    stale = api(env, "put_state").sync_detailed(
        "g1", client=c, body=PutBody.from_dict({"items": []}), if_match=f'"{version}"'
    )
    assert problem(env, stale, 412).current_version == version + 1
    bad_etag = api(env, "put_state").sync_detailed(
        "g1", client=c, body=PutBody.from_dict({}), if_match="yesterday"
    )
    assert "If-Match" in problem(env, bad_etag, 400).detail

    PatchBody = model(env, "PatchStatePatch")
    patched = api(env, "patch_state").sync_detailed(
        "g1", client=c, body=PatchBody.from_dict({"items": ["x", "y"]}), if_match=f'"{version + 1}"'
    )
    assert patched.status_code == 200 and patched.parsed.state.items == ["x", "y"]
    invalid = api(env, "patch_state").sync_detailed(
        "g1", client=c, body=PatchBody.from_dict({"count": "many"})
    )
    assert "count" in problem(env, invalid, 422).detail

    events = api(env, "list_events").sync_detailed("g1", client=c).parsed
    assert events.events and {e.session_id for e in events.events} == {"g1"}
    history = api(env, "get_history").sync_detailed("g1", client=c).parsed
    versions = [h.version for h in history.history]
    assert versions == sorted(versions) and versions[-1] == version + 2
    diff = api(env, "get_diff").sync_detailed("g1", client=c, from_="0").parsed
    assert any(ch.path == ["items"] or ch.path[:1] == ["items"] for ch in diff.changes)
    by_run = api(env, "get_diff").sync_detailed("g1", client=c, run=run_id).parsed
    assert by_run.run == run_id and by_run.changes
    past = api(env, "get_diff").sync_detailed("g1", client=c, from_="999")
    assert "999" in problem(env, past, 422).detail

    RollbackBody = model(env, "RollbackBody")
    rolled = api(env, "rollback").sync_detailed("g1", client=c, body=RollbackBody(to=run_id))
    assert rolled.status_code == 200, rolled.content
    assert rolled.parsed.state.items == ["a", "b"]

    ForkBody = model(env, "ForkBody")
    forked = api(env, "fork").sync_detailed(
        "g1", client=c, body=ForkBody(at=1, new_session_id="g1-fork")
    )
    assert forked.status_code == 201 and forked.headers["location"] == "/v1/sessions/g1-fork"
    assert forked.parsed.forked_from == "g1" and isinstance(forked.parsed.state, state_type)
    again = api(env, "fork").sync_detailed("g1", client=c, body=ForkBody(new_session_id="g1-fork"))
    problem(env, again, 409)

    secret = api(env, "patch_state").sync_detailed(
        "g1", client=c, body=PatchBody.from_dict({"api_token": "tok-123"})
    )
    assert secret.parsed.state.api_token == "***"  # a secret key's value is never sent

    export = api(env, "export").sync_detailed("g1", client=c)
    assert export.status_code == 200
    lines = [json.loads(line) for line in export.content.decode().splitlines()]
    assert lines[0]["type"] == "session" and "tok-123" not in export.content.decode()

    deleted = api(env, "delete_session").sync_detailed("g1-fork", client=c)
    assert deleted.status_code == 204
    gone = api(env, "get_state").sync_detailed("g1-fork", client=c)
    problem(env, gone, 404)


def test_errors_through_the_generated_client(env: tuple[LiveServer, Any, str]) -> None:
    with (
        connect(env) as c,
        connect(env, None) as anon,
        connect(env, "wrong-key-1") as wrong,
        connect(env, BOB) as bob,
    ):
        _errors(env, c, anon, wrong, bob)


def _errors(env: tuple[LiveServer, Any, str], c: Any, anon: Any, wrong: Any, bob: Any) -> None:
    RunBody = model(env, "RunBody")
    create_run = api(env, "create_run")
    create_run.sync_detailed(
        "agents", "lister", client=c, body=RunBody.from_dict({"input": "hi", "session_id": "e1"})
    )

    # 401: no key, and a wrong key
    problem(env, api(env, "list_sessions").sync_detailed(client=anon), 401)
    problem(env, api(env, "get_state").sync_detailed("e1", client=wrong), 401)
    # 404: another user's session looks absent; an unknown agent; an unknown run
    problem(env, api(env, "get_session").sync_detailed("e1", client=bob), 404)
    missing_agent = create_run.sync_detailed(
        "agents", "nobody", client=c, body=RunBody.from_dict({"input": "x"})
    )
    assert "lister" in problem(env, missing_agent, 404).detail
    problem(env, api(env, "get_run").sync_detailed("e1", "no-such-run", client=c), 404)
    # 403: a user key cannot run as someone else
    as_bob = create_run.sync_detailed(
        "agents", "lister", client=c, body=RunBody.from_dict({"input": "x", "user_id": "bob"})
    )
    problem(env, as_bob, 403)
    # 400: an invalid id
    problem(env, api(env, "get_history").sync_detailed("bad\x01id", client=c), 400)
    # 422: an invalid field, with the reasons listed
    empty_id = RunBody.from_dict({"input": "x", "session_id": ""})
    refused = problem(
        env, create_run.sync_detailed("agents", "lister", client=c, body=empty_id), 422
    )
    assert refused.errors and refused.errors[0].loc == ["body", "session_id"]
    problem(env, api(env, "list_sessions").sync_detailed(client=c, limit=0), 422)
    # 413: a body over the server's limit
    big = create_run.sync_detailed(
        "agents", "lister", client=c, body=RunBody.from_dict({"input": "x" * (MAX_BODY + 10)})
    )
    problem(env, big, 413)
    # 502: the model provider failed
    failed = create_run.sync_detailed(
        "agents", "broken", client=c, body=RunBody.from_dict({"input": "x"})
    )
    assert "provider is down" in problem(env, failed, 502).detail
    # a stream that fails reports the problem as its last event
    streamed = api(env, "stream_run").sync_detailed(
        "agents", "broken", client=c, body=RunBody.from_dict({"input": "x"})
    )
    assert streamed.status_code == 200 and "event: error" in streamed.parsed


def test_paused_runs_and_agui_through_the_generated_client(
    env: tuple[LiveServer, Any, str],
) -> None:
    RunBody = model(env, "RunBody")
    with connect(env) as c:
        paused = api(env, "create_run").sync_detailed(
            "agents", "bank", client=c, body=RunBody.from_dict({"input": "pay", "session_id": "p1"})
        )
        assert paused.parsed.status == "paused"
        assert [p.tool_call_id for p in paused.parsed.pending_tool_calls] == ["t1"]
        listed = api(env, "list_paused_runs").sync_detailed("p1", client=c).parsed
        assert [r.run_id for r in listed.runs] == [paused.parsed.run_id]
        assert listed.runs[0].pending_tool_calls[0].tool_name == "transfer"

        ContinueBody = model(env, "ContinueBody")
        cont = api(env, "continue_run")
        missing = cont.sync_detailed(
            "p1", paused.parsed.run_id, client=c, body=ContinueBody.from_dict({"approvals": {}})
        )
        assert "t1" in problem(env, missing, 422).detail
        approve = ContinueBody.from_dict({"approvals": {"t1": {"approved": True}}})
        done = cont.sync_detailed("p1", paused.parsed.run_id, client=c, body=approve)
        assert done.status_code == 200 and done.parsed.status == "completed"
        problem(env, cont.sync_detailed("p1", paused.parsed.run_id, client=c, body=approve), 409)

        RunAgentInput = model(env, "RunAgentInput")
        agui = api(env, "agui_run")
        events = agui.sync_detailed(
            "agents", "lister", client=c, body=RunAgentInput.from_dict(run_input("a1", "add z"))
        )
        assert events.status_code == 200 and isinstance(events.parsed, str)
        assert "RUN_STARTED" in events.parsed and "RUN_FINISHED" in events.parsed
        no_user = RunAgentInput.from_dict({**run_input("a2", "x"), "messages": []})
        problem(env, agui.sync_detailed("agents", "lister", client=c, body=no_user), 422)


def test_untyped_agents_state_is_any_object(env: tuple[LiveServer, Any, str]) -> None:
    """A server with an agent that has a state_schema and one that has none: the state is
    either (the typed one first: it allows undeclared keys, so every state parses)."""
    state_type = model(env, "StateLister")
    RunBody = model(env, "RunBody")
    with connect(env, ADMIN) as c:
        api(env, "create_run").sync_detailed(
            "agents",
            "broken",
            client=c,
            body=RunBody.from_dict({"input": "x", "session_id": "u1", "session_state": {"n": 1}}),
        )
        state = api(env, "get_state").sync_detailed("u1", client=c).parsed.state
    assert isinstance(state, state_type) and state.to_dict() == {"n": 1}


def test_docs_need_a_key(env: tuple[LiveServer, Any, str]) -> None:
    live, _client, _output = env
    with httpx.Client(base_url=live.url, timeout=30) as anon:
        r = anon.get("/openapi.json")
        assert r.status_code == 401 and r.headers["content-type"].startswith(
            "application/problem+json"
        )
        assert anon.get("/docs").status_code == 401
    with live.client(ALICE) as c:
        assert c.get("/openapi.json").json()["components"]["securitySchemes"]
        assert c.get("/docs").status_code == 200
