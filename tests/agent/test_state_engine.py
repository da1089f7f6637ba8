"""History and time travel, schemas, secrets, TTL, export/import, rules and conflicts."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Annotated, Any, cast

import pytest
from pydantic import BaseModel

from statewise import Agent, Reducer, RunContext
from statewise.db import InMemoryDb, SqliteDb
from statewise.exceptions import (
    ConfigurationError,
    SecretsError,
    SessionNotFoundError,
    StateConflictError,
    StateValidationError,
)
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo, ToolCall
from statewise.state.reducers import Rule, rule_name


def adder_model(messages: list[Message], info: RequestInfo) -> ModelResponse:
    if messages[-1].role == "tool":
        return ModelResponse(content="ok")
    return ModelResponse(tool_calls=[ToolCall("add", {"item": messages[-1].content}, "c")])


def add(session_state: dict[str, Any], item: str) -> str:
    session_state.setdefault("items", []).append(item)
    return "ok"


def shopping(db: Any = None, **kwargs: Any) -> Agent:
    return Agent(model=FunctionModel(adder_model), tools=[add], db=db or InMemoryDb(), **kwargs)


def test_history_lists_every_commit_with_its_run_step_and_source() -> None:
    agent = shopping(session_state={"items": []})
    first = agent.run("a", session_id="s")
    agent.state.for_session("s").set("note", "hi")  # (a run leaves the agent's own session)
    history = agent.get_state_history("s")
    assert [h["version"] for h in history] == [1, 2, 3]
    assert history[0]["sources"] == ["default_state"] and history[0]["run_id"] == first.run_id
    assert history[1]["sources"] == ["tool:add#c"] and history[1]["step"] == 1
    assert history[1]["ops"] == [{"op": "append", "path": ["items"], "value": "a"}]
    assert history[2]["sources"] == ["api:state.set:note"] and history[2]["run_id"] is None


def test_state_at_diff_rollback_and_fork() -> None:
    agent = shopping(session_state={"items": []})
    r1 = agent.run("a", session_id="s")
    agent.run("b", session_id="s")
    assert agent.get_state_at("s", 2) == {"items": ["a"]}
    assert agent.get_state_at("s", r1.run_id) == {"items": ["a"]}
    assert agent.diff_state("s", 2, 3) == [
        {"path": ["items"], "kind": "changed", "before": ["a"], "after": ["a", "b"]}
    ]
    assert agent.rollback_state("s", to=r1.run_id) == {"items": ["a"]}
    assert agent.get_session_state("s") == {"items": ["a"]}
    history = agent.get_state_history("s")
    assert len(history) == 4 and history[-1]["sources"] == ["rollback:to=2"], "never rewritten"
    assert "rollback" in [e.type for e in agent.db.read_events("s")]
    forked = agent.fork_session("s", at=3, new_session_id="s-fork")
    assert forked == "s-fork"
    assert agent.get_session_state("s-fork") == {"items": ["a", "b"]}
    agent.run("c", session_id="s-fork")
    assert agent.get_session_state("s") == {"items": ["a"]}, "the fork is independent"
    with pytest.raises(SessionNotFoundError):
        agent.get_state_history("missing")


class Profile(BaseModel):
    name: str = "anon"
    age: int = 0
    visits: Annotated[int, Reducer("sum")] = 0


def test_schema_defaults_validation_and_rules() -> None:
    def set_age(run_context: RunContext, age: str) -> str:
        run_context.session_state["age"] = age
        return "set"

    results: list[str] = []

    def model(messages: list[Message], info: RequestInfo) -> ModelResponse:
        if messages[-1].role == "tool":
            results.append(messages[-1].content or "")
            return ModelResponse(content="ok")
        return ModelResponse(tool_calls=[ToolCall("set_age", {"age": messages[-1].content}, "c")])

    agent = Agent(model=FunctionModel(model), tools=[set_age], state_schema=Profile)
    agent.run("not a number", session_id="p")
    assert "StateValidationError" in results[0] and "'age'" in results[0]
    assert agent.get_session_state("p") == {"name": "anon", "age": 0, "visits": 0}
    agent.run("41", session_id="p")
    assert agent.get_session_state("p")["age"] in (41, "41")
    with pytest.raises(StateValidationError, match="age"):
        agent.state.for_session("p").set("age", "old")
    assert rule_name(agent._store.rules.rule_for(("visits",))) == "sum"


def test_schema_change_on_load_names_the_session_and_how_to_migrate(tmp_path: Path) -> None:
    db_file = tmp_path / "schema.db"
    Agent(db=SqliteDb(db_file=db_file), session_state={"age": "forty"}).state.for_session(
        "old"
    ).set("x", 1)
    strict = Agent(db=SqliteDb(db_file=db_file), state_schema=Profile)
    with pytest.raises(StateValidationError, match=r"session 'old'.*migrate"):
        strict.get_session_state("old")


def test_secret_keys_are_encrypted_at_rest_and_kept_out_of_prompts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cryptography.fernet import Fernet

    monkeypatch.setenv("STATEWISE_ENCRYPTION_KEY", Fernet.generate_key().decode())
    prompts: list[str] = []

    def model(messages: list[Message], info: RequestInfo) -> str:
        prompts.append(messages[0].content or "")
        return "ok"

    db_file = tmp_path / "secret.db"
    agent = Agent(
        model=FunctionModel(model),
        db=SqliteDb(db_file=db_file),
        secret_keys=["api_token"],
        instructions="token={api_token} user={user}",
        add_session_state_to_context=True,
    )
    agent.state.for_session("s").set("api_token", "sk-very-secret")
    agent.state.for_session("s").set("user", "ann")
    agent.run("hi", session_id="s")
    assert "sk-very-secret" not in prompts[0] and "token=***" in prompts[0]
    raw = db_file.read_bytes() + (tmp_path / "secret.db-wal").read_bytes()
    assert b"sk-very-secret" not in raw
    assert agent.get_session_state("s")["api_token"] == "sk-very-secret"
    exposed = Agent(
        model=FunctionModel(model),
        db=SqliteDb(db_file=db_file),
        secret_keys=["api_token"],
        instructions="token={api_token}",
        expose_secrets_to_model=True,
    )
    exposed.run("hi", session_id="s")
    assert prompts[-1] == "token=sk-very-secret"
    monkeypatch.setenv("STATEWISE_ENCRYPTION_KEY", Fernet.generate_key().decode())
    wrong_key = Agent(db=SqliteDb(db_file=db_file), secret_keys=["api_token"])
    with pytest.raises(SecretsError):
        wrong_key.get_session_state("s")
    monkeypatch.delenv("STATEWISE_ENCRYPTION_KEY")
    # declared secrets without a key fail when the agent is built, not at its first commit
    with pytest.raises(SecretsError, match="STATEWISE_ENCRYPTION_KEY"):
        Agent(db=SqliteDb(db_file=db_file), secret_keys=["api_token"])


def test_ttl_keys_vanish_from_reads_and_templates() -> None:
    prompts: list[str] = []

    def model(messages: list[Message], info: RequestInfo) -> str:
        prompts.append(messages[0].content or "")
        return "ok"

    agent = Agent(model=FunctionModel(model), instructions="otp={otp?} keep={keep}")
    agent.state.set("otp", "123456", ttl=0.2)
    agent.state.set("keep", "yes")
    agent.run("x")
    assert prompts[-1] == "otp=123456 keep=yes"
    time.sleep(0.25)
    assert agent.get_session_state() == {"keep": "yes"}
    assert not agent.state.has("otp")
    agent.run("y")
    assert prompts[-1] == "otp= keep=yes"


def test_export_import_roundtrip_and_prune(tmp_path: Path) -> None:
    agent = shopping(db=SqliteDb(db_file=tmp_path / "a.db"), session_state={"items": []})
    agent.run("a", session_id="s")
    agent.run("b", session_id="s")
    path = tmp_path / "s.jsonl"
    records = agent.export_session("s", path)
    assert records[0]["type"] == "session" and path.read_text().count("\n") == len(records)
    other = shopping(db=SqliteDb(db_file=tmp_path / "b.db"))
    assert other.import_sessions(path) == ["s"]
    assert other.get_session_state("s") == {"items": ["a", "b"]}
    assert [r.input for r in other.db.read_runs("s")] == ["a", "b"]
    other.run("c", session_id="s")
    assert other.get_session_state("s") == {"items": ["a", "b", "c"]}
    with pytest.raises(Exception, match="already exists"):
        other.import_sessions(path)
    assert agent.prune_sessions(older_than=3600) == 0
    assert agent.prune_sessions(older_than=-1) == 1
    assert agent.db.list_sessions() == []


def test_last_write_wins_conflicts_are_recorded_and_strict_raises(tmp_path: Path) -> None:
    started, proceed = threading.Event(), threading.Event()

    def slow_set(run_context: RunContext, value: str) -> str:
        run_context.session_state["color"] = value
        if value == "red":
            started.set()
            proceed.wait(10)
        return "set"

    def model(messages: list[Message], info: RequestInfo) -> ModelResponse:
        if messages[-1].role == "tool":
            return ModelResponse(content="ok")
        return ModelResponse(
            tool_calls=[ToolCall("slow_set", {"value": messages[-1].content}, "c")]
        )

    for rule, expect_error in (("last_write_wins", False), ("strict", True)):
        db = SqliteDb(db_file=tmp_path / f"{rule}.db")
        agent = Agent(
            model=FunctionModel(model),
            tools=[slow_set],
            db=db,
            session_state={"color": "none"},
            state_rules={"color": cast(Rule, rule)},
        )
        agent.run("init", session_id="c")
        started.clear()
        proceed.clear()
        errors: list[BaseException] = []

        def slow_writer(agent: Agent = agent, errors: list[BaseException] = errors) -> None:
            try:
                agent.run("red", session_id="c")
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=slow_writer)
        thread.start()
        assert started.wait(10)
        agent.run("blue", session_id="c")
        proceed.set()
        thread.join()
        if expect_error:
            assert len(errors) == 1 and isinstance(errors[0], StateConflictError)
            assert agent.get_session_state("c")["color"] == "blue"
        else:
            assert not errors
            assert agent.get_session_state("c")["color"] == "red"
            conflicts = [e.data for e in db.read_events("c") if e.type == "conflict_resolved"]
            assert conflicts and conflicts[0]["theirs"] == "blue" and conflicts[0]["ours"] == "red"


def test_unknown_reducer_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="sum"):
        Agent(state_rules={"n": "average"})  # type: ignore[dict-item]


def test_app_scope_is_shared_by_sessions_of_the_same_app() -> None:
    db = InMemoryDb()
    a = Agent(name="bot", db=db, session_state={"app:greeting": "hello"})
    a.state.for_session("s1").set("app:motd", "be kind")
    b = Agent(name="bot", db=db)
    # a's app: default filled the shared scope on its first write; b sees both keys.
    assert b.get_session_state("s2") == {"app:greeting": "hello", "app:motd": "be kind"}
    other_app = Agent(name="other", db=db)
    assert other_app.get_session_state("s3") == {}
    assert a.get_session_state("s4") == {"app:greeting": "hello", "app:motd": "be kind"}


def test_agent_state_writes_go_to_sqlite_immediately(tmp_path: Path) -> None:
    db_file = tmp_path / "now.db"
    agent = Agent(db=SqliteDb(db_file=db_file), session_id="x")
    agent.state.set("k", 1)
    with sqlite3.connect(db_file) as conn:
        (count,) = conn.execute("SELECT count(*) FROM statewise_deltas").fetchone()
    assert count == 1


def test_rollback_can_include_the_shared_user_scope() -> None:
    db = InMemoryDb()
    agent = Agent(db=db, user_id="u")
    agent.state.for_session("s").set("user:tier", "free")
    agent.state.for_session("s").set("own", 1)
    time.sleep(0.01)
    agent.state.for_session("s").set("user:tier", "pro")
    agent.state.for_session("s").set("own", 2)
    # user: writes do not move the session's own version: own=1 is version 1.
    agent.rollback_state("s", to=1)
    assert agent.get_session_state("s") == {"user:tier": "pro", "own": 1}
    agent.rollback_state("s", to=1, include_shared=True)
    assert agent.get_session_state("s") == {"user:tier": "free", "own": 1}


def test_append_to_a_dict_is_a_clear_tool_error() -> None:
    results: list[str] = []

    def model(messages: list[Message], info: RequestInfo) -> ModelResponse:
        if messages[-1].role == "tool":
            results.append(messages[-1].content or "")
            return ModelResponse(content="ok")
        return ModelResponse(
            tool_calls=[ToolCall("update_session_state", {"append": {"prefs": ["x"]}}, "c")]
        )

    agent = Agent(
        model=FunctionModel(model),
        enable_agentic_state=True,
        session_state={"prefs": {"theme": "dark"}},
    )
    agent.run("go")
    assert "cannot append to 'prefs'" in results[0]
    assert agent.get_session_state() == {"prefs": {"theme": "dark"}}


def test_a_run_outputs_state_is_at_hand_without_a_read_only_while_it_is_current(
    tmp_path: Path,
) -> None:
    agent = shopping(SqliteDb(db_file=tmp_path / "s.db"))
    first = agent.run("a", session_id="s")
    assert first.session_state_if_loaded() == {"items": ["a"]}  # the cached tree
    earlier = agent.run("b", session_id="s")
    agent.run("c", session_id="s")
    # Its state is no longer the cached tree: getting it means a read, so not here...
    assert earlier.session_state_if_loaded() is None
    # ...and the read gives the state as that run left it.
    assert earlier.session_state == {"items": ["a", "b"]}
    assert earlier.session_state_if_loaded() == {"items": ["a", "b"]}
    assert first.session_state == {"items": ["a"]}
