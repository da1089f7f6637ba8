"""The commit-point seam durable engines use (`statewise.run.checkpoints`), with an
in-memory engine on a real SQLite file: an execution cut off right after a commit landed
(before the engine recorded it) runs that point again and applies nothing twice, and a
later execution replays recorded points without asking the model or calling tools."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from statewise import Agent
from statewise.db import SqliteDb
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo, ToolCall
from statewise.run.checkpoints import Outcome

TAGS = ("a", "b", "c")


class Crash(BaseException):
    """The process dies here (nothing after it runs in this execution)."""


class Engine:
    """Records each point's outcome, like a durable engine's step table; `lose` names a
    point whose commit lands but whose record is lost to a crash."""

    def __init__(self) -> None:
        self.recorded: dict[int, Outcome] = {}
        self.lose: int | None = None
        self.already_landed: list[int] = []

    async def step(self, point: int, body: Callable[[], Coroutine[Any, Any, Outcome]]) -> Outcome:
        if point in self.recorded:
            self.already_landed.append(point)
            return self.recorded[point]
        outcome = await body()
        if point == self.lose:
            self.lose = None
            raise Crash(f"killed after point {point} committed")
        self.recorded[point] = outcome
        return outcome


@pytest.fixture
def marker(tmp_path: Path) -> tuple[Agent, Counter[str], Counter[str]]:
    asked: Counter[str] = Counter()
    called: Counter[str] = Counter()

    def model(messages: list[Message], info: RequestInfo) -> ModelResponse:
        done = sum(1 for m in messages if m.role == "tool")
        asked[f"ask{done}"] += 1
        if done < len(TAGS):
            return ModelResponse(tool_calls=[ToolCall("mark", {"tag": TAGS[done]}, f"c{done}")])
        return ModelResponse(content="marked all")

    def mark(tag: str, session_state: dict[str, Any]) -> str:
        """Mark a tag.

        Args:
            tag: The tag.
        """
        called[tag] += 1
        session_state.setdefault("marks", []).append(tag)
        return f"marked {tag}"

    agent = Agent(
        name="marker",
        model=FunctionModel(model),
        tools=[mark],
        db=SqliteDb(db_file=str(tmp_path / "points.db")),
    )
    return agent, asked, called


def test_a_point_committed_but_not_recorded_applies_once_when_run_again(
    marker: tuple[Agent, Counter[str], Counter[str]],
) -> None:
    agent, asked, called = marker
    engine = Engine()
    engine.lose = 2  # mark("b")'s step commits, then the process dies
    with pytest.raises(Crash):
        agent.run_durably("go", run_id="run-1", session_id="s1", points=engine)
    assert agent.get_session_state("s1") == {"marks": ["a", "b"]}
    assert sorted(engine.recorded) == [0, 1]

    output = agent.run_durably("go", run_id="run-1", session_id="s1", points=engine)
    assert output.content == "marked all" and output.run_id == "run-1"
    assert engine.already_landed == [0, 1]
    # Step 2 ran again (model and tool), but its commit found its id stored: "b" once.
    assert agent.get_session_state("s1") == {"marks": ["a", "b", "c"]}
    assert asked == Counter({"ask0": 1, "ask1": 2, "ask2": 1, "ask3": 1})
    assert called == Counter({"a": 1, "b": 2, "c": 1})
    events = agent.db.read_events("s1", types=["tool_call"])
    assert Counter(e.data["arguments"]["tag"] for e in events) == Counter("abc")
    (run,) = agent.db.read_runs("s1")
    assert run.status == "completed" and run.run_id == "run-1"
    assert [m["content"] for m in run.messages if m["role"] == "tool"] == [
        "marked a",
        "marked b",
        "marked c",
    ]
    assert output.metrics.tool_calls == 3 and output.metrics.model_requests == 4


def test_a_finished_run_executed_again_replays_every_point(
    marker: tuple[Agent, Counter[str], Counter[str]],
) -> None:
    agent, asked, called = marker
    engine = Engine()
    first = agent.run_durably("go", run_id="run-2", session_id="s2", points=engine)
    again = agent.run_durably("go", run_id="run-2", session_id="s2", points=engine)
    assert first.content == again.content == "marked all"
    assert engine.already_landed == [0, 1, 2, 3, 4]
    assert sum(asked.values()) == 4 and sum(called.values()) == 3
    assert agent.get_session_state("s2") == {"marks": ["a", "b", "c"]}
    assert len(agent.db.read_events("s2", types=["run_completed"])) == 1


def test_a_durable_run_makes_the_commits_a_run_without_an_engine_makes(
    marker: tuple[Agent, Counter[str], Counter[str]],
) -> None:
    """Its last model step and the run end are one commit, inside the last point."""
    agent, _, _ = marker
    db = agent.db
    commits: list[str | None] = []
    original = db.commit

    def counting(commit: Any) -> Any:
        commits.append(commit.commit_id)
        return original(commit)

    db.commit = counting  # type: ignore[method-assign]
    try:
        agent.run("go", session_id="plain")
        plain = len(commits)
        commits.clear()
        engine = Engine()
        agent.run_durably("go", run_id="run-3", session_id="s3", points=engine)
    finally:
        del db.commit
    assert len(commits) == plain == 5  # start, three tool steps, the answer with the end
    assert commits == [f"run-3:step:{p}" for p in (0, 1, 2, 3, "end")]
    assert sorted(engine.recorded) == [0, 1, 2, 3, 4]
    assert engine.recorded[4]["done"] and engine.recorded[4]["content"] == "marked all"


def test_a_run_end_committed_but_not_recorded_lands_once_when_run_again(
    marker: tuple[Agent, Counter[str], Counter[str]],
) -> None:
    agent, asked, called = marker
    engine = Engine()
    engine.lose = 4  # the last step commits the run end, then the process dies
    with pytest.raises(Crash):
        agent.run_durably("go", run_id="run-4", session_id="s4", points=engine)
    assert len(agent.db.read_events("s4", types=["run_completed"])) == 1

    output = agent.run_durably("go", run_id="run-4", session_id="s4", points=engine)
    assert output.content == "marked all"
    assert engine.already_landed == [0, 1, 2, 3]
    assert asked["ask3"] == 2 and called == Counter("abc")
    assert len(agent.db.read_events("s4", types=["run_completed"])) == 1
    assert agent.get_session_state("s4") == {"marks": ["a", "b", "c"]}


def test_a_team_members_commits_inside_a_point_apply_once_when_it_runs_again(
    tmp_path: Path,
) -> None:
    from statewise import Team

    def leader(messages: list[Message], info: RequestInfo) -> ModelResponse:
        if messages[-1].role == "tool":
            return ModelResponse(content="team done")
        task = {"member_name": "writer", "task": "write x"}
        return ModelResponse(tool_calls=[ToolCall("delegate_task_to_member", task, "d1")])

    def writer_model(messages: list[Message], info: RequestInfo) -> ModelResponse:
        if messages[-1].role == "tool":
            return ModelResponse(content="wrote it")
        return ModelResponse(tool_calls=[ToolCall("note", {"text": "x"}, "n1")])

    def note(text: str, session_state: dict[str, Any]) -> str:
        """Write a note.

        Args:
            text: The note.
        """
        session_state.setdefault("notes", []).append(text)
        return "noted"

    db = SqliteDb(db_file=str(tmp_path / "team.db"))
    writer = Agent(name="writer", model=FunctionModel(writer_model), tools=[note], db=db)
    team = Team([writer], name="crew", model=FunctionModel(leader), db=db)
    engine = Engine()
    engine.lose = 1  # the leader's step (with the member's commits inside) lands, then a crash
    with pytest.raises(Crash):
        team.run_durably("go", run_id="team-run", session_id="t1", points=engine)
    assert team.get_session_state("t1") == {"notes": ["x"]}

    output = team.run_durably("go", run_id="team-run", session_id="t1", points=engine)
    assert output.content == "team done"
    # The member ran again inside the re-executed step; its commits found their ids.
    assert team.get_session_state("t1") == {"notes": ["x"]}
    notes = [e for e in db.read_events("t1", types=["tool_call"]) if e.data["name"] == "note"]
    assert len(notes) == 1
