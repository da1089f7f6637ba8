"""The server reads and writes sessions through the public session service only: it
redacts nothing itself, pages history and streams exports a page of storage at a time."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from statewise import Sessions
from statewise.agent import service
from statewise.db import SqliteDb
from statewise.db.base import BaseDb
from statewise.server import create_app
from tests.server.conftest import make_agent, start_server, stop_server

SERVER = Path(__file__).resolve().parents[2] / "src" / "statewise" / "server"

# A call or import of a redaction helper: the server leaves redaction to `Sessions`.
_REDACTS = re.compile(
    r"\b(redact\w*|mask_\w*|masked\w*|secret_values|Redaction|registered_secrets)\s*\("
    r"|statewise\.state\.secrets"
    r"|\bimport\b[^\n]*\b(redact\w*|mask_\w*|Redaction)\b"
)


def test_the_server_and_the_page_redact_nothing_themselves() -> None:
    found = []
    for path in sorted(SERVER.rglob("*")):
        if path.suffix not in (".py", ".js", ".html"):
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if _REDACTS.search(line):
                found.append(f"{path.relative_to(SERVER)}:{n}: {line.strip()}")
    assert not found, "redaction belongs to statewise.Sessions:\n" + "\n".join(found)


def test_the_server_does_not_reach_into_a_served_objects_store() -> None:
    found = []
    for path in sorted(SERVER.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        for pattern in (r"\._store\b", r"kind\[:-1\]", r"hasattr\([^)]*acontinue_run"):
            found += [f"{path.name}: {m.group(0)}" for m in re.finditer(pattern, text)]
    assert not found, found


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[httpx.Client, Any]]:
    agent = make_agent(SqliteDb(db_file=str(tmp_path / "svc.db")))
    live = start_server(create_app([agent]))
    agent.update_session_state({"api_token": "sk-live-0123456789"}, session_id="s1")
    for n in range(1, 150):
        agent.update_session_state({"count": n}, session_id="s1")
    try:
        with live.client() as client:
            yield client, agent
    finally:
        stop_server(live)


def test_history_is_paged_forward_and_back(served: tuple[httpx.Client, Any]) -> None:
    client, _agent = served
    page = client.get("/v1/sessions/s1/history").json()
    assert len(page["history"]) == 100  # the default page is bounded
    assert [h["version"] for h in page["history"]] == list(range(1, 101))
    assert page["next_after_version"] == 100
    rest = client.get(
        "/v1/sessions/s1/history", params={"after_version": page["next_after_version"]}
    ).json()
    assert [h["version"] for h in rest["history"]] == list(range(101, 151))
    assert rest["next_after_version"] is None
    # back from the newest, a small page at a time
    seen: list[int] = []
    params: dict[str, Any] = {"before": 151, "limit": 40}
    while True:
        back = client.get("/v1/sessions/s1/history", params=params).json()
        seen = [h["version"] for h in back["history"]] + seen
        if back["next_before"] is None:
            break
        params["before"] = back["next_before"]
    assert seen == list(range(1, 151))
    first = client.get("/v1/sessions/s1/history", params={"limit": 1}).json()["history"][0]
    token = next(op for op in first["ops"] if op["path"] == ["api_token"])
    assert token["value"] == "***"


def test_export_streams_pages_of_storage_redacted(
    served: tuple[httpx.Client, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, agent = served
    monkeypatch.setattr(service, "EXPORT_PAGE", 40)  # 150 commits: several pages
    stored = agent.export_session("s1")
    reads: list[int | None] = []
    read_deltas = type(agent.db).read_deltas

    def counting(self: BaseDb, key: Any, **kwargs: Any) -> Any:
        reads.append(kwargs.get("limit"))
        return read_deltas(self, key, **kwargs)

    def whole(self: BaseDb, session_id: str) -> Any:
        raise AssertionError("the export route read the whole session at once")

    monkeypatch.setattr(type(agent.db), "read_deltas", counting)
    monkeypatch.setattr(type(agent.db), "export_session", whole)
    with client.stream("GET", "/v1/sessions/s1/export") as r:
        assert r.status_code == 200
        lines = [json.loads(line) for line in r.iter_lines() if line]
    assert reads and all(limit == service.EXPORT_PAGE for limit in reads)
    assert len(lines) == len(stored)
    assert [(x["type"], x.get("version"), x.get("seq")) for x in lines] == [
        (x["type"], x.get("version"), x.get("seq")) for x in stored
    ]
    assert "sk-live-0123456789" not in json.dumps(lines)
    first = next(x for x in lines if x["type"] == "delta" and x["version"] == 1)
    token = next(op for s in first["segments"] for op in s["ops"] if op["path"] == ["api_token"])
    assert token["value"] == "***"
    # a backup keeps what is stored (the secret encrypted), for import to restore
    with Sessions(agent.db) as sessions:
        backup = list(sessions.iter_export("s1", as_stored=True))
    assert backup == json.loads(json.dumps(stored))


def test_export_of_a_missing_session_is_a_404_not_a_broken_stream(
    served: tuple[httpx.Client, Any],
) -> None:
    client, _agent = served
    r = client.get("/v1/sessions/nope/export")
    assert r.status_code == 404
