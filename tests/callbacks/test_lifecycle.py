"""When callback, tool and output writes become visible and when they are persisted.

The commit points are DESIGN §3's; docs/callbacks.md states them in a table, and the first
test below checks that the table says exactly what `COMMIT_POINT` says. The other tests
observe the database through a second, independent connection while the run goes on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statewise import Agent, RunContext
from statewise.db import SqliteDb
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo, ToolCall

DOCS = Path(__file__).resolve().parents[2] / "docs" / "callbacks.md"

# Where each writer's state changes are persisted: "run start", "end of step", "run end".
COMMIT_POINT = {
    "run input (session_state=...)": "run start",
    "before_agent_callback": "run start",
    "before_model_callback": "end of step",
    "after_model_callback": "end of step",
    "before_tool_callback": "end of step",
    "tool": "end of step",
    "after_tool_callback": "end of step",
    "output_key": "run end",
    "after_agent_callback": "run end",
}


@pytest.mark.parametrize("doc", [DOCS, DOCS.with_name("state-contract.md")], ids=lambda p: p.name)
def test_the_docs_table_states_the_commit_points_the_tests_pin(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    table = text.split("<!-- lifecycle-table -->")[1].split("<!-- /lifecycle-table -->")[0]
    rows = {}
    for line in table.strip().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or set(cells[0]) <= {"-", " "} or cells[0] == "Written in":
            continue
        rows[cells[0].strip("`")] = cells[2].lower()
    assert {k: v.split(" (")[0] for k, v in rows.items()} == COMMIT_POINT


def stored(db_file: Path, session_id: str) -> dict[str, Any]:
    """The session's state as committed, through a second, independent connection."""
    with SqliteDb(db_file=db_file) as independent:
        return Agent(db=independent).get_session_state(session_id)


# ---- seed 004, exactly -----------------------------------------------------------------------

A, BM, AM, AA = (
    "before_agent_callback_state_key",
    "before_model_callback_state_key",
    "after_model_callback_state_key",
    "after_agent_callback_state_key",
)
SEED_004 = {
    # callback: (cached in context, already persisted, not persisted yet)
    "before_agent": ([A], [], [A]),
    "before_model": ([A, BM], [A], [BM]),
    "after_model": ([A, BM, AM], [A], [BM, AM]),
    "after_agent": ([A, BM, AM, AA], [A, BM, AM], [AA]),
}


@pytest.mark.parametrize("asynchronous", [False, True])
def test_seed_004_lifecycle(tmp_path: Path, asynchronous: bool) -> None:
    db_file = tmp_path / "lifecycle.db"
    seen: dict[str, tuple[list[str], list[str], list[str]]] = {}
    keys = [A, BM, AM, AA]

    def make(name: str, key: str) -> Any:
        def observe(callback_context: RunContext) -> None:
            callback_context.state[key] = True
            db = stored(db_file, callback_context.session_id)
            seen[name] = (
                [k for k in keys if k in callback_context.state],
                [k for k in keys if k in db],
                [k for k in keys if k in callback_context.state and k not in db],
            )

        async def aobserve(callback_context: RunContext) -> None:
            observe(callback_context)

        return aobserve if asynchronous else observe

    agent = Agent(
        model=FunctionModel(lambda m, i: "Hello! How can I help you verify something today?"),
        name="root_agent",
        db=SqliteDb(db_file=db_file),
        before_agent_callback=make("before_agent", A),
        before_model_callback=make("before_model", BM),
        after_model_callback=make("after_model", AM),
        after_agent_callback=[make("after_agent", AA)],
    )
    out = agent.run("hello world!", session_id="s004")
    assert out.content == "Hello! How can I help you verify something today?"
    assert seen == SEED_004
    assert stored(db_file, "s004") == dict.fromkeys(keys, True)


# ---- every writer, with a tool step --------------------------------------------------------


def test_every_writer_is_persisted_at_its_commit_point(tmp_path: Path) -> None:
    db_file = tmp_path / "writers.db"
    observations: list[tuple[str, set[str]]] = []
    ours = set(COMMIT_POINT) | {"temp:scratch"}

    def observe(where: str, ctx: RunContext) -> None:
        persisted = {k for k in stored(db_file, ctx.session_id) if k.split("#")[0] in ours}
        observations.append((where, persisted))

    def writer(name: str) -> Any:
        def callback(callback_context: RunContext) -> None:
            step = callback_context.step
            key = name if name.endswith("agent_callback") else f"{name}#{step}"
            callback_context.state[key] = True
            observe(key, callback_context)

        return callback

    def note(tool_context: RunContext) -> str:
        """Write a note."""
        tool_context.state[f"tool#{tool_context.step}"] = True
        tool_context.state["temp:scratch"] = "only for this run"
        observe("tool", tool_context)
        return "noted"

    def model(messages: list[Message], info: RequestInfo) -> ModelResponse:
        if info.step == 1:
            return ModelResponse(tool_calls=[ToolCall("note", {}, "c1")])
        return ModelResponse(content="done")

    def sees_temp(callback_context: RunContext) -> None:
        assert callback_context.state["temp:scratch"] == "only for this run"

    agent = Agent(
        model=FunctionModel(model),
        tools=[note],
        db=SqliteDb(db_file=db_file),
        output_key="output_key",
        before_agent_callback=writer("before_agent_callback"),
        before_model_callback=writer("before_model_callback"),
        after_model_callback=writer("after_model_callback"),
        before_tool_callback=writer("before_tool_callback"),
        after_tool_callback=writer("after_tool_callback"),
        after_agent_callback=[sees_temp, writer("after_agent_callback")],
    )
    agent.run("go", session_id="w", session_state={"run input (session_state=...)": True})

    run_start = {"run input (session_state=...)", "before_agent_callback"}
    step1 = {"before_model_callback#1", "after_model_callback#1"} | {
        "before_tool_callback#1",
        "tool#1",
        "after_tool_callback#1",
    }
    step2 = {"before_model_callback#2", "after_model_callback#2"}
    assert observations == [
        ("before_agent_callback", set()),
        ("before_model_callback#1", run_start),
        ("after_model_callback#1", run_start),
        ("before_tool_callback#1", run_start),
        ("tool", run_start),
        ("after_tool_callback#1", run_start),
        ("before_model_callback#2", run_start | step1),
        ("after_model_callback#2", run_start | step1),
        ("after_agent_callback", run_start | step1 | step2),
    ]
    final = stored(db_file, "w")
    assert set(final) == run_start | step1 | step2 | {"output_key", "after_agent_callback"}
    assert final["output_key"] == "done"
    # The table: each writer's key first shows up after the commit point the docs name.
    first_seen: dict[str, str] = {}
    for where, persisted in observations:
        for key in persisted:
            first_seen.setdefault(key.split("#")[0], where)
    point = {
        "before_model_callback#1": "run start",
        "before_model_callback#2": "end of step",
        "after_agent_callback": "end of step",
    }
    for writer_name, where in first_seen.items():
        assert COMMIT_POINT[writer_name] == point[where], writer_name
    final_writers = {key.split("#")[0] for key in final}
    for key in final_writers - first_seen.keys():
        assert COMMIT_POINT[key] == "run end", key
    assert final_writers == set(COMMIT_POINT)


def test_temp_keys_from_callbacks_are_visible_for_the_run_and_never_persisted(
    tmp_path: Path,
) -> None:
    db_file = tmp_path / "temp.db"
    seen: list[Any] = []

    def before_agent(callback_context: RunContext) -> None:
        callback_context.state["temp:request_id"] = "r-1"
        callback_context.state["kept"] = 1

    def before_model(callback_context: RunContext) -> None:
        seen.append(callback_context.state.get("temp:request_id"))
        assert "temp:request_id" not in stored(db_file, callback_context.session_id)

    def tool_reads(tool_context: RunContext) -> str:
        """Read the temp key."""
        return str(tool_context.state["temp:request_id"])

    def after_agent(callback_context: RunContext) -> None:
        seen.append(callback_context.state.get("temp:request_id"))

    def model(messages: list[Message], info: RequestInfo) -> ModelResponse:
        if info.step == 1:
            return ModelResponse(tool_calls=[ToolCall("tool_reads", {}, "c1")])
        return ModelResponse(content=f"tool said {messages[-1].content}")

    agent = Agent(
        model=FunctionModel(model),
        tools=[tool_reads],
        db=SqliteDb(db_file=db_file),
        before_agent_callback=before_agent,
        before_model_callback=before_model,
        after_agent_callback=after_agent,
    )
    out = agent.run("go", session_id="t")
    assert out.content == "tool said r-1"
    assert seen == ["r-1", "r-1", "r-1"]
    assert stored(db_file, "t") == {"kept": 1}
    assert "temp:request_id" not in out.session_state
    # The next run starts without it.
    agent2 = Agent(
        model=FunctionModel(lambda m, i: "x"),
        db=SqliteDb(db_file=db_file),
        before_agent_callback=lambda callback_context: seen.append(
            callback_context.state.get("temp:request_id", "gone")
        ),
    )
    agent2.run("again", session_id="t")
    assert seen[-1] == "gone"
