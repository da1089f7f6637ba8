"""Workflows: steps sharing one session state, blocks, commits per step, failures, resume."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from statewise import (
    Agent,
    Condition,
    Loop,
    Parallel,
    Router,
    RunContext,
    Step,
    StepInput,
    StepOutput,
    ToolCallStarted,
    Workflow,
)
from statewise.db import InMemoryDb, SqliteDb
from statewise.exceptions import ConfigurationError, RunError
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo, ToolCall
from statewise.run.events import StepCompleted, StepStarted
from statewise.state.tracked import TrackedDict


def note(name: str) -> Any:
    """A function step appending its name to state['trail'] and returning it."""

    def step(step_input: StepInput, run_context: RunContext) -> str:
        run_context.session_state.setdefault("trail", []).append(name)
        return name

    step.__name__ = name
    return step


def tool_agent(name: str, tool_name: str, tools: list[Any], **kwargs: Any) -> Agent:
    """An agent that calls `tool_name` with {"item": <user message>} once, then answers
    with the first line of its system prompt (rendered from state)."""

    def fn(messages: list[Message], info: RequestInfo) -> ModelResponse:
        if messages[-1].role == "tool":
            system = messages[0].content if messages[0].role == "system" else ""
            return ModelResponse(content=f"{name} done; {system}")
        return ModelResponse(tool_calls=[ToolCall(tool_name, {"item": messages[-1].content})])

    return Agent(name=name, model=FunctionModel(fn), tools=tools, **kwargs)


def add(session_state: dict[str, Any], item: str) -> str:
    """Add an item.

    Args:
        item: the item
    """
    session_state["items"].append(item)
    return "added"


def events_of(db: Any, session_id: str, kind: str) -> list[dict[str, Any]]:
    return [e.data for e in db.read_events(session_id) if e.type == kind]


# ---- steps, inputs, session semantics ------------------------------------------------------


def test_function_steps_share_state_and_see_earlier_outputs() -> None:
    seen: dict[str, Any] = {}

    def first(step_input: StepInput, run_context: RunContext) -> str:
        run_context.session_state["count"] += 1
        return f"first saw {step_input.input}"

    def second(step_input: StepInput, session_state: dict[str, Any]) -> StepOutput:
        seen["previous"] = step_input.previous_step_content
        seen["by_name"] = step_input.get_step_content("first")
        session_state["count"] += 10
        return StepOutput(content={"total": session_state["count"]})

    wf = Workflow(
        name="w", steps=[first, Step(name="second", executor=second)], session_state={"count": 0}
    )
    out = wf.run("hello", session_id="s")
    assert seen == {"previous": "first saw hello", "by_name": "first saw hello"}
    assert out.content == {"total": 11}
    assert out.session_state == {"count": 11}
    assert out.get_step_content("first") == "first saw hello"
    assert [o.step_name for o in out.step_outputs] == ["first", "second"]
    assert wf.get_session_state("s") == {"count": 11}
    wf.run("again", session_id="s")
    assert wf.get_session_state("s") == {"count": 22}, (
        "default state is a template for new sessions"
    )


def test_session_state_argument_merges_and_user_scope(tmp_path: Path) -> None:
    db = SqliteDb(db_file=str(tmp_path / "w.db"))
    wf = Workflow(name="w", db=db, steps=[note("a")], session_state={"prefs": {"x": 1}})
    wf.run("go", session_id="s1", user_id="u", session_state={"prefs": {"y": 2}, "user:seen": True})
    assert wf.get_session_state("s1") == {
        "prefs": {"x": 1, "y": 2},
        "trail": ["a"],
        "user:seen": True,
    }
    # Any agent on the same database reads the workflow's session by id.
    reader = Agent(db=SqliteDb(db_file=str(tmp_path / "w.db")))
    assert reader.get_session_state("s1")["trail"] == ["a"]
    assert db.get_session("s1").kind == "workflow"  # type: ignore[union-attr]


def test_agent_step_runs_on_workflow_state_with_instructions_and_output_key() -> None:
    agent = tool_agent(
        "adder",
        "add",
        [add],
        instructions="Items now: {items}",
        output_key="adder_answer",
    )
    wf = Workflow(
        name="w", steps=[Step(name="add", agent=agent), note("after")], session_state={"items": []}
    )
    out = wf.run("milk", session_id="s")
    # The tool wrote the workflow state and the instructions were rendered from it.
    assert out.step_outputs[0].content == 'adder done; Items now: ["milk"]'
    assert out.session_state["items"] == ["milk"]
    assert out.session_state["adder_answer"] == 'adder done; Items now: ["milk"]'
    # The agent object was passed directly too:
    wf2 = Workflow(name="w2", steps=[agent], session_state={"items": ["a"]})
    assert wf2.run("b").session_state["items"] == ["a", "b"]


def test_each_step_commits_with_a_step_completed_event() -> None:
    db = InMemoryDb()
    wf = Workflow(name="w", db=db, steps=[note("a"), note("b"), note("c")])
    out = wf.run("go", session_id="s")
    completed = events_of(db, "s", "step_completed")
    assert [(e["index"], e["name"], e["output"]["content"]) for e in completed] == [
        (0, "a", "a"),
        (1, "b", "b"),
        (2, "c", "c"),
    ]
    history = wf.get_state_history("s")
    step_commits = [h for h in history if h["run_id"] == out.run_id and h["step"]]
    assert [h["sources"] for h in step_commits] == [["step:a"], ["step:b"], ["step:c"]]
    run = db.get_run("s", out.run_id)
    assert run is not None and run.status == "completed" and run.content == "c"


def test_streaming_yields_step_events_and_nested_agent_events() -> None:
    agent = tool_agent("adder", "add", [add])
    wf = Workflow(name="w", steps=[note("a"), agent], session_state={"items": []})
    events = list(wf.run("milk", stream=True))
    kinds = [(type(e).__name__, getattr(e, "step_name", None)) for e in events]
    assert kinds[0] == ("RunStarted", None)
    assert ("StepStarted", "adder") in kinds and ("StepCompleted", "adder") in kinds
    started = kinds.index(("StepStarted", "adder"))
    tool = next(i for i, e in enumerate(events) if isinstance(e, ToolCallStarted))
    assert started < tool < kinds.index(("StepCompleted", "adder"))
    assert kinds[-1] == ("RunCompleted", None)


def test_arun_and_stream_async() -> None:
    wf = Workflow(name="w", steps=[note("a")])

    async def main() -> tuple[Any, list[Any]]:
        out = await wf.arun("x", session_id="s")
        stream = await wf.arun("y", session_id="s", stream=True)
        return out, [e async for e in stream]

    out, events = asyncio.run(main())
    assert out.session_state == {"trail": ["a"]}
    assert any(isinstance(e, StepCompleted) for e in events)
    assert wf.get_session_state("s") == {"trail": ["a", "a"]}


def test_stop_ends_the_workflow_early() -> None:
    def halt(step_input: StepInput) -> StepOutput:
        return StepOutput(content="halted", stop=True)

    wf = Workflow(name="w", steps=[note("a"), halt, note("never")])
    out = wf.run("go")
    assert out.content == "halted"
    assert out.session_state == {"trail": ["a"]}


# ---- blocks ------------------------------------------------------------------------------


def test_condition_reads_state() -> None:
    def is_vip(step_input: StepInput, run_context: RunContext) -> bool:
        return bool(run_context.session_state.get("vip"))

    wf = Workflow(
        name="w",
        steps=[Condition("vip", evaluator=is_vip, steps=[note("perk")]), note("end")],
    )
    assert wf.run("x", session_id="a", session_state={"vip": True}).session_state["trail"] == [
        "perk",
        "end",
    ]
    out = wf.run("x", session_id="b", session_state={"vip": False})
    assert out.session_state["trail"] == ["end"]
    assert out.step_outputs[0].skipped
    always = Workflow(name="w", steps=[Condition("c", evaluator=True, steps=[note("x")])])
    assert always.run("go").session_state == {"trail": ["x"]}


def test_router_selects_by_name_step_list_and_bool() -> None:
    a, b = note("a"), note("b")

    def by_state(session_state: dict[str, Any]) -> Any:
        return session_state["route"]

    wf = Workflow(name="w", steps=[Router("r", selector=by_state, choices=[a, b])])
    assert wf.run("x", session_id="1", session_state={"route": "b"}).session_state["trail"] == ["b"]
    assert wf.run("x", session_id="2", session_state={"route": ["b", "a"]}).session_state[
        "trail"
    ] == ["b", "a"]
    assert wf.run("x", session_id="3", session_state={"route": False}).session_state["trail"] == [
        "b"
    ]
    by_step = Workflow(name="w", steps=[Router("r", selector=lambda: a, choices=[a, b])])
    assert by_step.run("x").session_state["trail"] == ["a"]


def test_router_unknown_name_fails_the_run_clearly() -> None:
    db = InMemoryDb()
    wf = Workflow(
        name="w",
        db=db,
        steps=[note("a"), Router("r", selector=lambda: "nope", choices=[note("b")])],
    )
    with pytest.raises(RunError, match=r"Router 'r': the selector returned 'nope'.*'b'"):
        wf.run("x", session_id="s")
    run = db.read_runs("s")[-1]
    assert run.status == "failed" and "nope" in (run.error or "")
    assert wf.get_session_state("s") == {"trail": ["a"]}, "completed steps stay committed"


def test_loop_until_end_condition_or_bound() -> None:
    def bump(step_input: StepInput, session_state: TrackedDict) -> int:
        session_state.increment("n")
        return int(session_state["n"])

    def done(outputs: list[StepOutput], iteration: int) -> bool:
        return bool(outputs[-1].content >= 3)

    wf = Workflow(name="w", steps=[Loop("l", steps=[bump], end_condition=done, max_iterations=10)])
    assert wf.run("x").session_state == {"n": 3}
    bounded = Workflow(name="w", steps=[Loop("l", steps=[bump], max_iterations=4)])
    out = bounded.run("x")
    assert out.session_state == {"n": 4} and out.content == 4


def test_loop_without_a_bound_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="no bound"):
        Loop("l", steps=[note("a")], end_condition=lambda: False)
    with pytest.raises(ConfigurationError, match="at least 1"):
        Loop("l", steps=[note("a")], max_iterations=0)


def test_parallel_branches_merge_deterministically_with_conflicts_recorded() -> None:
    def branch(name: str, delay: float) -> Any:
        async def fn(step_input: StepInput, session_state: dict[str, Any]) -> str:
            await asyncio.sleep(delay)
            session_state["items"].append(name)
            session_state.increment("count")  # type: ignore[attr-defined]
            session_state["owner"] = name
            session_state[f"only_{name}"] = True
            return name

        fn.__name__ = name
        return fn

    db = InMemoryDb()
    # "a" finishes last, but declaration order decides: a's ops first, b's rebased on them.
    wf = Workflow(
        name="w",
        db=db,
        steps=[Parallel(branch("a", 0.05), branch("b", 0.0), name="fan"), note("after")],
        session_state={"items": [], "count": 0},
    )
    out = wf.run("x", session_id="s")
    assert out.session_state == {
        "items": ["a", "b"],
        "count": 2,
        "owner": "b",
        "only_a": True,
        "only_b": True,
        "trail": ["after"],
    }
    assert out.step_outputs[0].content == {"a": "a", "b": "b"}
    conflicts = events_of(db, "s", "conflict_resolved")
    assert conflicts == [
        {
            "scope": "session",
            "step": "fan",
            "branch": "b",
            "path": ["owner"],
            "rule": "last_write_wins",
            "theirs": "a",
            "ours": "b",
            "resolved": "b",
        }
    ]
    assert out.conflicts == conflicts


def test_parallel_uses_the_workflows_rules() -> None:
    def setter(value: int) -> Any:
        def fn(step_input: StepInput, session_state: dict[str, Any]) -> None:
            session_state["best"] = value

        fn.__name__ = f"set_{value}"
        return fn

    wf = Workflow(
        name="w",
        steps=[Parallel(setter(7), setter(3), name="p")],
        session_state={"best": 0},
        state_rules={"best": "max"},
    )
    out = wf.run("x")
    assert out.session_state == {"best": 7}
    assert out.conflicts[0]["rule"] == "max"


def test_parallel_branch_agents_see_their_own_view() -> None:
    a = tool_agent("a", "add", [add], instructions="{items}")
    b = tool_agent("b", "add", [add], instructions="{items}")
    wf = Workflow(name="w", steps=[Parallel(a, b, name="p")], session_state={"items": ["x"]})
    out = wf.run("y")
    assert out.session_state["items"] == ["x", "y", "y"]
    assert out.content == {"a": 'a done; ["x","y"]', "b": 'b done; ["x","y"]'}


# ---- bad input -----------------------------------------------------------------------------


def test_a_step_that_is_not_a_step_names_its_position() -> None:
    with pytest.raises(ConfigurationError, match=r"steps\[1\] is not a step"):
        Workflow(name="w", steps=[note("a"), 42])
    with pytest.raises(ConfigurationError, match=r"Condition 'c' steps\[0\] is not a step"):
        Condition("c", evaluator=True, steps=["nope"])
    with pytest.raises(ConfigurationError, match="exactly one of"):
        Step(name="x")
    with pytest.raises(ConfigurationError, match="at least one step"):
        Workflow(name="w", steps=[])


def test_a_raising_step_fails_the_run_keeps_completed_steps_and_resumes(tmp_path: Path) -> None:
    calls: list[str] = []
    broken = {"on": True}

    def counted(name: str) -> Any:
        def fn(step_input: StepInput, session_state: dict[str, Any]) -> str:
            calls.append(name)
            if name == "c" and broken["on"]:
                session_state["trail"].append("partial")
                raise RuntimeError("disk full")
            session_state["trail"].append(name)
            return f"{name}<-{step_input.previous_step_content}"

        fn.__name__ = name
        return fn

    db_file = str(tmp_path / "w.db")
    wf = Workflow(
        name="w",
        db=SqliteDb(db_file=db_file),
        steps=[counted(n) for n in "abcd"],
        session_state={"trail": []},
    )
    with pytest.raises(RuntimeError, match="disk full") as info:
        wf.run("go", session_id="s")
    run = wf.db.read_runs("s")[-1]
    assert run.status == "failed" and run.error == "RuntimeError: disk full"
    assert any("workflow.resume" in note for note in info.value.__notes__)
    assert wf.get_session_state("s") == {"trail": ["a", "b"]}
    broken["on"] = False
    calls.clear()
    fresh = Workflow(
        name="w",
        db=SqliteDb(db_file=db_file),
        steps=[counted(n) for n in "abcd"],
        session_state={"trail": []},
    )
    out = fresh.resume(run.run_id, session_id="s")
    assert calls == ["c", "d"]
    assert out.run_id == run.run_id
    assert out.session_state == {"trail": ["a", "b", "c", "d"]}
    assert out.content == "d<-c<-b<-a<-None", "restored outputs feed the resumed steps"
    assert fresh.db.get_run("s", run.run_id).status == "completed"  # type: ignore[union-attr]
    with pytest.raises(RunError, match="only a failed or killed run resumes"):
        fresh.resume(run.run_id, session_id="s")


def test_run_with_resume_true_continues_the_sessions_failed_run() -> None:
    state = {"fail": True}

    def flaky(step_input: StepInput) -> str:
        if state["fail"]:
            raise ValueError("flaky")
        return "ok"

    db = InMemoryDb()
    wf = Workflow(name="w", db=db, steps=[note("a"), flaky, note("b")])
    with pytest.raises(ValueError):
        wf.run("first", session_id="s")
    state["fail"] = False
    out = wf.run("ignored while resuming", session_id="s", resume=True)
    assert out.session_state == {"trail": ["a", "b"]}
    assert len(db.read_runs("s")) == 1
    # Nothing left to resume: a normal run.
    out2 = wf.run("second", session_id="s", resume=True)
    assert out2.run_id != out.run_id
    assert out2.session_state == {"trail": ["a", "b", "a", "b"]}


def test_resume_refuses_a_changed_workflow() -> None:
    db = InMemoryDb()

    def boom(step_input: StepInput) -> None:
        raise RuntimeError("x")

    wf = Workflow(name="w", db=db, steps=[note("a"), boom])
    with pytest.raises(RuntimeError):
        wf.run("go", session_id="s")
    run_id = db.read_runs("s")[-1].run_id
    other = Workflow(name="w", db=db, steps=[note("z"), boom])
    with pytest.raises(RunError, match="steps"):
        other.resume(run_id, session_id="s")


def test_step_events_are_typed() -> None:
    wf = Workflow(name="w", steps=[note("a")])
    events = [e for e in wf.run("x", stream=True) if isinstance(e, StepStarted | StepCompleted)]
    assert [(e.event, e.step_name) for e in events] == [
        ("step_started", "a"),
        ("step_completed", "a"),
    ]


def test_parallel_strict_conflict_on_a_secret_key_keeps_the_values_out_of_the_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from cryptography.fernet import Fernet

    from statewise.exceptions import StateConflictError

    monkeypatch.setenv("STATEWISE_ENCRYPTION_KEY", Fernet.generate_key().decode())

    def setter(value: str) -> Any:
        def fn(step_input: StepInput, session_state: dict[str, Any]) -> None:
            session_state["api_token"] = value

        fn.__name__ = f"set_{value[-3:]}"
        return fn

    wf = Workflow(
        name="w",
        steps=[Parallel(setter("tok-branch-AAA"), setter("tok-branch-BBB"), name="p")],
        secret_keys=["api_token"],
        state_rules={"api_token": "strict"},
    )
    with pytest.raises(StateConflictError) as caught:
        wf.run("x")
    text = str(caught.value)
    assert "api_token" in text
    assert "tok-branch" not in text and "***" in text
