"""`statewise sessions ...`, `state rollback|fork` and `runs paused|approve|reject` against
real databases (a SQLite file; PostgreSQL too), each checking what it leaves there."""

from __future__ import annotations

import json
import re
import secrets
from pathlib import Path

import pytest
from typer.testing import CliRunner

from statewise import Sessions
from statewise.cli import app
from tests.cli.test_cli_pauses import AGENT_FILE as SUPPORT_APP
from tests.db.conftest import POSTGRES_URL, postgres_problem, require

runner = CliRunner()

AGENT_FILE = """
from statewise import Agent, RunContext
from statewise.models import FunctionModel, ModelResponse, ToolCall


def remember(run_context: RunContext, item: str) -> str:
    \"\"\"Remember an item.\"\"\"
    run_context.session_state.setdefault("items", []).append(item)
    return "ok"


def answer(messages, info):
    last = messages[-1]
    if last.role == "user":
        return ModelResponse(tool_calls=[ToolCall("remember", {"item": last.content}, "c1")])
    return "noted"


helper = Agent(model=FunctionModel(answer), name="helper", tools=[remember])
"""


def invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), env={"COLUMNS": "200"})
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture()
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_agent.py").write_text(AGENT_FILE)
    (tmp_path / "support_app.py").write_text(SUPPORT_APP)
    return tmp_path


def _fill(db: str, session: str, *items: str, user: str = "ann") -> None:
    for item in items:
        code, _, err = invoke(
            "run", "my_agent.py", item, "--session", session, "--user", user, "--db", db
        )
        assert code == 0, err


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, workdir: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{workdir / 'cli.db'}"
    require(postgres_problem())
    schema = f"sw_cli_{secrets.token_hex(4)}"
    request.addfinalizer(lambda: _drop(schema))
    return f"{POSTGRES_URL}?schema={schema}"


def _drop(schema: str) -> None:
    import psycopg

    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_sessions_list_show_runs(db_url: str) -> None:
    _fill(db_url, "a", "milk", "eggs")
    _fill(db_url, "b", "tea", user="bob")
    code, out, err = invoke("sessions", "list", "--db", db_url, "--json")
    assert code == 0, err
    listed = json.loads(out)
    assert [s["session_id"] for s in listed] == ["b", "a"]  # most recently updated first
    assert listed[1]["user_id"] == "ann" and re.match(r"\d{4}-\d\d-\d\d ", listed[1]["updated_at"])
    code, out, _ = invoke("sessions", "list", "--db", db_url, "--user", "ann", "--json")
    assert [s["session_id"] for s in json.loads(out)] == ["a"]
    code, out, _ = invoke("sessions", "list", "--db", db_url)
    assert code == 0 and "ann" in out and "bob" in out
    code, out, err = invoke("sessions", "show", "a", "--db", db_url, "--json")
    assert code == 0, err
    shown = json.loads(out)
    assert shown["state"] == {"items": ["milk", "eggs"]} and shown["runs"] == 2
    assert shown["runs_by_status"] == {"completed": 2} and shown["paused_runs"] == []
    code, out, _ = invoke("sessions", "runs", "a", "--db", db_url, "--json")
    assert [r["input"] for r in json.loads(out)] == ["milk", "eggs"]
    code, _, err = invoke("sessions", "show", "nope", "--db", db_url)
    assert code == 2 and "no session 'nope'" in err and "Recent sessions: b, a" in err


def test_export_import_delete_round_trip(db_url: str, workdir: Path) -> None:
    _fill(db_url, "a", "milk", "eggs")
    code, out, err = invoke("sessions", "export", "a", "--db", db_url)
    assert code == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    assert lines and all(isinstance(line, dict) for line in lines)
    path = workdir / "a.jsonl"
    assert invoke("sessions", "export", "a", "--db", db_url, "--out", str(path))[0] == 0
    assert path.read_text(encoding="utf-8").splitlines() == out.splitlines()
    code, _, err = invoke("sessions", "import", str(path), "--db", db_url)
    assert code == 2 and "exists" in err  # an existing session is never overwritten
    code, _, err = invoke("sessions", "delete", "a", "--db", db_url)
    assert code == 2 and "--yes" in err  # nobody at a terminal to confirm
    with Sessions(db_url) as sessions:
        assert sessions.get("a") is not None
    code, out, err = invoke("sessions", "delete", "a", "--db", db_url, "--yes")
    assert code == 0 and "deleted session a" in out, err
    with Sessions(db_url) as sessions:
        assert sessions.get("a") is None
    code, out, err = invoke("sessions", "import", str(path), "--db", db_url)
    assert code == 0 and out.strip() == "imported session a", err
    with Sessions(db_url) as sessions:
        assert sessions.state("a").state == {"items": ["milk", "eggs"]}
        assert [r.input for r in sessions.runs("a")] == ["milk", "eggs"]


def test_prune_deletes_only_old_sessions(workdir: Path) -> None:
    db = f"sqlite:///{workdir / 'p.db'}"
    _fill(db, "recent", "x")
    code, out, err = invoke("sessions", "prune", "--older-than", "1", "--db", db, "--yes")
    assert code == 0 and out.strip() == "deleted 0 sessions", err
    code, out, _ = invoke("sessions", "prune", "--older-than", "0", "--db", db, "--yes")
    assert code == 0 and out.strip() == "deleted 1 sessions"
    with Sessions(db) as sessions:
        assert sessions.list_sessions() == []


def test_state_rollback_and_fork(db_url: str) -> None:
    _fill(db_url, "a", "milk", "eggs", "tea")
    code, out, err = invoke("state", "rollback", "a", "--to", "1", "--db", db_url, "--json")
    assert code == 0, err
    rolled = json.loads(out)
    assert rolled["state"] == {"items": ["milk"]} and rolled["version"] == 4
    code, out, _ = invoke("state", "history", "a", "--db", db_url, "--json")
    history = json.loads(out)
    assert [s["source"] for s in history[-1]["segments"]] == ["rollback:to=1"]  # recorded
    code, out, _ = invoke("state", "history", "a", "--db", db_url, "--json", "--limit", "2")
    assert [h["version"] for h in json.loads(out)] == [3, 4]  # the last two
    code, out, err = invoke("state", "fork", "a", "--at", "2", "--new-id", "a2", "--db", db_url)
    assert code == 0 and out.strip() == "a2", err
    with Sessions(db_url) as sessions:
        assert sessions.state("a2").state == {"items": ["milk", "eggs"]}
        forked, source = sessions.require("a2"), sessions.require("a")
        assert (forked.user_id, forked.app_name) == (source.user_id, source.app_name)
    code, _, err = invoke("state", "fork", "a", "--new-id", "a2", "--db", db_url)
    assert code == 2 and "exists" in err
    code, _, err = invoke("state", "rollback", "a", "--to", "99", "--db", db_url)
    assert code == 2 and "no version 99" in err


def test_runs_paused_then_approve_and_reject(workdir: Path) -> None:
    db = "sqlite:///app.db"
    for session in ("p1", "p2"):
        code, _, err = invoke("run", "support_app.py", "refund 42", "--session", session)
        assert code == 3, err
    code, out, err = invoke("runs", "paused", "p1", "--db", db, "--json")
    assert code == 0, err
    [paused] = json.loads(out)
    assert paused["pending_tool_calls"][0]["tool_name"] == "refund"
    run_id = paused["run_id"]
    code, out, _ = invoke("runs", "paused", "p1", "--db", db)
    assert "refund" in out and '{"order_id": 42}' in out
    code, out, err = invoke("runs", "approve", "support_app.py", "p1", run_id)
    assert code == 0 and out.splitlines()[-1] == "[support]: done: refunded 42", err
    with Sessions(db) as sessions:
        assert sessions.state("p1").state == {"refunded": [42]}
    code, out, _ = invoke("runs", "paused", "p1", "--db", db)
    assert "no paused run" in out
    [other] = json.loads(invoke("runs", "paused", "p2", "--db", db, "--json")[1])
    code, out, err = invoke(
        "runs", "reject", "support_app.py", "p2", other["run_id"], "--reason", "fraud"
    )
    assert code == 0 and "fraud" in out.splitlines()[-1], err
    with Sessions(db) as sessions:
        assert sessions.state("p2").state == {}
