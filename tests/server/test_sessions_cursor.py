"""`GET /v1/sessions` pages by cursor: `next_cursor` walks every session once, in the
listing order, with the user filter; a cursor that was not given out is a 422."""

from __future__ import annotations

from tests.server.conftest import LiveServer
from tests.server.test_api import run


def test_sessions_list_walks_by_cursor(live: LiveServer) -> None:
    with live.client() as c:
        for n in range(5):
            run(c, "hi", session_id=f"c{n}", user_id="alice" if n % 2 else "bob")
        everything = [s["session_id"] for s in c.get("/v1/sessions").json()["sessions"]]
        assert everything == ["c4", "c3", "c2", "c1", "c0"]
        walked, cursor, pages = [], None, 0
        while True:
            params = {"limit": 2} | ({"cursor": cursor} if cursor else {})
            body = c.get("/v1/sessions", params=params).json()
            walked += [s["session_id"] for s in body["sessions"]]
            pages += 1
            cursor = body["next_cursor"]
            if cursor is None:
                break
        assert walked == everything and pages == 3
        first = c.get("/v1/sessions", params={"limit": 1, "user_id": "alice"}).json()
        rest = c.get(
            "/v1/sessions", params={"user_id": "alice", "cursor": first["next_cursor"]}
        ).json()
        assert [s["session_id"] for s in first["sessions"] + rest["sessions"]] == ["c3", "c1"]
        assert rest["next_cursor"] is None
        bad = c.get("/v1/sessions", params={"cursor": "not-a-cursor"})
        assert bad.status_code == 422 and "cursor" in bad.text
