"""Every callback's short-circuit, sync and async, single and in lists (issue 7)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from statewise import Agent, RunContext
from statewise.exceptions import RunError
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo, ToolCall
from statewise.run.step import ModelRequest


class CountingModel(FunctionModel):
    """Calls `fn`, counting requests; used to prove a short-circuit skipped the model."""

    def __init__(self, *answers: ModelResponse | str) -> None:
        self.requests: list[list[Message]] = []
        queue = list(answers)

        def fn(messages: list[Message], info: RequestInfo) -> ModelResponse | str:
            self.requests.append(list(messages))
            return queue.pop(0) if len(queue) > 1 else queue[0]

        super().__init__(fn)


def call(name: str, **arguments: Any) -> ModelResponse:
    return ModelResponse(tool_calls=[ToolCall(name, arguments, f"id_{name}")])


def double(x: int) -> int:
    """Double a number."""
    return x * 2


def sync_and_async(value: Any) -> list[Any]:
    """A sync and an async callback returning `value`, for parametrized tests."""

    def sync_cb(callback_context: RunContext) -> Any:
        return value

    async def async_cb(callback_context: RunContext) -> Any:
        await asyncio.sleep(0)
        return value

    return [sync_cb, async_cb]


# ---- before_agent -------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_before_agent_returning_content_ends_the_run_without_a_model_call(kind: str) -> None:
    model = CountingModel("from the model")
    cb = sync_and_async("from the callback")[kind == "async"]
    agent = Agent(model=model, name="a", before_agent_callback=cb)
    out = agent.run("hi")
    assert out.content == "from the callback"
    assert model.requests == []
    assert [m.role for m in out.messages] == ["user", "assistant"]


def test_before_agent_returning_a_model_response_uses_its_content() -> None:
    model = CountingModel("from the model")
    agent = Agent(model=model, before_agent_callback=lambda: ModelResponse(content="canned"))
    assert agent.run("hi").content == "canned"
    assert model.requests == []


def test_before_agent_returning_none_goes_on_and_lists_run_in_order() -> None:
    seen: list[str] = []

    def first(callback_context: RunContext) -> None:
        seen.append("first")

    async def second(callback_context: RunContext) -> str:
        seen.append("second")
        return "stop"

    def third() -> str:
        seen.append("third")
        return "never"

    model = CountingModel("from the model")
    agent = Agent(model=model, before_agent_callback=[first, second, third])
    assert agent.run("hi").content == "stop"
    assert seen == ["first", "second"]
    assert model.requests == []


# ---- before_model / after_model ----------------------------------------------------------


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("value", [ModelResponse(content="cached"), "cached"])
def test_before_model_returning_a_response_skips_the_model(
    kind: str, value: ModelResponse | str
) -> None:
    model = CountingModel("from the model")
    cb = sync_and_async(value)[kind == "async"]
    out = Agent(model=model, before_model_callback=cb).run("hi")
    assert out.content == "cached"
    assert model.requests == []
    assert out.metrics.model_requests == 0


def test_before_model_sees_and_may_edit_the_request() -> None:
    model = CountingModel("ok")
    seen: dict[str, Any] = {}

    def edit(callback_context: RunContext, llm_request: ModelRequest) -> None:
        seen["step"] = llm_request.info.step
        seen["tools"] = [t.name for t in llm_request.info.tools]
        llm_request.messages.append(Message(role="user", content="(added by a callback)"))

    Agent(model=model, tools=[double], before_model_callback=edit).run("hi")
    assert seen == {"step": 1, "tools": ["double"]}
    assert model.requests[0][-1].content == "(added by a callback)"


def test_before_model_short_circuit_may_ask_for_tools() -> None:
    model = CountingModel("final from the model")
    calls: list[int] = []

    def once(callback_context: RunContext) -> ModelResponse | None:
        calls.append(callback_context.step)
        return call("double", x=21) if callback_context.step == 1 else None

    out = Agent(model=model, tools=[double], before_model_callback=once).run("hi")
    assert out.content == "final from the model"
    assert [m.role for m in out.messages] == ["user", "assistant", "tool", "assistant"]
    assert out.messages[2].content == "42"
    assert len(model.requests) == 1 and calls == [1, 2]


def test_before_model_short_circuit_is_streamed() -> None:
    agent = Agent(model=CountingModel("no"), before_model_callback=lambda: "canned")
    deltas = [e.content for e in agent.run("hi", stream=True) if e.event == "content_delta"]
    assert "".join(deltas) == "canned"


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_after_model_may_replace_the_response(kind: str) -> None:
    cb = sync_and_async(ModelResponse(content="replaced"))[kind == "async"]
    out = Agent(model=CountingModel("original"), after_model_callback=cb).run("hi")
    assert out.content == "replaced"
    assert out.messages[-1].content == "replaced"


def test_after_model_receives_the_response_and_none_keeps_it() -> None:
    seen: list[str | None] = []

    def look(callback_context: RunContext, llm_response: ModelResponse) -> None:
        seen.append(llm_response.content)

    def upper(llm_response: ModelResponse, llm_request: ModelRequest) -> str:
        return (llm_response.content or "").upper()

    out = Agent(model=CountingModel("original"), after_model_callback=[look, upper]).run("hi")
    assert seen == ["original"]
    assert out.content == "ORIGINAL"


def test_after_model_may_drop_tool_calls() -> None:
    def no_tools(llm_response: ModelResponse) -> ModelResponse | None:
        if llm_response.tool_calls:
            return ModelResponse(content="I will not call tools")
        return None

    model = CountingModel(call("double", x=1), "unreachable")
    out = Agent(model=model, tools=[double], after_model_callback=no_tools).run("hi")
    assert out.content == "I will not call tools"
    assert out.metrics.tool_calls == 0


def test_a_model_callback_returning_something_else_is_a_clear_error() -> None:
    agent = Agent(model=CountingModel("x"), before_model_callback=lambda: {"content": "x"})
    with pytest.raises(RunError, match="before_model_callback returned dict"):
        agent.run("hi")


# ---- before_tool / after_tool ------------------------------------------------------------


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_before_tool_returning_a_value_skips_the_tool(kind: str) -> None:
    ran: list[int] = []

    def tracked_double(x: int) -> int:
        """Double a number."""
        ran.append(x)
        return x * 2

    def sync_cb(tool_name: str, args: dict[str, Any], tool_context: RunContext) -> Any:
        return {"skipped": tool_name, "args": args}

    async def async_cb(tool_name: str, args: dict[str, Any], tool_context: RunContext) -> Any:
        return {"skipped": tool_name, "args": args}

    model = CountingModel(call("tracked_double", x=2), "done")
    agent = Agent(
        model=model,
        tools=[tracked_double],
        before_tool_callback=async_cb if kind == "async" else sync_cb,
    )
    out = agent.run("hi")
    assert ran == []
    assert json.loads(out.messages[2].content or "") == {
        "skipped": "tracked_double",
        "args": {"x": 2},
    }


def test_before_tool_returning_none_runs_the_tool_and_sees_the_tool_object() -> None:
    seen: list[str] = []

    def look(tool: Any, tool_name: str) -> None:
        seen.append(f"{tool.name}/{tool_name}")

    model = CountingModel(call("double", x=4), "done")
    out = Agent(model=model, tools=[double], before_tool_callback=[look]).run("hi")
    assert seen == ["double/double"]
    assert out.messages[2].content == "8"


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_after_tool_may_replace_the_result(kind: str) -> None:
    def sync_cb(tool_name: str, args: dict[str, Any], tool_response: Any) -> Any:
        return f"{tool_name}({args['x']}) = {tool_response}"

    async def async_cb(tool_name: str, args: dict[str, Any], tool_response: Any) -> Any:
        return f"{tool_name}({args['x']}) = {tool_response}"

    model = CountingModel(call("double", x=5), "done")
    cb = async_cb if kind == "async" else sync_cb
    out = Agent(model=model, tools=[double], after_tool_callback=[lambda: None, cb]).run("hi")
    assert out.messages[2].content == "double(5) = 10"


def test_after_tool_sees_the_before_tool_short_circuit_value() -> None:
    model = CountingModel(call("double", x=5), "done")
    out = Agent(
        model=model,
        tools=[double],
        before_tool_callback=lambda: 99,
        after_tool_callback=lambda tool_response: tool_response + 1,
    ).run("hi")
    assert out.messages[2].content == "100"


def test_a_tool_callback_that_raises_goes_back_to_the_model_and_its_writes_are_undone() -> None:
    def broken(tool_context: RunContext) -> None:
        tool_context.state["half_done"] = True
        raise ValueError("nope")

    model = CountingModel(call("double", x=1), "recovered")
    out = Agent(model=model, tools=[double], before_tool_callback=broken).run("hi")
    assert out.content == "recovered"
    assert out.messages[2].content == "Error: ValueError: nope"
    assert "half_done" not in out.session_state


# ---- after_agent -------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_after_agent_may_replace_the_final_content(kind: str) -> None:
    cb = sync_and_async("replaced at the end")[kind == "async"]
    agent = Agent(model=CountingModel("original"), output_key="answer", after_agent_callback=cb)
    out = agent.run("hi")
    assert out.content == "replaced at the end"
    assert out.messages[-1].content == "replaced at the end"
    assert agent.get_session_state() == {"answer": "replaced at the end"}


def test_after_agent_returning_none_keeps_the_content_and_sees_the_output_key() -> None:
    seen: list[Any] = []

    def look(callback_context: RunContext) -> None:
        seen.append(callback_context.state["answer"])

    agent = Agent(model=CountingModel("original"), output_key="answer", after_agent_callback=look)
    assert agent.run("hi").content == "original"
    assert seen == ["original"]


def test_after_agent_runs_after_a_before_agent_short_circuit() -> None:
    agent = Agent(
        model=CountingModel("unused"),
        before_agent_callback=lambda: "early",
        after_agent_callback=lambda callback_context: None,
        output_key="answer",
    )
    assert agent.run("hi").content == "early"
    assert agent.get_session_state() == {"answer": "early"}


# ---- the context -------------------------------------------------------------------------


def test_callback_context_carries_the_run_identity() -> None:
    seen: list[tuple[Any, ...]] = []

    def look(callback_context: RunContext) -> None:
        c = callback_context
        seen.append((c.session_id, c.user_id, c.run_id, c.agent_name, dict(c.state)))

    agent = Agent(
        model=CountingModel("ok"),
        name="helper",
        session_state={"x": 1},
        before_agent_callback=look,
        before_model_callback=look,
        after_model_callback=look,
        after_agent_callback=look,
    )
    out = agent.run("hi", session_id="s1", user_id="u1")
    assert len(seen) == 4
    assert {s[:4] for s in seen} == {("s1", "u1", out.run_id, "helper")}
    assert all(s[4] == {"x": 1} for s in seen)


def test_a_callback_asking_for_something_its_hook_lacks_is_a_clear_error() -> None:
    def wants_tool(tool_name: str) -> None: ...

    agent = Agent(model=CountingModel("ok"), before_agent_callback=wants_tool)
    with pytest.raises(Exception, match="asks for \\['tool_name'\\]"):
        agent.run("hi")


def test_output_key_stores_the_final_answer() -> None:
    model = CountingModel(call("double", x=3), "six")
    agent = Agent(model=model, tools=[double], output_key="last_answer")
    agent.run("hi", session_id="s")
    assert agent.get_session_state("s") == {"last_answer": "six"}
    model2 = CountingModel("seven")
    agent2 = Agent(model=model2, db=agent.db, output_key="last_answer")
    agent2.run("again", session_id="s")
    assert agent2.get_session_state("s") == {"last_answer": "seven"}
