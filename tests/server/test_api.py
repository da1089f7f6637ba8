"""Every endpoint over real HTTP: runs (JSON and SSE), sessions, state with If-Match,
events, history, diff, rollback, fork, export; errors as problem+json."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.server.conftest import LiveServer

PROBLEM = "application/problem+json"


def run(client: httpx.Client, text: str, session_id: str = "s1", **body: Any) -> dict[str, Any]:
    r = client.post(
        "/v1/agents/lister/runs", json={"input": text, "session_id": session_id, **body}
    )
    assert r.status_code == 200, r.text
    data: dict[str, Any] = r.json()
    return data


def parse_sse(text: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for block in text.strip().split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            name, _, value = line.partition(": ")
            fields[name] = fields.get(name, "") + value
        out.append((fields["event"], json.loads(fields["data"])))
    return out


def assert_problem(r: httpx.Response, status: int, *words: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith(PROBLEM)
    body: dict[str, Any] = r.json()
    assert body["status"] == status and body["title"] and body["detail"]
    for word in words:
        assert word in body["detail"], body["detail"]
    return body


def test_apps_health_docs_and_page(live: LiveServer) -> None:
    with live.client() as c:
        assert c.get("/healthz").json() == {"status": "ok", "auth": False}
        apps = c.get("/v1/apps").json()["apps"]
        assert apps == [
            {
                "kind": "agents",
                "name": "lister",
                "app_name": "lister",
                "description": None,
                "runs_url": "/v1/agents/lister/runs",
                "sends_history": False,
            }
        ]
        assert c.get("/v1/me").json() == {"user_id": None, "admin": True}
        assert "/v1/sessions/{session_id}/state" in c.get("/openapi.json").json()["paths"]
        assert c.get("/docs").status_code == 200
        page = c.get("/")
        assert page.status_code == 200 and "statewise" in page.text
        assert c.get("/static/app.js").status_code == 200


def test_run_json_result_persists_state(live: LiveServer) -> None:
    with live.client() as c:
        out = run(c, "add milk, eggs", user_id="u1")
        assert out["content"] == "Done: added eggs"
        assert out["session_id"] == "s1" and out["user_id"] == "u1"
        assert out["status"] == "completed" and out["metrics"]["tool_calls"] == 2
        assert out["session_state"] == {"items": ["milk", "eggs"], "count": 2}
        again = run(c, "add bread")
        assert again["session_state"]["items"] == ["milk", "eggs", "bread"]
        assert again["user_id"] == "u1"  # the session keeps its owner


def test_run_without_session_id_starts_one_and_does_not_inherit_user(live: LiveServer) -> None:
    with live.client() as c:
        first = run(c, "hello", session_id=None, user_id="someone")  # type: ignore[arg-type]
        r = c.post("/v1/agents/lister/runs", json={"input": "hi"})
        second = r.json()
        assert second["session_id"] != first["session_id"]
        assert second["user_id"] is None
        assert r.headers["location"] == f"/v1/sessions/{second['session_id']}"


def test_run_with_session_state_merges(live: LiveServer) -> None:
    with live.client() as c:
        out = run(c, "hello", session_state={"mood": "happy", "api_token": "sk-123"})
        assert out["session_state"]["mood"] == "happy"
        assert out["session_state"]["api_token"] == "***"


def test_run_streams_typed_events_over_sse(live: LiveServer) -> None:
    with live.client() as c:
        r = c.post(
            "/v1/agents/lister/runs",
            json={"input": "add tea", "session_id": "sse"},
            headers={"Accept": "text/event-stream"},
        )
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        events = parse_sse(r.text)
        kinds = [e for e, _ in events]
        assert kinds[0] == "run_started" and kinds[-1] == "run_completed"
        assert "tool_call_started" in kinds and "tool_call_completed" in kinds
        changed = [d for e, d in events if e == "state_changed"]
        assert changed, kinds
        assert any(op["path"][0] == "items" for d in changed for op in d["ops"])
        assert all(d["event"] == e for e, d in events)
        final = events[-1][1]["output"]
        assert final["session_state"]["items"] == ["tea"]


def test_sse_stream_arrives_incrementally(live: LiveServer) -> None:
    with (
        live.client() as c,
        c.stream(
            "POST",
            "/v1/agents/lister/runs",
            json={"input": "add a, b, c", "session_id": "inc"},
            headers={"Accept": "text/event-stream"},
        ) as r,
    ):
        chunks = [chunk for chunk in r.iter_text() if chunk.strip()]
        assert len(chunks) >= 1
        assert "run_completed" in "".join(chunks)


def test_sessions_list_paged_and_filtered(live: LiveServer) -> None:
    with live.client() as c:
        for n in range(5):
            run(c, "hi", session_id=f"p{n}", user_id="alice" if n % 2 else "bob")
        everything = c.get("/v1/sessions").json()
        assert {s["session_id"] for s in everything["sessions"]} == {f"p{n}" for n in range(5)}
        page1 = c.get("/v1/sessions", params={"limit": 2}).json()
        page2 = c.get("/v1/sessions", params={"limit": 2, "offset": 2}).json()
        assert len(page1["sessions"]) == 2 and page1["next_offset"] == 2
        ids = [s["session_id"] for s in page1["sessions"] + page2["sessions"]]
        assert len(set(ids)) == 4
        alice = c.get("/v1/sessions", params={"user_id": "alice"}).json()["sessions"]
        assert {s["session_id"] for s in alice} == {"p1", "p3"}
        assert c.get("/v1/sessions", params={"app": "nope"}).json()["sessions"] == []


def test_get_and_delete_session(live: LiveServer) -> None:
    with live.client() as c:
        out = run(c, "add x")
        body = c.get("/v1/sessions/s1").json()
        assert body["session"]["session_id"] == "s1"
        assert body["state"] == {"items": ["x"], "count": 1}
        assert body["version"] >= 1
        assert [r["run_id"] for r in body["runs"]] == [out["run_id"]]
        assert body["runs"][0]["input"] == "add x"
        one = c.get(f"/v1/sessions/s1/runs/{out['run_id']}").json()
        assert [m["role"] for m in one["messages"]][:2] == ["user", "assistant"]
        assert_problem(c.get("/v1/sessions/s1/runs/nope"), 404, "no run")
        assert c.delete("/v1/sessions/s1").status_code == 204
        assert_problem(c.get("/v1/sessions/s1"), 404, "s1")
        assert_problem(c.delete("/v1/sessions/s1"), 404)


def test_state_get_put_patch_with_if_match(live: LiveServer) -> None:
    with live.client() as c:
        run(c, "add x", session_state={"api_token": "sk-1"})
        r = c.get("/v1/sessions/s1/state")
        version = r.json()["version"]
        assert r.headers["etag"] == f'"{version}"'
        assert r.json()["state"]["api_token"] == "***"
        # merge patch: set nested, delete with null; "***" keeps the stored secret
        r = c.patch(
            "/v1/sessions/s1/state",
            content=json.dumps({"prefs": {"lang": "fr"}, "count": None, "api_token": "***"}),
            headers={"If-Match": f'"{version}"', "Content-Type": "application/merge-patch+json"},
        )
        assert r.status_code == 200, r.text
        assert r.json()["version"] == version + 1
        assert r.json()["state"] == {"items": ["x"], "prefs": {"lang": "fr"}, "api_token": "***"}
        # the 412: someone else's change landed since `version`
        stale = c.patch("/v1/sessions/s1/state", json={"a": 1}, headers={"If-Match": str(version)})
        body = assert_problem(stale, 412, "version")
        assert body["current_version"] == version + 1
        stale_put = c.put("/v1/sessions/s1/state", json={}, headers={"If-Match": f'"{version}"'})
        assert_problem(stale_put, 412)
        assert c.get("/v1/sessions/s1/state").json()["version"] == version + 1  # nothing written
        # PUT replaces the session's keys
        r = c.put(
            "/v1/sessions/s1/state",
            json={"items": ["y"], "api_token": "***"},
            headers={"If-Match": f'"{version + 1}"'},
        )
        assert r.status_code == 200, r.text
        assert r.json()["state"] == {"items": ["y"], "api_token": "***"}
        # without If-Match the write is unconditional
        assert c.patch("/v1/sessions/s1/state", json={"z": True}).status_code == 200
        # the secret survived the "***" round trips
        history = c.get("/v1/sessions/s1/history").json()["history"]
        assert all(op.get("value") != "sk-1" for h in history for op in h["ops"])
        assert_problem(
            c.patch("/v1/sessions/s1/state", json={"a": 1}, headers={"If-Match": "abc"}),
            400,
            "If-Match",
        )
        assert_problem(c.patch("/v1/sessions/s1/state", json={"temp:x": 1}), 422, "temp:")
        assert_problem(c.put("/v1/sessions/nope/state", json={}), 404)


def test_concurrent_if_match_writers_one_wins(live: LiveServer) -> None:
    import concurrent.futures

    with live.client() as c:
        run(c, "hi")
        version = c.get("/v1/sessions/s1/state").json()["version"]

        def write(n: int) -> int:
            with live.client() as own:
                r = own.patch(
                    "/v1/sessions/s1/state", json={f"k{n}": n}, headers={"If-Match": str(version)}
                )
                return r.status_code

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            codes = list(pool.map(write, range(8)))
        assert codes.count(200) == 1 and codes.count(412) == 7, codes
        state = c.get("/v1/sessions/s1/state").json()
        assert state["version"] == version + 1
        assert sum(k.startswith("k") for k in state["state"]) == 1


def test_events_paged(live: LiveServer) -> None:
    with live.client() as c:
        run(c, "add a")
        run(c, "add b")
        everything = c.get("/v1/sessions/s1/events", params={"limit": 1000}).json()["events"]
        seqs = [e["seq"] for e in everything]
        assert seqs == sorted(seqs) and len(seqs) > 6
        types = {e["type"] for e in everything}
        assert {"run_started", "user_input", "state_delta", "run_completed"} <= types
        first = c.get("/v1/sessions/s1/events", params={"limit": 3}).json()
        assert [e["seq"] for e in first["events"]] == seqs[:3]
        nxt = c.get("/v1/sessions/s1/events", params={"after": first["next_after"], "limit": 3})
        assert [e["seq"] for e in nxt.json()["events"]] == seqs[3:6]
        before = c.get("/v1/sessions/s1/events", params={"before": seqs[2]}).json()["events"]
        assert [e["seq"] for e in before] == seqs[:2]
        run_id = everything[0]["run_id"]
        mine = c.get("/v1/sessions/s1/events", params={"run_id": run_id, "limit": 1000}).json()
        assert {e["run_id"] for e in mine["events"]} == {run_id}
        assert_problem(c.get("/v1/sessions/s1/events", params={"limit": 0}), 422, "limit")


def test_history_diff_rollback_fork_export(live: LiveServer) -> None:
    with live.client() as c:
        first = run(c, "add a", session_state={"api_token": "sk-secret"})
        second = run(c, "add b")
        history = c.get("/v1/sessions/s1/history").json()["history"]
        versions = [h["version"] for h in history]
        assert versions == sorted(versions)
        assert {h["run_id"] for h in history} >= {first["run_id"], second["run_id"]}
        # the diff one run made
        d = c.get("/v1/sessions/s1/diff", params={"run": second["run_id"]}).json()
        assert {"path": ["items", 1], "kind": "added", "after": "b"} in d["changes"]
        assert any(ch["path"] == ["count"] and ch["kind"] == "changed" for ch in d["changes"])
        # between versions, and by run id
        whole = c.get("/v1/sessions/s1/diff", params={"from": 0}).json()["changes"]
        token = next(ch for ch in whole if ch["path"] == ["api_token"])
        assert token == {"path": ["api_token"], "kind": "added", "after": "***"}
        by_run = c.get(
            "/v1/sessions/s1/diff", params={"from": first["run_id"], "to": second["run_id"]}
        ).json()
        assert by_run["changes"]
        assert_problem(c.get("/v1/sessions/s1/diff", params={"to": 999}), 422, "past")
        assert_problem(c.get("/v1/sessions/s1/diff", params={"run": "nope"}), 404)
        # rollback to the state after the first run: a new commit
        before = d["from"]
        r = c.post("/v1/sessions/s1/rollback", json={"to": before})
        assert r.status_code == 200, r.text
        assert r.json()["state"]["items"] == ["a"]
        assert r.json()["version"] == versions[-1] + 1
        r = c.post("/v1/sessions/s1/rollback", json={"to": second["run_id"]})
        assert r.json()["state"]["items"] == ["a", "b"]
        assert_problem(c.post("/v1/sessions/s1/rollback", json={"to": 10_000}), 422)
        assert_problem(c.post("/v1/sessions/s1/rollback", json={}), 422, "to")
        # fork at the first run
        r = c.post("/v1/sessions/s1/fork", json={"at": first["run_id"], "new_session_id": "f1"})
        assert r.status_code == 201, r.text
        assert r.json()["session_id"] == "f1" and r.json()["state"]["items"] == ["a"]
        assert c.get("/v1/sessions/f1/state").json()["state"]["items"] == ["a"]
        assert_problem(c.post("/v1/sessions/s1/fork", json={"new_session_id": "f1"}), 409)
        auto = c.post("/v1/sessions/s1/fork").json()
        assert auto["session_id"] not in ("s1", "f1")
        # export as JSON Lines, secrets redacted
        r = c.get("/v1/sessions/s1/export")
        assert r.headers["content-type"].startswith("application/jsonl")
        lines = [json.loads(line) for line in r.text.splitlines()]
        assert lines[0]["type"] == "session" and lines[0]["session_id"] == "s1"
        assert {line["type"] for line in lines} == {"session", "delta", "event", "run"}
        assert "sk-secret" not in r.text


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "status", "word"),
    [
        ("post", "/v1/agents/nope/runs", {"json": {"input": "x"}}, 404, "lister"),
        ("post", "/v1/robots/lister/runs", {"json": {"input": "x"}}, 422, "kind"),
        ("post", "/v1/agents/lister/runs", {"json": {}}, 422, "input"),
        ("post", "/v1/agents/lister/runs", {"json": {"input": "x", "bogus": 1}}, 422, "bogus"),
        (
            "post",
            "/v1/agents/lister/runs",
            {"content": b'{"input": ', "headers": {"Content-Type": "application/json"}},
            400,
            "JSON",
        ),
        (
            "post",
            "/v1/agents/lister/runs",
            {"json": {"input": "x", "session_id": "a\u0001b"}},
            400,
            "control",
        ),
        (
            "post",
            "/v1/agents/lister/runs",
            {"json": {"input": "x", "session_state": [1]}},
            422,
            "session_state",
        ),
        ("get", "/v1/sessions/" + "x" * 300, {}, 422, "256"),
        ("get", "/v1/sessions/%01", {}, 400, "control"),
        ("get", "/v1/nothing", {}, 404, "/docs"),
        ("put", "/v1/apps", {}, 405, "PUT"),
        ("post", "/v1/agents/lister/runs", {"content": b"x" * 2_000_000}, 413, "limit"),
    ],
)
def test_bad_requests_are_4xx_problems(
    live: LiveServer, method: str, path: str, kwargs: dict[str, Any], status: int | None, word: str
) -> None:
    with live.client() as c:
        r = getattr(c, method)(path, **kwargs)
        if status is None:
            assert r.status_code < 500, r.text
        else:
            assert_problem(r, status, word)
        assert c.get("/v1/sessions").json()["sessions"] == []  # never a partial write


def test_body_limit_is_configurable(make_live: Any) -> None:
    live = make_live(max_body_bytes=100)
    with live.client() as c:
        r = c.post("/v1/agents/lister/runs", json={"input": "x" * 200})
        assert_problem(r, 413, "100 bytes")
        assert run(c, "ok")["content"] == "You said: ok"


def test_body_limit_holds_for_chunked_bodies_without_a_content_length(make_live: Any) -> None:
    live = make_live(max_body_bytes=100)

    def chunks(body: bytes) -> Any:
        yield from (body[i : i + 30] for i in range(0, len(body), 30))

    with live.client() as c:
        big = json.dumps({"input": "x" * 200}).encode()
        r = c.post(
            "/v1/agents/lister/runs",
            content=chunks(big),
            headers={"Content-Type": "application/json"},
        )
        assert "content-length" not in r.request.headers
        assert_problem(r, 413, "100 bytes")
        small = json.dumps({"input": "ok"}).encode()
        r = c.post(
            "/v1/agents/lister/runs",
            content=chunks(small),
            headers={"Content-Type": "application/json"},
        )
        assert r.status_code == 200, r.text
        assert r.json()["content"] == "You said: ok"
