"""Bearer keys: each user sees and touches only their own sessions (404 for others');
admins see all; keys from the environment; no keys means loopback only."""

from __future__ import annotations

from typing import Any

import pytest

from statewise.exceptions import ConfigurationError
from statewise.server._auth import KeyRing, parse_keys
from statewise.server._middleware import is_loopback
from tests.server.conftest import ADMIN, ALICE, BOB, LiveServer

SESSION_ROUTES: list[tuple[str, str, dict[str, Any]]] = [
    ("get", "/v1/sessions/{sid}", {}),
    ("get", "/v1/sessions/{sid}/state", {}),
    ("put", "/v1/sessions/{sid}/state", {"json": {}}),
    ("patch", "/v1/sessions/{sid}/state", {"json": {"x": 1}}),
    ("get", "/v1/sessions/{sid}/events", {}),
    ("get", "/v1/sessions/{sid}/history", {}),
    ("get", "/v1/sessions/{sid}/diff", {}),
    ("post", "/v1/sessions/{sid}/rollback", {"json": {"to": 0}}),
    ("post", "/v1/sessions/{sid}/fork", {"json": {}}),
    ("get", "/v1/sessions/{sid}/export", {}),
    ("get", "/v1/sessions/{sid}/runs/{rid}", {}),
    ("delete", "/v1/sessions/{sid}", {}),
]


def test_missing_or_wrong_key_is_401(authed: LiveServer) -> None:
    with authed.client() as anon:
        r = anon.get("/v1/sessions")
        assert r.status_code == 401
        assert r.headers["www-authenticate"].startswith("Bearer")
        assert "Bearer" in r.json()["detail"]
        assert anon.get("/healthz").status_code == 200
        assert anon.get("/").status_code == 200  # the page itself asks for a key
    with authed.client("wrong-key-123") as c:
        assert c.get("/v1/sessions").status_code == 401
    with authed.client() as c:
        assert c.get("/v1/sessions", headers={"Authorization": f"Basic {ALICE}"}).status_code == 401


def test_users_only_reach_their_own_sessions(authed: LiveServer) -> None:
    with authed.client(ALICE) as alice, authed.client(BOB) as bob, authed.client(ADMIN) as admin:
        assert alice.get("/v1/me").json() == {"user_id": "alice", "admin": False}
        out = alice.post(
            "/v1/agents/lister/runs", json={"input": "add secret plan", "session_id": "a1"}
        ).json()
        assert out["user_id"] == "alice"
        bob.post("/v1/agents/lister/runs", json={"input": "hi", "session_id": "b1"})
        assert [s["session_id"] for s in alice.get("/v1/sessions").json()["sessions"]] == ["a1"]
        assert [s["session_id"] for s in bob.get("/v1/sessions").json()["sessions"]] == ["b1"]
        assert bob.get("/v1/sessions", params={"user_id": "alice"}).json()["sessions"] == []
        admin_ids = {s["session_id"] for s in admin.get("/v1/sessions").json()["sessions"]}
        assert admin_ids == {"a1", "b1"}
        only_alice = admin.get("/v1/sessions", params={"user_id": "alice"}).json()["sessions"]
        assert [s["session_id"] for s in only_alice] == ["a1"]
        for method, path, kwargs in SESSION_ROUTES:
            url = path.format(sid="a1", rid=out["run_id"])
            r = getattr(bob, method)(url, **kwargs)
            assert r.status_code == 404, (method, url, r.status_code, r.text)
            assert r.json()["detail"] == "no session 'a1'"
        # bob cannot run in alice's session either, nor run as alice
        r = bob.post("/v1/agents/lister/runs", json={"input": "add x", "session_id": "a1"})
        assert r.status_code == 404
        r = bob.post("/v1/agents/lister/runs", json={"input": "x", "user_id": "alice"})
        assert r.status_code == 403
        assert alice.get("/v1/sessions/a1/state").json()["state"]["items"] == ["secret plan"]
        # the admin reaches everything, and may run as anyone
        assert admin.get("/v1/sessions/a1").status_code == 200
        r = admin.post("/v1/agents/lister/runs", json={"input": "x", "user_id": "carol"})
        assert r.json()["user_id"] == "carol"
        # a fork stays with the session's owner
        fork = alice.post("/v1/sessions/a1/fork", json={"new_session_id": "a2"})
        assert fork.status_code == 201
        assert bob.get("/v1/sessions/a2").status_code == 404
        assert alice.get("/v1/sessions/a2").json()["session"]["user_id"] == "alice"
        for method, path, kwargs in SESSION_ROUTES:
            if method == "delete":
                continue
            url = path.format(sid="a1", rid=out["run_id"])
            r = getattr(alice, method)(url, **kwargs)
            assert r.status_code < 300, (method, url, r.text)
        assert alice.delete("/v1/sessions/a1").status_code == 204


def test_keys_from_environment(monkeypatch: pytest.MonkeyPatch, make_live: Any) -> None:
    monkeypatch.setenv("STATEWISE_API_KEYS", "env-key-alice=alice, env-key-bob=bob")
    monkeypatch.setenv("STATEWISE_ADMIN_KEYS", "env-admin-key")
    live = make_live()
    with live.client("env-key-bob") as c:
        assert c.get("/v1/me").json() == {"user_id": "bob", "admin": False}
    with live.client("env-admin-key") as c:
        assert c.get("/v1/me").json() == {"user_id": "admin", "admin": True}
    with live.client() as c:
        assert c.get("/v1/me").status_code == 401


def test_parse_keys() -> None:
    assert parse_keys("k1234567=a,k7654321=b") == {"k1234567": "a", "k7654321": "b"}
    assert parse_keys(["k1234567=a"]) == {"k1234567": "a"}
    assert parse_keys({"k1234567": "a"}) == {"k1234567": "a"}
    with pytest.raises(ConfigurationError, match="key=user"):
        parse_keys("k1234567")
    with pytest.raises(ConfigurationError, match="8 characters"):
        parse_keys("short=a")
    assert not KeyRing().enabled


def test_without_keys_only_loopback_clients() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("127.0.0.5")
    assert not is_loopback("10.0.0.1") and not is_loopback("example.com") and not is_loopback(None)


def test_without_keys_remote_clients_get_403(tmp_path: Any) -> None:
    from fastapi.testclient import TestClient

    from statewise.db import SqliteDb
    from statewise.server import create_app
    from tests.server.conftest import make_agent

    app = create_app([make_agent(SqliteDb(db_file=str(tmp_path / "x.db")))])
    with TestClient(app, client=("192.0.2.10", 4000)) as remote:
        r = remote.get("/v1/sessions")
        assert r.status_code == 403 and "STATEWISE_API_KEYS" in r.json()["detail"]
    with TestClient(app, client=("127.0.0.1", 4000)) as local:
        assert local.get("/v1/sessions").status_code == 200
