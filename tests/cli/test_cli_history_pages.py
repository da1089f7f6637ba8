"""`statewise state history` reads and prints a page at a time: `--limit`/`--before`
choose the page, `--json` prints one version per line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from statewise import Agent, Sessions
from statewise.cli import _state
from statewise.db import SqliteDb
from tests.cli.test_cli_sessions import invoke


@pytest.fixture()
def db(tmp_path: Path) -> str:
    agent = Agent(name="a", db=SqliteDb(db_file=str(tmp_path / "h.db")))
    for n in range(1, 8):
        agent.update_session_state({"n": n}, session_id="h")
    return f"sqlite:///{tmp_path / 'h.db'}"


def test_history_pages_back_with_before_and_limit(db: str) -> None:
    code, out, err = invoke("state", "history", "h", "--db", db, "--json", "--limit", "3")
    assert code == 0, err
    assert [d["version"] for d in json.loads(out)] == [5, 6, 7]
    args = ("state", "history", "h", "--db", db, "--json", "--before", "5", "--limit", "3")
    code, out, err = invoke(*args)
    assert [d["version"] for d in json.loads(out)] == [2, 3, 4]
    code, out, _ = invoke("state", "history", "h", "--db", db, "--json", "--before", "3")
    assert [d["version"] for d in json.loads(out)] == [1, 2]
    code, out, _ = invoke("state", "history", "h", "--db", db, "--limit", "3")
    assert code == 0 and "--before 5 --limit 3" in out  # where the older page starts


def test_history_is_read_and_printed_a_page_at_a_time(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_state, "HISTORY_PAGE", 2)
    asked: list[int | None] = []
    state_deltas = Sessions.state_deltas

    def paged(self: Sessions, session_id: str, **kwargs: Any) -> list[dict[str, Any]]:
        asked.append(kwargs.get("limit"))
        return state_deltas(self, session_id, **kwargs)

    monkeypatch.setattr(Sessions, "state_deltas", paged)
    code, out, err = invoke("state", "history", "h", "--db", db, "--json")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "[" and lines[-1] == "]" and len(lines) == 7 + 2  # one per version
    assert [d["version"] for d in json.loads(out)] == list(range(1, 8))
    assert asked == [2, 2, 2, 2]
    code, out, _ = invoke("state", "history", "h", "--db", db)
    assert code == 0 and all(f" {n} " in out for n in range(1, 8))


def test_sessions_export_is_a_backup_with_secrets_still_encrypted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cryptography.fernet import Fernet

    monkeypatch.setenv("STATEWISE_ENCRYPTION_KEY", Fernet.generate_key().decode())
    source = tmp_path / "src.db"
    agent = Agent(name="a", db=SqliteDb(db_file=str(source)), secret_keys=["api_token"])
    agent.update_session_state({"api_token": "tok-0123456789"}, session_id="v")
    out = tmp_path / "v.jsonl"
    code, _, err = invoke(
        "sessions", "export", "v", "--db", f"sqlite:///{source}", "--out", str(out)
    )
    assert code == 0, err
    assert "tok-0123456789" not in out.read_text() and "$secret" in out.read_text()
    SqliteDb(db_file=str(tmp_path / "dst.db")).close()
    target = f"sqlite:///{tmp_path / 'dst.db'}"
    code, _, err = invoke("sessions", "import", str(out), "--db", target)
    assert code == 0, err
    restored = Agent(name="a", db=target, secret_keys=["api_token"])
    assert restored.get_session_state("v")["api_token"] == "tok-0123456789"
