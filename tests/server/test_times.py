"""Times in API bodies are RFC 3339 strings with a zone (UTC), and the OpenAPI schema says
so; the JSON Lines export keeps the stored numbers (it is what import reads)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tests.server.conftest import LiveServer


def _moment(value: Any) -> datetime:
    assert isinstance(value, str) and value.endswith("Z"), value
    moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    assert moment.tzinfo is not None
    assert abs((datetime.now(UTC) - moment).total_seconds()) < 600
    return moment


def test_times_are_rfc3339_with_a_zone(live: LiveServer) -> None:
    with live.client() as c:
        run = c.post("/v1/agents/lister/runs", json={"input": "add tea", "session_id": "t1"}).json()
        [listed] = c.get("/v1/sessions").json()["sessions"]
        assert _moment(listed["created_at"]) <= _moment(listed["updated_at"])
        detail = c.get("/v1/sessions/t1").json()
        _moment(detail["session"]["updated_at"])
        for summary in detail["runs"]:
            assert _moment(summary["created_at"]) <= _moment(summary["updated_at"])
        _moment(c.get(f"/v1/sessions/t1/runs/{run['run_id']}").json()["created_at"])
        for event in c.get("/v1/sessions/t1/events").json()["events"]:
            _moment(event["created_at"])
        for entry in c.get("/v1/sessions/t1/history").json()["history"]:
            _moment(entry["created_at"])
        schema = c.get("/openapi.json").json()["components"]["schemas"]
        for name in ("SessionInfo", "RunSummary", "Event", "Commit", "PausedRun"):
            for field in ("created_at", "updated_at"):
                if field in schema[name]["properties"]:
                    assert schema[name]["properties"][field]["format"] == "date-time", name
        export = c.get("/v1/sessions/t1/export").text.splitlines()
        assert '"created_at": 1' in export[0].replace('"created_at":1', '"created_at": 1')
