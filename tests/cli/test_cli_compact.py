"""`statewise sessions compact` against a SQLite file: what it removes, what it keeps,
and its answer when no policy is given."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from statewise import Agent
from statewise.cli import app
from statewise.db import SqliteDb

runner = CliRunner()


def _database(path: Path) -> str:
    with SqliteDb(path) as db:
        agent = Agent(db=db, session_state={"n": 0})
        for sid in ("a", "b"):
            for i in range(1, 31):
                agent.state.for_session(sid).set("n", i)
    return f"sqlite:///{path}"


def test_compact_every_session_then_one_as_json(tmp_path: Path) -> None:
    url = _database(tmp_path / "c.db")
    done = runner.invoke(app, ["sessions", "compact", "--db", url, "--keep-versions", "10"])
    assert done.exit_code == 0, done.output
    assert "compacted 2 sessions: removed 40 deltas" in done.output
    one = runner.invoke(
        app,
        ["sessions", "compact", "--db", url, "--session", "a", "--keep-versions", "5", "--json"],
    )
    assert one.exit_code == 0, one.output
    [record] = json.loads(one.output)
    assert record["session_id"] == "a" and record["horizon"]["version"] == 25
    assert record["deltas"] == 5
    with SqliteDb(tmp_path / "c.db") as db:
        assert Agent(db=db).get_session_state("a") == {"n": 30}
        assert db.read_horizon("b").version == 20


def test_compact_needs_a_policy_and_an_existing_session(tmp_path: Path) -> None:
    url = _database(tmp_path / "c.db")
    none = runner.invoke(app, ["sessions", "compact", "--db", url])
    assert none.exit_code == 2 and "no retention policy" in none.output
    missing = runner.invoke(
        app, ["sessions", "compact", "--db", url, "--session", "zz", "--keep-days", "1"]
    )
    assert missing.exit_code == 2 and "zz" in missing.output


def test_compact_by_the_policy_in_the_url(tmp_path: Path) -> None:
    url = _database(tmp_path / "c.db") + "?keep_versions=25"
    done = runner.invoke(app, ["sessions", "compact", "--db", url])
    assert done.exit_code == 0, done.output
    assert "compacted 2 sessions: removed 10 deltas" in done.output
