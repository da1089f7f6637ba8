"""Agno habits that must work: `async for event in x.arun(..., stream=True)` on agents,
teams and workflows (awaiting first still works), and a Loop's `end_condition(*args,
**kwargs)` called with the iteration's outputs positionally, as Agno calls it."""

from __future__ import annotations

import asyncio
from typing import Any

from statewise import Agent, Loop, RunCompleted, Step, StepOutput, Team, Workflow
from statewise.models import FunctionModel


def _agent(name: str = "a") -> Agent:
    return Agent(name=name, model=FunctionModel(lambda messages, info: f"hi from {name}"))


def test_async_for_over_arun_stream_on_agents_teams_and_workflows() -> None:
    team = Team(name="t", model=FunctionModel(lambda m, i: "team answer"), members=[_agent()])
    workflow = Workflow(name="w", steps=[Step(name="s", executor=lambda step_input: "done")])

    async def collect(obj: Any) -> tuple[list[Any], list[Any]]:
        direct = [event async for event in obj.arun("go", stream=True)]
        awaited = [event async for event in await obj.arun("go", stream=True)]
        return direct, awaited

    for obj in (_agent(), team, workflow):
        direct, awaited = asyncio.run(collect(obj))
        assert any(isinstance(e, RunCompleted) for e in direct), obj
        assert [type(e) for e in direct] == [type(e) for e in awaited]

    async def output() -> Any:
        return await _agent("b").arun("go")

    assert asyncio.run(output()).content == "hi from b"


def test_loop_end_condition_with_star_args_gets_the_outputs() -> None:
    seen: list[Any] = []

    def enough(*args: Any, **kwargs: Any) -> bool:
        seen.append((args, kwargs))
        return len(seen) >= 2

    workflow = Workflow(
        name="w",
        steps=[
            Loop(
                name="loop",
                steps=[Step(name="s", executor=lambda step_input: "x")],
                end_condition=enough,
                max_iterations=5,
            )
        ],
    )
    workflow.run("go")
    assert len(seen) == 2
    args, kwargs = seen[0]
    assert kwargs == {} and len(args) == 1
    assert isinstance(args[0], list) and all(isinstance(o, StepOutput) for o in args[0])
    assert args[0][0].content == "x"
