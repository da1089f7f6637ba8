"""A run on a session its process holds nothing of does not read it first: it assumes the
session new, and its run-start commit lands only if that holds (`BaseDb.commit_new`, one
round trip on PostgreSQL). Where the session turns out to exist, or a shared scope it sees
was written, the run starts again from what is stored: it never builds on state it did
not see, on every backend."""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import pytest

from statewise import Agent
from statewise.db.base import BaseDb, ProbedNew
from statewise.db.records import Commit, ScopeKey
from statewise.db.testing import Harness
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo
from statewise.run.checkpoints import Outcome
from tests.db.test_agent_on_backends import add, model


def agent_on(db: BaseDb, **options: Any) -> Agent:
    return Agent(
        model=FunctionModel(model),
        tools=[add],
        db=db,
        session_state={"items": [], "runs": "counted from here"},
        name="unread",
        **options,
    )


def count_calls(db: BaseDb, name: str) -> list[int]:
    calls = [0]
    real = getattr(db, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return real(*args, **kwargs)

    setattr(db, name, counted)
    return calls


def test_a_new_session_is_made_without_a_read_first(harness: Harness) -> None:
    db = harness.db
    probes, firsts = count_calls(db, "probe"), count_calls(db, "commit_new")
    agent_on(db).run("a", session_id="s", user_id="u")
    assert firsts == [1]
    if type(db).commit_new is not BaseDb.commit_new:  # (one round trip: no probe at all)
        assert probes == [0]
    assert agent_on(harness.reopen()).get_session_state("s") == {
        "items": ["a"],
        "runs": "counted from here",
    }


def test_a_stored_session_this_process_never_read_starts_from_what_is_stored(
    harness: Harness,
) -> None:
    agent_on(harness.db).run("a", session_id="s", user_id="u")
    harness.db.close()  # (nothing of it is held in this process any more)
    other_process = agent_on(harness.reopen())
    other_process.state.for_session("other").set("note", "unrelated")
    output = other_process.run("b", session_id="s", user_id="u")
    # The default state applies to new sessions only: not applied again over "a".
    assert output.content == "ok"
    state = agent_on(harness.reopen()).get_session_state("s")
    assert state == {"items": ["a", "b"], "runs": "counted from here"}
    history = agent_on(harness.reopen()).get_state_history("s")
    assert [h["sources"] for h in history][:2] == [["default_state"], ["tool:add#c"]]
    assert len(history) == 3


def test_a_new_session_sees_shared_scopes_written_by_another_process(
    harness: Harness,
) -> None:
    writer = agent_on(harness.db)
    writer.run("x", session_id="elsewhere", user_id="u")  # (u's session: its user: scope)
    writer.state.for_session("elsewhere").set("user:name", "Ann")
    writer.state.for_session("elsewhere").set("app:greeting", "hi")
    seen: list[str] = []

    def greeting_model(messages: list[Message], info: RequestInfo) -> ModelResponse:
        seen.append(str(messages[0].content))
        return model(messages, info)

    reader = Agent(
        model=FunctionModel(greeting_model),
        tools=[add],
        db=harness.reopen(),
        session_state={"items": [], "user:name": "nobody"},
        instructions="{app:greeting} {user:name}",
        name="unread",
    )
    reader.run("a", session_id="new", user_id="u")
    assert seen[0] == "hi Ann"
    # The new session got its defaults; the shared keys stayed as stored.
    assert agent_on(harness.reopen()).get_session_state("new") == {
        "items": ["a"],
        "user:name": "Ann",
        "app:greeting": "hi",
    }


def test_a_session_made_between_the_read_and_the_commit_starts_again(
    harness: Harness,
) -> None:
    db = harness.reopen()
    racer = agent_on(harness.reopen())
    real = db.commit_new

    def made_meanwhile(commit: Commit, keys: Sequence[ScopeKey]) -> ProbedNew:
        # What the probe saw: nothing. Then another process makes the session first.
        del db.commit_new  # (once: the racer may share this database object)
        probed = db.probe(commit.session.session_id, keys)
        racer.run("first", session_id="s", user_id="u")
        db.probe = lambda *args: probed  # type: ignore[method-assign]
        try:
            return BaseDb.commit_new(db, commit, keys)
        finally:
            del db.probe

    db.commit_new = made_meanwhile  # type: ignore[method-assign]
    agent_on(db).run("second", session_id="s", user_id="u")
    assert db.commit_new == real
    state = agent_on(harness.reopen()).get_session_state("s")
    assert state == {"items": ["first", "second"], "runs": "counted from here"}


class Crash(BaseException):
    """The process dies here (nothing after it runs in this execution)."""


class Engine:
    """A durable engine's step table (see `tests/run/test_checkpoints.py`)."""

    def __init__(self) -> None:
        self.recorded: dict[int, Outcome] = {}
        self.stop_at: int | None = None

    async def step(self, point: int, body: Callable[[], Coroutine[Any, Any, Outcome]]) -> Outcome:
        if point in self.recorded:
            return self.recorded[point]
        if point == self.stop_at:
            raise Crash(f"the process dies before point {point}")
        self.recorded[point] = outcome = await body()
        return outcome


def test_a_durable_run_that_replays_its_start_reads_the_session_before_going_on(
    harness: Harness,
) -> None:
    agent_on(harness.db).run("before", session_id="s", user_id="u")
    engine = Engine()
    engine.stop_at = 1
    with pytest.raises(Crash):
        agent_on(harness.reopen()).run_durably(
            "a", run_id="r1", session_id="s", user_id="u", points=engine
        )
    # Another process executes it again: its start is replayed (not run), and its tool
    # call must see what is stored.
    engine.stop_at = None
    agent_on(harness.reopen()).run_durably(
        "a", run_id="r1", session_id="s", user_id="u", points=engine
    )
    state = agent_on(harness.reopen()).get_session_state("s")
    assert state == {"items": ["before", "a"], "runs": "counted from here"}


def test_a_before_agent_callback_sees_the_stored_session(harness: Harness) -> None:
    agent_on(harness.db).run("a", session_id="s", user_id="u")
    seen: list[Any] = []

    def before(callback_context: Any) -> None:
        seen.append(list(callback_context.state["items"]))

    agent_on(harness.reopen(), before_agent_callback=before).run("b", session_id="s", user_id="u")
    assert seen == [["a"]]
