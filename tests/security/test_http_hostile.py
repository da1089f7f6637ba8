"""Hostile requests against the HTTP API on every backend: each is a 4xx naming what is
wrong (never a 5xx), nothing is persisted, and the session stays readable."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from statewise.db.testing import Harness
from statewise.server import create_app
from tests.server.conftest import ADMIN, ALICE, LiveServer, make_agent, start_server, stop_server

SID = "victim"
JSON = {"content-type": "application/json"}


def deep(n: int) -> str:
    return "[" * n + "]" * n


@dataclass
class Req:
    name: str
    method: str
    path: str
    status: int
    detail: str
    body: str | bytes | None = None
    json: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    key: str = ALICE


def _chunks() -> Iterator[bytes]:
    for _ in range(3):
        yield b'{"x": "' + b"a" * 600_000 + b'"}'


STATE = f"/v1/sessions/{SID}/state"
RUNS = "/v1/agents/lister/runs"
CASES = [
    Req("PATCH __ttl__", "PATCH", STATE, 422, "reserved", json={"__ttl__": {"items": 0}}),
    Req("PATCH deletes __ttl__", "PATCH", STATE, 422, "reserved", json={"__ttl__": None}),
    Req("PATCH __class__", "PATCH", STATE, 422, "reserved", json={"__class__": "x"}),
    Req("PATCH user:__x__", "PATCH", STATE, 422, "reserved", json={"user:__ttl__": 1}),
    Req("PUT with __ttl__", "PUT", STATE, 422, "reserved", json={"items": [], "__ttl__": 1}),
    Req(
        "run session_state __ttl__",
        "POST",
        RUNS,
        422,
        "reserved",
        json={"input": "hi", "session_id": SID, "session_state": {"__ttl__": 1}},
    ),
    Req("PATCH NaN", "PATCH", STATE, 422, "NaN", body='{"x": NaN}'),
    Req("PATCH Infinity", "PATCH", STATE, 422, "infinity", body='{"x": [-Infinity]}'),
    Req("PATCH lone surrogate", "PATCH", STATE, 422, "surrogate", body='{"x": "\\ud800"}'),
    Req("PATCH surrogate key", "PATCH", STATE, 422, "surrogate", body='{"\\udc00": 1}'),
    Req("PUT lone surrogate", "PUT", STATE, 422, "surrogate", body='{"x": ["\\ud800"]}'),
    Req(
        "run input lone surrogate",
        "POST",
        RUNS,
        422,
        "unicode",
        body='{"input": "hi \\ud800", "session_id": "victim"}',
    ),
    Req(
        "run session_id lone surrogate",
        "POST",
        RUNS,
        422,
        "unicode",
        body='{"input": "hi", "session_id": "\\ud800"}',
    ),
    Req(
        "run session_state lone surrogate",
        "POST",
        RUNS,
        422,
        "surrogate",
        body='{"input": "hi", "session_id": "victim", "session_state": {"x": "\\ud800"}}',
    ),
    Req("session id not UTF-8 in the URL", "GET", "/v1/sessions/%ED%A0%80", 404, "no session"),
    Req("PATCH 101 levels", "PATCH", STATE, 422, "deeper than 100", body='{"x":' + deep(101) + "}"),
    Req("PATCH 600 levels", "PATCH", STATE, 422, "deeper than 100", body='{"x":' + deep(600) + "}"),
    Req("PATCH 100000 levels", "PATCH", STATE, 400, "nests too deeply", body=deep(100_000)),
    Req(
        "PATCH 2000-digit int", "PATCH", STATE, 422, "too large", body='{"x": 1' + "0" * 2000 + "}"
    ),
    Req(
        "PATCH 5000-digit int",
        "PATCH",
        STATE,
        400,
        "4300 digits",
        body='{"x": 1' + "0" * 5000 + "}",
    ),
    Req("PATCH not JSON", "PATCH", STATE, 400, "not valid JSON", body="{x: 1"),
    Req("PATCH not UTF-8", "PATCH", STATE, 400, "UTF-8", body=b'{"x": "\xff"}'),
    Req("PATCH a list", "PATCH", STATE, 422, "dict", json=[1, 2]),
    Req("PATCH a string", "PATCH", STATE, 422, "dict", json="x"),
    Req("PATCH 50 MB", "PATCH", STATE, 413, "limit", body=b'{"x": "' + b"a" * (50 << 20) + b'"}'),
    Req("PATCH 1.8 MB chunked", "PATCH", STATE, 413, "limit", body=b"chunked"),
    Req(
        "PATCH app: key as a user",
        "PATCH",
        STATE,
        403,
        "admin",
        json={"app:motd": "pwned"},
    ),
    Req("PUT app: key as a user", "PUT", STATE, 403, "admin", json={"app:motd": "pwned"}),
    Req(
        "run session_state app: key as a user",
        "POST",
        RUNS,
        403,
        "admin",
        json={"input": "hi", "session_id": SID, "session_state": {"app:motd": "pwned"}},
    ),
    Req(
        "shared rollback as a user",
        "POST",
        f"/v1/sessions/{SID}/rollback",
        403,
        "admin",
        json={"to": 1, "include_shared": True},
    ),
    Req("control character id", "GET", "/v1/sessions/a%00b/state", 400, "control"),
    Req("overlong id", "GET", "/v1/sessions/" + "s" * 300, 422, "256"),
    Req("blank id", "GET", "/v1/sessions/%20%20", 400, "empty"),
    Req("events run_id control", "GET", f"/v1/sessions/{SID}/events?run_id=a%01", 400, "control"),
    Req(
        "rollback past the end",
        "POST",
        f"/v1/sessions/{SID}/rollback",
        422,
        "past",
        json={"to": 99},
    ),
    Req("rollback negative", "POST", f"/v1/sessions/{SID}/rollback", 422, ">= 0", json={"to": -1}),
    Req(
        "fork onto itself",
        "POST",
        f"/v1/sessions/{SID}/fork",
        409,
        "exists",
        json={"new_session_id": SID},
    ),
    Req(
        "If-Match garbage",
        "PATCH",
        STATE,
        400,
        "If-Match",
        json={"x": 1},
        headers={"If-Match": "{__class__}"},
    ),
    Req(
        "If-Match stale", "PATCH", STATE, 412, "version", json={"x": 1}, headers={"If-Match": '"1"'}
    ),
    Req(
        "run an unknown agent",
        "POST",
        "/v1/agents/{__class__}/runs",
        404,
        "no agent",
        json={"input": "x"},
    ),
    Req(
        "run unknown field", "POST", RUNS, 422, "Extra inputs", json={"input": "x", "__class__": 1}
    ),
    Req(
        "diff from garbage",
        "GET",
        f"/v1/sessions/{SID}/diff?from=%7B__class__%7D",
        422,
        "made no change",
    ),
]


@pytest.fixture
def server(backend: Harness) -> Iterator[LiveServer]:
    agent = make_agent(backend.db)
    live = start_server(create_app([agent], api_keys={ALICE: "alice"}, admin_keys={ADMIN: "ops"}))
    yield live
    stop_server(live)


def _send(client: httpx.Client, case: Req) -> httpx.Response:
    headers = dict(case.headers)
    if case.body == b"chunked":
        return client.request(
            case.method, case.path, content=_chunks(), headers={**JSON, **headers}
        )
    if case.body is not None:
        return client.request(
            case.method, case.path, content=case.body, headers={**JSON, **headers}
        )
    return client.request(case.method, case.path, json=case.json, headers=headers)


def test_hostile_requests_are_4xx_and_change_nothing(server: LiveServer) -> None:
    with server.client(ALICE) as alice:
        r = alice.post(RUNS, json={"input": "add a, b", "session_id": SID})
        assert r.status_code == 200, r.text
        assert alice.patch(STATE, json={"note": "{__class__} {items.__class__}"}).status_code == 200
        before = alice.get(STATE).json()
        events_before = alice.get(f"/v1/sessions/{SID}/events").json()["events"]
        failures: list[tuple[Any, ...]] = []
        for case in CASES:
            r = _send(alice, case)
            body = r.json() if r.headers.get("content-type", "").endswith("json") else {}
            if r.status_code != case.status or case.detail not in str(body.get("detail")):
                failures.append((case.name, r.status_code, r.text[:300]))
                continue
            assert body["title"] and body["status"] == case.status
            after = alice.get(STATE)
            assert after.status_code == 200
            if after.json() != before:
                failures.append((case.name, "state changed", after.text[:300]))
            events = alice.get(f"/v1/sessions/{SID}/events").json()["events"]
            if events != events_before:
                failures.append((case.name, "events changed", events[len(events_before) :]))
        assert not failures, "\n".join(map(str, failures))
        # Template injection in state is data: it renders literally, never as Python.
        out = alice.post(RUNS, json={"input": "hi", "session_id": SID}).json()
        assert out["status"] == "completed"
        assert alice.get(STATE).json()["state"]["note"] == "{__class__} {items.__class__}"
