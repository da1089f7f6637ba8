"""Runs of one agent share what the run loop needs of it (made once, not per run), and
still see every change to the agent's configuration made between runs."""

from __future__ import annotations

from typing import Any

import pytest

from statewise import Agent
from statewise.db import InMemoryDb
from statewise.models import FunctionModel, ModelResponse
from statewise.run import _observe


def answer(text: str) -> FunctionModel:
    return FunctionModel(lambda messages, info: ModelResponse(content=text))


def test_changes_to_the_agent_between_runs_count() -> None:
    agent = Agent(model=answer("one"), db=InMemoryDb())
    assert agent.run("hi", session_id="s").content == "one"
    assert agent._runtime() is agent._runtime()  # shared while nothing changed
    agent.model = answer("two")
    assert agent.run("hi", session_id="s").content == "two"
    agent.output_key = "last"
    agent.run("hi", session_id="s")
    assert agent.get_session_state("s") == {"last": "two"}
    agent.max_steps = 1000  # (an int that is a new object each time it is made)
    assert agent._runtime().max_steps == 1000
    seen: list[str] = []

    def after_agent(callback_context: Any) -> None:
        seen.append("after")

    agent2 = Agent(model=answer("x"), db=InMemoryDb(), after_agent_callback=after_agent)
    agent2.run("hi", session_id="s")
    agent2.callbacks = agent.callbacks  # none
    agent2.run("hi", session_id="s")
    assert seen == ["after"]


def test_runs_with_client_tools_get_a_runtime_of_their_own() -> None:
    from statewise.models import ToolDefinition

    agent = Agent(model=answer("one"))
    tool = ToolDefinition(name="pick", description="pick", parameters={"type": "object"})
    with_tools = agent._runtime(client_tools=[tool])
    assert with_tools is not agent._runtime() and with_tools.client_tools == (tool,)
    assert agent._runtime().client_tools == ()


def test_the_environment_is_read_as_os_environ_reads_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STATEWISE_LOG", raising=False)
    assert _observe._getenv("STATEWISE_LOG") is None
    monkeypatch.setenv("STATEWISE_LOG", " Debug ")
    assert _observe._getenv("STATEWISE_LOG") == " Debug "
    assert _observe.env_debug()
    monkeypatch.setenv("STATEWISE_LOG", "")
    assert _observe._getenv("STATEWISE_LOG") == "" and not _observe.env_debug()
    monkeypatch.setattr("os.environ", {"STATEWISE_LOG": "debug"})  # not CPython's mapping
    assert _observe._getenv("STATEWISE_LOG") == "debug"
