"""Every route of a server's OpenAPI schema, called once with real identifiers, for
tests that search all the answers (the plaintext grep). Routes come from the schema, not
from a hand-kept list: a new route is walked the day it is added (a write route needs a
request body here; the walk fails naming a route it does not know how to call)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

SSE = {"Accept": "text/event-stream"}


@dataclass
class Target:
    session_id: str
    run_id: str
    kind: str
    name: str
    spare_session: str  # a session the walk may delete
    rollback_to: int = 1  # a version of the session to roll back to


def _agui_body(t: Target) -> dict[str, Any]:
    return {
        "threadId": t.session_id,
        "runId": uuid.uuid4().hex,
        "messages": [{"id": uuid.uuid4().hex, "role": "user", "content": "hello"}],
        "state": {},
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }


WRITES: dict[tuple[str, str], Callable[[Target], dict[str, Any]]] = {
    ("post", "/v1/{kind}/{name}/runs"): lambda t: {
        "json": {"input": "hello", "session_id": t.session_id}
    },
    ("post", "/v1/{kind}/{name}/runs/stream"): lambda t: {
        "json": {"input": "hello", "session_id": t.session_id},
        "headers": SSE,
    },
    ("post", "/v1/{kind}/{name}/agui"): lambda t: {"json": _agui_body(t), "headers": SSE},
    ("patch", "/v1/sessions/{session_id}/state"): lambda t: {"json": {"walked": 1}},
    ("post", "/v1/sessions/{session_id}/rollback"): lambda t: {"json": {"to": t.rollback_to}},
    ("post", "/v1/sessions/{session_id}/fork"): lambda t: {"json": {}},
    ("post", "/v1/sessions/{session_id}/runs/{run_id}/continue"): lambda t: {
        "json": {"approvals": {}}
    },
}
LAST = {("put", "/v1/sessions/{session_id}/state"), ("delete", "/v1/sessions/{session_id}")}


def _fill(path: str, t: Target, *, spare: bool = False) -> str:
    values = {
        "session_id": t.spare_session if spare else t.session_id,
        "run_id": t.run_id,
        "kind": t.kind,
        "name": t.name,
    }
    return re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], path)


def walk(client: httpx.Client, t: Target) -> list[bytes]:
    """Call every route of the server's schema; the bodies of every answer."""
    schema = client.get("/openapi.json").json()
    out: list[bytes] = [client.get("/").content, client.get("/openapi.json").content]
    writes: list[tuple[str, str]] = []
    for path, item in schema["paths"].items():
        for method, op in item.items():
            if method != "get":
                writes.append((method, path))
                continue
            out.append(client.get(_fill(path, t)).content)
            query = [p["name"] for p in op.get("parameters", []) if p.get("in") == "query"]
            runs = {q: t.run_id for q in query if q in ("run", "run_id")}
            if runs:
                out.append(client.get(_fill(path, t), params=runs).content)
    unknown = [w for w in writes if w not in WRITES and w not in LAST]
    assert not unknown, f"the walk does not know how to call {unknown}: add them to WRITES"
    for method, path in writes:
        if (method, path) in WRITES:
            r = client.request(method, _fill(path, t), **WRITES[(method, path)](t))
            out.append(r.content)
    # Whole-state writes last: PUT the state as read (secrets read as the marker keep
    # their values), and DELETE a spare session.
    if ("put", "/v1/sessions/{session_id}/state") in writes:
        state = client.get(_fill("/v1/sessions/{session_id}/state", t)).json()["state"]
        out.append(client.put(_fill("/v1/sessions/{session_id}/state", t), json=state).content)
    if ("delete", "/v1/sessions/{session_id}") in writes:
        out.append(client.delete(_fill("/v1/sessions/{session_id}", t, spare=True)).content)
    return out
