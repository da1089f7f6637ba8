"""A run's events are made only for someone who iterates them; a streamed run is driven in
its consumer's task, so tools see a normal asyncio task (current_task, timeouts,
cancellation) and closing the stream early still releases the session."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import statewise.run.driver
import statewise.run.step
from statewise import Agent
from statewise.db import InMemoryDb
from statewise.models import FunctionModel, ModelResponse
from statewise.run.emit import events_of
from tests.run._models import call_tool


def test_a_run_nobody_iterates_makes_no_events(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(**kwargs: Any) -> None:
        raise AssertionError("an event was made for nobody")

    for module in (statewise.run.step, statewise.run.driver):
        for name in ("RunStarted", "ToolCallStarted", "ToolCallCompleted", "RunCompleted"):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, refuse)

    def add(session_state: dict[str, Any]) -> str:
        session_state["n"] = session_state.get("n", 0) + 1
        return "added"

    agent = Agent(model=call_tool("add"), tools=[add], db=InMemoryDb())
    assert agent.run("go", session_id="s").content == "added"
    assert asyncio.run(agent.arun("go", session_id="s")).content == "added"
    assert agent.get_session_state("s") == {"n": 2}


def test_streamed_events_are_the_same_as_before() -> None:
    def add(session_state: dict[str, Any]) -> str:
        session_state["n"] = 1
        return "added"

    agent = Agent(model=call_tool("add"), tools=[add], db=InMemoryDb())
    kinds = [e.event for e in agent.run("go", session_id="s", stream=True)]
    assert kinds[0] == "run_started" and kinds[-1] == "run_completed"
    assert "tool_call_started" in kinds and "tool_call_completed" in kinds
    assert "state_changed" in kinds and "content_delta" in kinds


def test_a_streamed_run_runs_in_the_consumers_task() -> None:
    seen: list[Any] = []

    def before_agent(callback_context: Any) -> None:
        seen.append(asyncio.current_task())

    async def where() -> str:
        seen.append(asyncio.current_task())  # (a task of its own while streaming)
        async with asyncio.timeout(5):
            await asyncio.sleep(0)
        return "ok"

    agent = Agent(
        model=call_tool("where"),
        tools=[where],
        db=InMemoryDb(),
        before_agent_callback=before_agent,
    )

    async def main() -> Any:
        events = await agent.arun("go", session_id="s", stream=True)
        async for _ in events:
            pass
        return asyncio.current_task()

    consumer = asyncio.run(main())
    assert seen[0] is consumer and seen[1] is not None


def test_a_streamed_run_can_be_cancelled_and_times_out_inside_tools() -> None:
    async def slow() -> str:
        try:
            async with asyncio.timeout(0.01):
                await asyncio.sleep(10)
        except TimeoutError:
            return "timed out"
        return "finished"

    agent = Agent(model=call_tool("slow"), tools=[slow], db=InMemoryDb())

    async def main() -> str | None:
        output = None
        async for event in await agent.arun("go", session_id="s", stream=True):
            if event.event == "run_completed":
                output = event.output.content
        return output

    assert asyncio.run(main()) == "timed out"

    async def cancelled() -> None:
        async def forever() -> str:
            await asyncio.sleep(10)
            return "no"

        stuck = Agent(model=call_tool("forever"), tools=[forever], db=InMemoryDb())

        async def consume() -> None:
            async for _ in await stuck.arun("go", session_id="c", stream=True):
                pass

        task = asyncio.create_task(consume())
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # The session was released: a new run on it goes through.
        answer = Agent(model=FunctionModel(lambda m, i: ModelResponse(content="hi")), db=stuck.db)
        assert (await answer.arun("again", session_id="c")).content == "hi"

    asyncio.run(cancelled())


def test_closing_a_stream_early_runs_the_runs_cleanup() -> None:
    steps: list[str] = []

    async def body(emit: Any) -> None:
        try:
            await emit("first")
            await asyncio.sleep(0)
            await emit("second")
            steps.append("not reached")
        finally:
            await asyncio.sleep(0)  # cleanup may still await
            await emit("during cleanup")  # goes nowhere
            steps.append("cleaned up")

    async def main() -> list[Any]:
        got = []
        stream = events_of(body)
        async for event in stream:
            got.append(event)
            break
        await stream.aclose()  # type: ignore[attr-defined]
        return got

    assert asyncio.run(main()) == ["first"]
    assert steps == ["cleaned up"]


def test_an_error_in_the_run_reaches_the_consumer() -> None:
    async def body(emit: Any) -> None:
        await emit("one")
        await asyncio.sleep(0)
        raise ValueError("boom")

    async def main() -> list[Any]:
        got = []
        with pytest.raises(ValueError, match="boom"):
            async for event in events_of(body):
                got.append(event)
        return got

    assert asyncio.run(main()) == ["one"]
