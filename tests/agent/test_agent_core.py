"""Agent runs: sessions, default state, merge/overwrite, tools, errors, streaming, history."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from statewise import Agent, RunContext, StateChanged, ToolCallCompleted, ToolCallStarted
from statewise.db import InMemoryDb, SqliteDb
from statewise.exceptions import (
    CorruptRecordError,
    DatabaseUnavailableError,
    InvalidIdError,
    RunError,
    StateSerializationError,
    TempScopeError,
)
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo, TestModel, ToolCall
from tests._env import subprocess_env


def scripted(*responses: ModelResponse | str) -> FunctionModel:
    """A model that gives these responses in order, then repeats the last."""
    queue = list(responses)

    def fn(messages: list[Message], info: RequestInfo) -> ModelResponse | str:
        return queue.pop(0) if len(queue) > 1 else queue[0]

    return FunctionModel(fn)


def tool_then_answer(name: str, answer: str = "done", **arguments: Any) -> FunctionModel:
    """Each run: call `name` once, then answer."""

    def fn(messages: list[Message], info: RequestInfo) -> ModelResponse:
        if messages[-1].role == "tool":
            return ModelResponse(content=answer)
        return call(name, **arguments)

    return FunctionModel(fn)


def call(name: str, **arguments: Any) -> ModelResponse:
    return ModelResponse(tool_calls=[ToolCall(name, arguments, f"id_{name}")])


def append_item(session_state: dict[str, Any], item: str) -> str:
    session_state.setdefault("items", []).append(item)
    return "ok"


def test_run_output_and_generated_session_reused() -> None:
    agent = Agent(model=tool_then_answer("append_item", item="a"), tools=[append_item])
    first = agent.run("go")
    assert first.content == "done"
    assert first.status == "completed"
    assert first.session_state == {"items": ["a"]}
    assert first.metrics.model_requests == 2 and first.metrics.tool_calls == 1
    assert [m.role for m in first.messages] == ["user", "assistant", "tool", "assistant"]
    second = agent.run("again")
    assert second.session_id == first.session_id
    assert second.session_state == {"items": ["a", "a"]}
    assert first.run_id != second.run_id
    assert first.session_state == {"items": ["a"]}, "an output keeps the state of its own run"


def test_default_state_is_a_template_for_new_sessions_only() -> None:
    db = InMemoryDb()
    agent = Agent(model=scripted("hi"), db=db, session_state={"count": 0, "tags": ["x"]})
    agent.run("a", session_id="s1")
    agent.update_session_state({"count": 5}, session_id="s1")
    agent.run("b", session_id="s1")
    assert agent.get_session_state("s1") == {"count": 5, "tags": ["x"]}
    agent.run("c", session_id="s2")
    assert agent.get_session_state("s2") == {"count": 0, "tags": ["x"]}
    assert agent.session_state == {"count": 0, "tags": ["x"]}, "the agent object is not modified"


def test_run_session_state_deep_merges_and_overwrite_replaces() -> None:
    db = InMemoryDb()
    agent = Agent(model=scripted("ok"), db=db, session_state={"prefs": {"a": 1, "b": 2}})
    agent.run("x", session_id="s", session_state={"prefs": {"b": 3}, "new": True})
    assert agent.get_session_state("s") == {"prefs": {"a": 1, "b": 3}, "new": True}
    overwriting = Agent(model=scripted("ok"), db=db, overwrite_db_session_state=True)
    overwriting.run("y", session_id="s", session_state={"only": 1})
    assert overwriting.get_session_state("s") == {"only": 1}


def test_a_tool_that_raises_has_its_writes_discarded_and_the_run_goes_on() -> None:
    def half_then_fail(session_state: dict[str, Any]) -> str:
        session_state["items"].append("half")
        session_state["flag"] = True
        raise RuntimeError("disk on fire")

    seen: list[str] = []

    def fn(messages: list[Message], info: RequestInfo) -> ModelResponse:
        if messages[-1].role == "tool":
            seen.append(messages[-1].content or "")
            return ModelResponse(content="recovered")
        return ModelResponse(
            tool_calls=[
                ToolCall("append_item", {"item": "kept"}, "1"),
                ToolCall("half_then_fail", {}, "2"),
            ]
        )

    agent = Agent(
        model=FunctionModel(fn), tools=[append_item, half_then_fail], session_state={"items": []}
    )
    out = agent.run("go")
    assert out.content == "recovered"
    assert out.session_state == {"items": ["kept"]}
    assert seen == ["Error: RuntimeError: disk on fire"]


@pytest.mark.parametrize(
    ("tool_call", "expected"),
    [
        (ToolCall("nope", {}, "1"), "Error: unknown tool 'nope'. Available tools: append_item."),
        (ToolCall("append_item", {}, "1"), "Invalid arguments for tool 'append_item': item"),
        (
            ToolCall("append_item", {}, "1", arguments_error="Expecting value: line 1"),
            "are not valid JSON (Expecting value: line 1)",
        ),
    ],
)
def test_bad_tool_calls_go_back_to_the_model(tool_call: ToolCall, expected: str) -> None:
    results: list[str] = []

    def fn(messages: list[Message], info: RequestInfo) -> ModelResponse:
        if messages[-1].role == "tool":
            results.append(messages[-1].content or "")
            return ModelResponse(content="fine")
        return ModelResponse(tool_calls=[tool_call])

    agent = Agent(model=FunctionModel(fn), tools=[append_item])
    assert agent.run("go").content == "fine"
    assert expected in results[0]
    assert agent.get_session_state() == {}


def test_a_non_json_write_fails_the_tool_call_and_persists_nothing() -> None:
    def store_object(session_state: dict[str, Any]) -> str:
        session_state["ok"] = 1
        session_state["bad"] = {"when": object()}
        return "stored"

    results: list[str] = []

    def fn(messages: list[Message], info: RequestInfo) -> ModelResponse:
        if messages[-1].role == "tool":
            results.append(messages[-1].content or "")
            return ModelResponse(content="done")
        return ModelResponse(tool_calls=[ToolCall("store_object", {}, "1")])

    agent = Agent(model=FunctionModel(fn), tools=[store_object])
    agent.run("go")
    assert "StateSerializationError" in results[0] and "state['bad']['when']" in results[0]
    assert agent.get_session_state() == {}
    with pytest.raises(StateSerializationError, match=r"state\['cb'\]"):
        agent.state.set("cb", lambda: None)
    assert agent.get_session_state() == {}


@pytest.mark.parametrize("bad", ["", "   ", "x" * 300, "a\nb", 42])
def test_invalid_session_ids_are_refused(bad: Any) -> None:
    agent = Agent(model=scripted("ok"))
    with pytest.raises(InvalidIdError):
        agent.run("hi", session_id=bad)


def test_unusable_db_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "dir.db").mkdir()
    with pytest.raises(DatabaseUnavailableError, match="is a directory"):
        SqliteDb(db_file=tmp_path / "dir.db")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(DatabaseUnavailableError, match="cannot create the directory"):
        SqliteDb(db_file=blocker / "sub" / "x.db")


def test_corrupt_state_row_names_the_session_and_others_still_load(tmp_path: Path) -> None:
    db_file = tmp_path / "a.db"
    agent = Agent(model=scripted("ok"), db=SqliteDb(db_file=db_file), session_state={"n": 1})
    agent.run("x", session_id="good")
    agent.run("x", session_id="broken")
    with sqlite3.connect(db_file) as conn:
        conn.execute("UPDATE statewise_deltas SET segments = '{not json' WHERE scope_id = 'broken'")
    fresh = Agent(model=scripted("ok"), db=SqliteDb(db_file=db_file))
    with pytest.raises(CorruptRecordError, match="session 'broken'"):
        fresh.get_session_state("broken")
    assert fresh.get_session_state("good") == {"n": 1}


def test_agent_without_model_reads_and_writes_state_but_cannot_run() -> None:
    agent = Agent(session_state={"a": 1})
    agent.state.set("b", 2)
    assert agent.get_session_state() == {"a": 1, "b": 2}
    with pytest.raises(RunError, match="has no model"):
        agent.run("hi")
    assert agent.get_session_state() == {"a": 1, "b": 2}


def test_streaming_yields_typed_events_in_order() -> None:
    agent = Agent(model=scripted(call("append_item", item="z"), "all done"), tools=[append_item])
    events = list(agent.run("go", stream=True))
    kinds = [e.event for e in events]
    assert kinds[0] == "run_started" and kinds[-1] == "run_completed"
    assert kinds.index("tool_call_started") < kinds.index("tool_call_completed")
    started = next(e for e in events if isinstance(e, ToolCallStarted))
    assert started.tool_name == "append_item" and started.arguments == {"item": "z"}
    completed = next(e for e in events if isinstance(e, ToolCallCompleted))
    assert completed.result == "ok" and not completed.is_error
    changes = [e for e in events if isinstance(e, StateChanged)]
    assert any(op["op"] == "append" and op["value"] == "z" for e in changes for op in e.ops)
    text = "".join(e.content for e in events if e.event == "content_delta")
    assert text == "all done"


def test_sync_run_works_inside_a_running_event_loop() -> None:
    agent = Agent(model=scripted(call("append_item", item="q"), "ok"), tools=[append_item])

    async def inside() -> Any:
        return agent.run("go")

    assert asyncio.run(inside()).session_state == {"items": ["q"]}


def test_arun_is_the_async_twin() -> None:
    asyncio.run(_arun_twin())


async def _arun_twin() -> None:
    async def add(session_state: dict[str, Any], item: str) -> str:
        await asyncio.sleep(0)
        session_state.setdefault("items", []).append(item)
        return "ok"

    agent = Agent(model=scripted(call("add", item="w"), "ok"), tools=[add])
    out = await agent.arun("go")
    assert out.session_state == {"items": ["w"]}
    events = [e async for e in await agent.arun("again", stream=True)]
    assert events[-1].event == "run_completed"


def test_history_of_previous_runs_is_sent_when_asked() -> None:
    seen: list[list[str]] = []

    def fn(messages: list[Message], info: RequestInfo) -> str:
        seen.append([f"{m.role}:{m.content}" for m in messages])
        return f"answer {len(seen)}"

    agent = Agent(model=FunctionModel(fn), add_history_to_context=True, num_history_runs=2)
    for i in range(3):
        agent.run(f"q{i}")
    assert seen[2] == ["user:q0", "assistant:answer 1", "user:q1", "assistant:answer 2", "user:q2"]
    no_history = Agent(model=FunctionModel(fn))
    no_history.run("alone")
    assert seen[-1] == ["user:alone"]


def test_instructions_templating_list_and_callable() -> None:
    prompts: list[str] = []

    def fn(messages: list[Message], info: RequestInfo) -> str:
        prompts.append(messages[0].content or "")
        return "ok"

    agent = Agent(
        model=FunctionModel(fn),
        session_state={"name": "Ann", "prefs": {"lang": "en"}},
        instructions=["Hi {name}", "lang {prefs.lang}", "{missing} {opt?}| {{literal}}"],
    )
    agent.run("x")
    assert prompts[-1] == "- Hi Ann\n- lang en\n- {missing} | {literal}"
    dynamic = Agent(
        model=FunctionModel(fn),
        session_state={"n": 2},
        instructions=lambda run_context: f"n is {run_context.session_state['n']}",
    )
    dynamic.run("x")
    assert prompts[-1] == "n is 2"
    raw = Agent(
        model=FunctionModel(fn),
        session_state={"name": "Ann"},
        instructions="{name}",
        resolve_in_context=False,
    )
    raw.run("x")
    assert prompts[-1] == "{name}"


def test_scopes_user_keys_are_shared_and_temp_keys_never_persist() -> None:
    def remember(run_context: RunContext, value: str) -> str:
        run_context.session_state["user:name"] = value
        run_context.session_state["temp:scratch"] = "x"
        run_context.session_state["own"] = value
        return "ok"

    db = InMemoryDb()
    agent = Agent(
        model=scripted(call("remember", value="Ann"), "ok"),
        tools=[remember],
        db=db,
        instructions="{user:name}",
    )
    agent.run("x", session_id="s1", user_id="u1")
    other = Agent(model=scripted("ok"), db=db)
    assert other.get_session_state("s1") == {"user:name": "Ann", "own": "Ann"}
    other.run("y", session_id="s2", user_id="u1")
    assert other.get_session_state("s2") == {"user:name": "Ann"}
    with pytest.raises(TempScopeError):
        agent.state.set("temp:x", 1)


def test_each_step_is_committed_before_the_next_model_call(tmp_path: Path) -> None:
    db_file = tmp_path / "steps.db"
    observed: list[list[str]] = []

    def fn(messages: list[Message], info: RequestInfo) -> ModelResponse:
        # A second, independent connection sees what was committed so far.
        independent = Agent(db=SqliteDb(db_file=db_file))
        observed.append(independent.get_session_state("s").get("items", []))
        steps = sum(1 for m in messages if m.role == "assistant")
        if steps < 2:
            return call("append_item", item=f"i{steps}")
        return ModelResponse(content="done")

    agent = Agent(model=FunctionModel(fn), tools=[append_item], db=SqliteDb(db_file=db_file))
    agent.run("go", session_id="s")
    assert observed == [[], ["i0"], ["i0", "i1"]]


def test_state_persists_across_processes(tmp_path: Path) -> None:
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from statewise import Agent\n"
        "from statewise.db import SqliteDb\n"
        "from statewise.models import FunctionModel, ModelResponse, ToolCall\n"
        "def add(session_state, item: str) -> str:\n"
        "    session_state['items'].append(item); return 'ok'\n"
        "def fn(messages, info):\n"
        "    if messages[-1].role == 'tool': return 'done'\n"
        "    return ModelResponse(tool_calls=[ToolCall('add', {'item': sys.argv[2]}, 'c')])\n"
        "agent = Agent(model=FunctionModel(fn), db=SqliteDb(db_file=sys.argv[1]), tools=[add],\n"
        "              session_state={'items': []}, session_id='shared')\n"
        "print(agent.run('go').session_state['items'])\n"
    )
    db_file = str(tmp_path / "procs.db")
    outputs = [
        subprocess.run(
            [sys.executable, "-c", script, db_file, item],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
            env=subprocess_env(),
        ).stdout.strip()
        for item in ("first", "second")
    ]
    assert outputs == ["['first']", "['first', 'second']"]


def test_test_model_calls_every_tool_once() -> None:
    agent = Agent(model=TestModel(), tools=[append_item])
    out = agent.run("go")
    assert len(out.session_state["items"]) == 1
