"""An app's own login: JWTs signed in the test with real keys (HS256, RS256 from a PEM,
ES256 from a JWKS file), a custom auth hook, approval as a permission with an approver's
inbox, CORS preflights, readiness and a database given to the app, over real HTTP."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from statewise import Agent, tool
from statewise.db import SqliteDb
from statewise.exceptions import ConfigurationError
from statewise.models import FunctionModel, ModelResponse, ToolCall
from statewise.server import (
    JWTAuth,
    Principal,
    Unauthorized,
    approvers_with_role,
    create_app,
)
from tests.server.conftest import LiveServer, make_agent, start_server, stop_server

SECRET = "a-test-secret-that-is-long-enough-1234"
ISSUER, AUDIENCE = "https://login.example.test", "statewise-api"


def token(
    key: Any = SECRET, alg: str = "HS256", headers: dict[str, Any] | None = None, **claims: Any
) -> str:
    """A JWT for alice from the test issuer to the API, with `claims` changed (None drops
    a claim)."""
    body = {"sub": "alice", "iss": ISSUER, "aud": AUDIENCE, "exp": time.time() + 300}
    body.update(claims)
    body = {k: v for k, v in body.items() if v is not None}
    return jwt.encode(body, key, algorithm=alg, headers=headers)


def unsigned(claims: dict[str, Any]) -> str:
    """A token with `alg: none` and no signature."""
    return jwt.encode(claims, None, "none")  # type: ignore[arg-type]


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., LiveServer]]:
    started: list[LiveServer] = []

    def make(apps: Any = None, **kwargs: Any) -> LiveServer:
        apps = apps or [make_agent(SqliteDb(db_file=str(tmp_path / f"j{len(started)}.db")))]
        live = start_server(create_app(apps, **kwargs))
        started.append(live)
        return live

    yield make
    for live in started:
        stop_server(live)


def _get(live: LiveServer, path: str, bearer: str | None) -> Any:
    with live.client(bearer) as c:
        return c.get(path)


def test_hs256_tokens_reach_only_their_own_sessions(serve: Callable[..., LiveServer]) -> None:
    live = serve(auth=JWTAuth(secret=SECRET, issuer=ISSUER, audience=AUDIENCE))
    alice, bob = token(), token(sub="bob")
    with live.client(alice) as a, live.client(bob) as b:
        assert a.get("/v1/me").json() == {"user_id": "alice", "admin": False}
        r = a.post("/v1/agents/lister/runs", json={"input": "add tea", "session_id": "a1"})
        assert r.status_code == 200 and r.json()["user_id"] == "alice"
        assert b.get("/v1/sessions/a1").status_code == 404
        assert b.get("/v1/sessions").json()["sessions"] == []
        assert [s["session_id"] for s in a.get("/v1/sessions").json()["sessions"]] == ["a1"]
    admin = token(sub="ops", roles=["admin"])
    assert _get(live, "/v1/sessions/a1", admin).status_code == 200


@pytest.mark.parametrize(
    ("case", "make"),
    [
        ("expired", lambda: token(exp=time.time() - 60)),
        ("wrong audience", lambda: token(aud="another-api")),
        ("wrong issuer", lambda: token(iss="https://evil.test")),
        ("bad signature", lambda: token(key="another-secret-that-is-long-enough-12")),
        ("alg none", lambda: unsigned({"sub": "alice", "exp": time.time() + 60})),
        ("no exp", lambda: token(exp=None)),
        ("garbage", lambda: "not.a.jwt"),
    ],
)
def test_bad_tokens_are_401_with_the_reason(
    serve: Callable[..., LiveServer], case: str, make: Callable[[], str]
) -> None:
    live = serve(auth=JWTAuth(secret=SECRET, issuer=ISSUER, audience=AUDIENCE))
    r = _get(live, "/v1/sessions", make())
    assert r.status_code == 401, (case, r.text)
    assert r.headers["www-authenticate"].startswith("Bearer")
    detail = r.json()["detail"]
    expected = {
        "expired": "expired",
        "wrong audience": "audience",
        "wrong issuer": "issuer",
        "bad signature": "signature",
        "alg none": "none",
        "no exp": "exp",
        "garbage": "not",
    }[case]
    assert expected in detail, detail
    assert _get(live, "/v1/sessions", None).status_code == 401


def test_rs256_from_a_pem_and_es256_from_a_jwks_file(
    serve: Callable[..., LiveServer], tmp_path: Path
) -> None:
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = rsa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    (tmp_path / "rsa.pem").write_bytes(pem)
    live = serve(auth=JWTAuth(public_key=tmp_path / "rsa.pem", audience=AUDIENCE))
    assert _get(live, "/v1/me", token(rsa_key, "RS256")).json()["user_id"] == "alice"
    # a token signed with HS256 using the public key as the secret is refused
    forged = jwt.api_jws.PyJWS().encode(
        json.dumps({"sub": "mallory", "aud": AUDIENCE, "exp": time.time() + 60}).encode(),
        key=b"x" * 32,
        algorithm="HS256",
    )
    assert _get(live, "/v1/me", forged).status_code == 401

    ec_key, other = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(ec_key.public_key()))
    jwk.update(kid="k1", use="sig", alg="ES256")
    (tmp_path / "jwks.json").write_text(json.dumps({"keys": [jwk]}))
    live = serve(auth=JWTAuth(jwks_file=tmp_path / "jwks.json", issuer=ISSUER))
    good = token(ec_key, "ES256", aud=None, headers={"kid": "k1"})
    assert _get(live, "/v1/me", good).json()["user_id"] == "alice"
    assert (
        _get(live, "/v1/me", token(other, "ES256", aud=None, headers={"kid": "k1"})).status_code
        == 401
    )
    unknown = token(ec_key, "ES256", aud=None, headers={"kid": "k9"})
    r = _get(live, "/v1/me", unknown)
    assert r.status_code == 401 and "k9" in r.json()["detail"]


def test_jwt_configuration_mistakes_are_clear() -> None:
    with pytest.raises(ConfigurationError, match="exactly one"):
        JWTAuth()
    with pytest.raises(ConfigurationError, match="at least 32"):
        JWTAuth(secret="short")
    with pytest.raises(ConfigurationError, match="none"):
        JWTAuth(secret=SECRET, algorithms=["none"])
    with pytest.raises(ConfigurationError, match="asymmetric"):
        JWTAuth(public_key="-----BEGIN PUBLIC KEY-----\n", algorithms=["HS256"])


def test_a_custom_auth_hook_reads_a_session_cookie(serve: Callable[..., LiveServer]) -> None:
    logins = {"cookie-of-ann": Principal(user_id="ann")}

    def from_cookie(request: Any) -> Principal | None:
        cookie = request.cookies.get("app_session")
        if cookie == "revoked":
            raise Unauthorized("that login was revoked")
        return logins.get(cookie or "")

    live = serve(auth=from_cookie)
    with live.client(cookies={"app_session": "cookie-of-ann"}) as c:
        assert c.get("/v1/me").json() == {"user_id": "ann", "admin": False}
    with live.client(cookies={"app_session": "revoked"}) as c:
        r = c.get("/v1/me")
        assert r.status_code == 401 and "revoked" in r.json()["detail"]
    assert _get(live, "/v1/me", None).status_code == 401


# ---- approval is a permission ------------------------------------------------------------


@tool(requires_confirmation=True)
def refund(session_state: dict[str, Any], order_id: int) -> str:
    """Refund an order."""
    session_state.setdefault("refunded", []).append(order_id)
    return f"refunded {order_id}"


def _support(db: Any) -> Agent:
    def answer(messages: Any, info: Any) -> ModelResponse:
        if messages[-1].role == "user":
            return ModelResponse(tool_calls=[ToolCall("refund", {"order_id": 42}, "c1")])
        return ModelResponse(content="done")

    return Agent(name="support", model=FunctionModel(answer), tools=[refund], db=db)


def test_only_approvers_approve_and_their_inbox_spans_sessions(
    serve: Callable[..., LiveServer], tmp_path: Path
) -> None:
    db = SqliteDb(db_file=str(tmp_path / "support.db"))
    live = serve(
        [_support(db)],
        auth=JWTAuth(secret=SECRET, issuer=ISSUER, audience=AUDIENCE),
        approve=approvers_with_role("approver"),
    )
    alice, carol = token(), token(sub="carol")
    approver = token(sub="sam", roles="approver support")
    with live.client(alice) as a, live.client(carol) as c, live.client(approver) as s:
        paused = a.post("/v1/agents/support/runs", json={"input": "refund", "session_id": "r1"})
        assert paused.json()["status"] == "paused"
        c.post("/v1/agents/support/runs", json={"input": "refund", "session_id": "r2"})
        run_id = paused.json()["run_id"]
        answer = {"approvals": {"c1": {"approved": True}}}
        # whoever asked for the refund cannot approve it
        r = a.post(f"/v1/sessions/r1/runs/{run_id}/continue", json=answer)
        assert r.status_code == 404
        assert a.get("/v1/paused-runs").json()["runs"] == []
        inbox = s.get("/v1/paused-runs").json()
        assert sorted(run["session_id"] for run in inbox["runs"]) == ["r1", "r2"]
        assert inbox["scanned_sessions"] == 2
        r = s.post(f"/v1/sessions/r1/runs/{run_id}/continue", json=answer)
        assert r.status_code == 200 and r.json()["status"] == "completed", r.text
        assert [run["session_id"] for run in s.get("/v1/paused-runs").json()["runs"]] == ["r2"]
        assert a.get("/v1/sessions/r1/state").json()["state"]["refunded"] == [42]
        # the approver still cannot read the session's state: approving is not owning
        assert s.get("/v1/sessions/r1/state").status_code == 404


def test_by_default_the_owner_approves(serve: Callable[..., LiveServer], tmp_path: Path) -> None:
    live = serve(
        [_support(SqliteDb(db_file=str(tmp_path / "o.db")))],
        auth=JWTAuth(secret=SECRET, issuer=ISSUER, audience=AUDIENCE),
    )
    with live.client(token()) as a, live.client(token(sub="bob")) as b:
        run_id = a.post("/v1/agents/support/runs", json={"input": "x", "session_id": "o1"}).json()[
            "run_id"
        ]
        assert [r["run_id"] for r in a.get("/v1/paused-runs").json()["runs"]] == [run_id]
        assert b.get("/v1/paused-runs").json()["runs"] == []
        answer = {"approvals": {"c1": {"approved": False, "reason": "no"}}}
        assert b.post(f"/v1/sessions/o1/runs/{run_id}/continue", json=answer).status_code == 404
        assert a.post(f"/v1/sessions/o1/runs/{run_id}/continue", json=answer).status_code == 200


# ---- CORS, readiness, db= ---------------------------------------------------------------

ORIGIN = "https://app.example.test"


@pytest.mark.parametrize(
    "path",
    ["/v1/agents/lister/agui", "/v1/agents/lister/runs/stream", "/v1/sessions/x/state"],
)
def test_cors_preflight_on_every_kind_of_route(serve: Callable[..., LiveServer], path: str) -> None:
    live = serve(cors_origins=[ORIGIN], api_keys={"alice-key-0001": "alice"})
    with live.client() as c:
        r = c.options(
            path,
            headers={
                "Origin": ORIGIN,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization, content-type",
            },
        )
        assert r.status_code == 200, r.text
        assert r.headers["access-control-allow-origin"] == ORIGIN
        assert "authorization" in r.headers["access-control-allow-headers"].lower()
        denied = c.options(
            path,
            headers={"Origin": "https://evil.test", "Access-Control-Request-Method": "POST"},
        )
        assert "access-control-allow-origin" not in denied.headers
        # an error answer carries the header too, so the browser shows the app the 401
        r = c.get("/v1/sessions", headers={"Origin": ORIGIN})
        assert r.status_code == 401 and r.headers["access-control-allow-origin"] == ORIGIN


def test_without_cors_origins_a_preflight_is_not_allowed(serve: Callable[..., LiveServer]) -> None:
    live = serve()
    with live.client() as c:
        r = c.options(
            "/v1/agents/lister/agui",
            headers={"Origin": ORIGIN, "Access-Control-Request-Method": "POST"},
        )
        assert "access-control-allow-origin" not in r.headers


def test_readyz_checks_the_database(serve: Callable[..., LiveServer], tmp_path: Path) -> None:
    db = SqliteDb(db_file=str(tmp_path / "ready.db"))
    live = serve([make_agent(db)])
    assert _get(live, "/readyz", None).json()["status"] == "ok"
    db.close()
    r = _get(live, "/readyz", None)
    assert r.status_code == 503 and "lister" in r.json()["detail"]
    assert r.headers["retry-after"] == "5"
    assert _get(live, "/healthz", None).status_code == 200  # alive, just not ready


def test_create_app_db_is_for_objects_built_without_one(
    serve: Callable[..., LiveServer], tmp_path: Path
) -> None:
    own = SqliteDb(db_file=str(tmp_path / "own.db"))
    given = tmp_path / "given.db"
    without = make_agent(None, name="plain")
    live = serve([without, make_agent(own, name="owned")], db=f"sqlite:///{given}")
    with live.client() as c:
        for name in ("plain", "owned"):
            r = c.post(f"/v1/agents/{name}/runs", json={"input": "add x", "session_id": name})
            assert r.status_code == 200, r.text
    with SqliteDb(db_file=str(given)) as check:
        assert check.get_session("plain") is not None
        assert check.get_session("owned") is None
    assert own.get_session("owned") is not None
