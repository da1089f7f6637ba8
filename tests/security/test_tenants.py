"""Tenants over HTTP, endpoint by endpoint: a user key reaches its own sessions and its
own `user:` scope only; the `app:` scope every user shares is readable by users but
written, patched and rolled back (include_shared) only with an admin key."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from statewise.db.testing import Harness
from statewise.server import create_app
from tests.server.conftest import (
    ADMIN,
    ALICE,
    BOB,
    LiveServer,
    make_agent,
    start_server,
    stop_server,
)

# Every endpoint, with a request that succeeds for the session's owner. A new endpoint
# must be added here (the first test checks the table against the OpenAPI paths).
SESSION_ENDPOINTS: list[tuple[str, str, dict[str, Any], int]] = [
    ("get", "/v1/sessions/{sid}", {}, 200),
    ("get", "/v1/sessions/{sid}/runs/{rid}", {}, 200),
    ("get", "/v1/sessions/{sid}/state", {}, 200),
    ("put", "/v1/sessions/{sid}/state", {"json": {"items": ["x"], "count": 1}}, 200),
    ("patch", "/v1/sessions/{sid}/state", {"json": {"user:theme": "dark"}}, 200),
    ("get", "/v1/sessions/{sid}/events", {"params": {"run_id": "{rid}"}}, 200),
    ("get", "/v1/sessions/{sid}/history", {}, 200),
    ("get", "/v1/sessions/{sid}/diff", {"params": {"run": "{rid}"}}, 200),
    ("post", "/v1/sessions/{sid}/rollback", {"json": {"to": 1}}, 200),
    ("post", "/v1/sessions/{sid}/fork", {"json": {}}, 201),
    ("get", "/v1/sessions/{sid}/export", {}, 200),
    ("get", "/v1/sessions/{sid}/paused-runs", {}, 200),
    ("post", "/v1/sessions/{sid}/runs/{rid}/continue", {"json": {"approvals": {}}}, 409),
    ("delete", "/v1/sessions/{sid}", {}, 204),
]
OTHER_ENDPOINTS = {
    ("post", "/v1/{kind}/{name}/runs"),
    ("post", "/v1/{kind}/{name}/runs/stream"),
    ("post", "/v1/{kind}/{name}/agui"),
    ("get", "/v1/apps"),
    ("get", "/v1/me"),
    ("get", "/v1/sessions"),
    ("get", "/v1/paused-runs"),  # the caller's own approvals: tests/server/test_auth_jwt.py
    ("get", "/healthz"),
    ("get", "/readyz"),
}


@pytest.fixture
def server(backend: Harness) -> Iterator[LiveServer]:
    app = create_app(
        [make_agent(backend.db)], api_keys={ALICE: "alice", BOB: "bob"}, admin_keys={ADMIN: "ops"}
    )
    live = start_server(app)
    yield live
    stop_server(live)


def _fill(value: Any, sid: str, rid: str) -> Any:
    if isinstance(value, str):
        return value.replace("{sid}", sid).replace("{rid}", rid)
    if isinstance(value, dict):
        return {k: _fill(v, sid, rid) for k, v in value.items()}
    return value


def _call(
    client: httpx.Client, method: str, path: str, kwargs: dict[str, Any], sid: str, rid: str
) -> httpx.Response:
    return client.request(method, _fill(path, sid, rid), **_fill(kwargs, sid, rid))


def test_the_table_covers_every_endpoint(server: LiveServer) -> None:
    with server.client(ADMIN) as admin:
        paths = admin.get("/openapi.json").json()["paths"]
    declared = {(m, p) for p, ops in paths.items() for m in ops}
    covered = {
        (m, p.replace("{sid}", "{session_id}").replace("{rid}", "{run_id}"))
        for m, p, _k, _s in SESSION_ENDPOINTS
    }
    assert declared - covered - OTHER_ENDPOINTS == set()


def test_every_session_endpoint_is_the_owners_only(server: LiveServer) -> None:
    with server.client(ALICE) as alice, server.client(BOB) as bob, server.client(ADMIN) as admin:
        for n, (method, path, kwargs, status) in enumerate(SESSION_ENDPOINTS):
            sid = f"a{n}"
            out = alice.post(
                "/v1/agents/lister/runs", json={"input": "add secret", "session_id": sid}
            )
            rid = out.json()["run_id"]
            bob.post("/v1/agents/lister/runs", json={"input": "hi", "session_id": f"b{n}"})
            before = alice.get(f"/v1/sessions/{sid}/export").content
            r = _call(bob, method, path, kwargs, sid, rid)
            assert r.status_code == 404, (method, path, r.status_code, r.text)
            assert r.json()["detail"] == f"no session {sid!r}"
            assert alice.get(f"/v1/sessions/{sid}/export").content == before, (method, path)
            r = _call(alice, method, path, kwargs, sid, rid)
            assert r.status_code == status, (method, path, r.status_code, r.text)
            r = _call(
                admin,
                method,
                path,
                kwargs,
                f"b{n}",
                bob.get(f"/v1/sessions/b{n}").json()["runs"][0]["run_id"],
            )
            assert r.status_code == status, ("admin", method, path, r.status_code, r.text)
        # bob neither runs in alice's session nor runs as alice, nor lists her sessions
        r = bob.post("/v1/agents/lister/runs", json={"input": "add x", "session_id": "a0"})
        assert r.status_code == 404
        r = bob.post("/v1/agents/lister/runs", json={"input": "x", "user_id": "alice"})
        assert r.status_code == 403
        listed = bob.get("/v1/sessions", params={"user_id": "alice"}).json()["sessions"]
        assert listed == []
        assert all(s["user_id"] == "bob" for s in bob.get("/v1/sessions").json()["sessions"])


def test_user_scope_is_the_users_own(server: LiveServer) -> None:
    with server.client(ALICE) as alice, server.client(BOB) as bob:
        alice.post("/v1/agents/lister/runs", json={"input": "hi", "session_id": "a1"})
        alice.post("/v1/agents/lister/runs", json={"input": "hi", "session_id": "a2"})
        bob.post("/v1/agents/lister/runs", json={"input": "hi", "session_id": "b1"})
        assert alice.patch("/v1/sessions/a1/state", json={"user:theme": "dark"}).status_code == 200
        assert alice.get("/v1/sessions/a2/state").json()["state"]["user:theme"] == "dark"
        assert "user:theme" not in bob.get("/v1/sessions/b1/state").json()["state"]
        r = bob.post(
            "/v1/agents/lister/runs",
            json={"input": "hi", "session_id": "b1", "session_state": {"user:theme": "x"}},
        )
        assert r.status_code == 200
        assert alice.get("/v1/sessions/a2/state").json()["state"]["user:theme"] == "dark"


def test_app_scope_is_read_by_users_and_written_by_admins(server: LiveServer) -> None:
    with server.client(ALICE) as alice, server.client(BOB) as bob, server.client(ADMIN) as admin:
        alice.post("/v1/agents/lister/runs", json={"input": "hi", "session_id": "a1"})
        bob.post("/v1/agents/lister/runs", json={"input": "hi", "session_id": "b1"})
        # an admin writes the shared scope; every user reads it
        assert admin.patch("/v1/sessions/a1/state", json={"app:motd": "hello"}).status_code == 200
        assert bob.get("/v1/sessions/b1/state").json()["state"]["app:motd"] == "hello"
        assert alice.get("/v1/sessions/a1/state").json()["state"]["app:motd"] == "hello"
        # users cannot write it by PATCH, PUT, a run's session_state, or delete it
        attempts: list[tuple[str, str, dict[str, Any]]] = [
            ("patch", "/v1/sessions/b1/state", {"json": {"app:motd": "pwned"}}),
            ("patch", "/v1/sessions/b1/state", {"json": {"app:motd": None}}),
            ("patch", "/v1/sessions/b1/state", {"json": {"app:new": 1}}),
            ("put", "/v1/sessions/b1/state", {"json": {"items": [], "app:motd": "pwned"}}),
            (
                "post",
                "/v1/agents/lister/runs",
                {"json": {"input": "hi", "session_id": "b1", "session_state": {"app:motd": "p"}}},
            ),
            (
                "post",
                "/v1/agents/lister/runs",
                {"json": {"input": "hi", "session_state": {"app:motd": "p"}}},
            ),
            ("post", "/v1/sessions/b1/rollback", {"json": {"to": 1, "include_shared": True}}),
        ]
        for method, path, kwargs in attempts:
            r = bob.request(method, path, **kwargs)
            assert r.status_code == 403, (method, path, kwargs, r.status_code, r.text)
            assert "admin" in r.json()["detail"]
        assert alice.get("/v1/sessions/a1/state").json()["state"]["app:motd"] == "hello"
        # a user's own rollback leaves the shared scope alone
        assert bob.post("/v1/sessions/b1/rollback", json={"to": 1}).status_code == 200
        assert alice.get("/v1/sessions/a1/state").json()["state"]["app:motd"] == "hello"
        # the admin may roll the shared scope back: before the app: write there was none
        r = admin.post("/v1/sessions/a1/rollback", json={"to": 1, "include_shared": True})
        assert r.status_code == 200, r.text
        assert "app:motd" not in bob.get("/v1/sessions/b1/state").json()["state"]
        # and may PUT app: keys
        r = admin.put("/v1/sessions/a1/state", json={"items": [], "count": 0, "app:motd": "v2"})
        assert r.status_code == 200
        assert bob.get("/v1/sessions/b1/state").json()["state"]["app:motd"] == "v2"
