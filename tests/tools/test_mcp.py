"""MCPTools against a real MCP server (`tests/tools/mcp_server.py`, built with the `mcp`
package's server API), run as a subprocess over stdio and over streamable HTTP on loopback."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from statewise import Agent, MCPTools
from statewise.exceptions import ConfigurationError, RunError
from statewise.models import FunctionModel, Message, ModelResponse, RequestInfo, ToolCall
from statewise.run.events import ToolCallCompleted
from statewise.tools import normalize_tools
from statewise.tools.mcp import MCPToolError

try:
    import mcp  # noqa: F401
except ImportError:
    if os.environ.get("CI") == "true":
        raise
    pytest.skip(
        "the mcp extra is not installed (pip install 'statewise[mcp]')", allow_module_level=True
    )

pytestmark = pytest.mark.anyio

SERVER = Path(__file__).with_name("mcp_server.py")
STDIO = [sys.executable, str(SERVER), "stdio"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), "http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"the MCP test server exited with {proc.returncode}")
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        else:
            raise RuntimeError("the MCP test server did not start in 30 s")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(params=["stdio", "http"])
async def tools(request: pytest.FixtureRequest, http_url: str) -> AsyncIterator[MCPTools]:
    source = MCPTools(command=STDIO) if request.param == "stdio" else MCPTools(url=http_url)
    async with source:
        yield source


@pytest.fixture
async def http_tools(http_url: str) -> AsyncIterator[MCPTools]:
    async with MCPTools(url=http_url) as source:
        yield source


def calls_then_answer(*calls: ToolCall) -> FunctionModel:
    """A model that makes `calls` in its first step, then answers with the tool results."""

    def respond(messages: list[Message], info: RequestInfo) -> ModelResponse:
        if messages[-1].role != "tool":
            return ModelResponse(tool_calls=list(calls))
        results = [m.content for m in messages if m.role == "tool"]
        return ModelResponse(content=" | ".join(r or "" for r in results))

    return FunctionModel(respond)


async def test_tools_are_listed_with_their_schemas(tools: MCPTools) -> None:
    functions = await tools.functions()
    by_name = {f.name: f for f in functions}
    assert set(by_name) == {"add", "forecast", "explode", "echo", "crash"}
    add = by_name["add"].definition()
    assert add.description == "Add two integers."
    assert add.parameters["properties"] == {
        "a": {"title": "A", "type": "integer"},
        "b": {"title": "B", "type": "integer"},
    }
    assert add.parameters["required"] == ["a", "b"]
    again = await tools.functions()
    assert [id(f) for f in again] == [id(f) for f in functions]  # listed once, then cached


async def test_nothing_connects_before_the_first_run() -> None:
    source = MCPTools(command=[sys.executable, "-c", "raise SystemExit('never started')"])
    Agent(model=calls_then_answer(), tools=[source])  # building the agent lists nothing
    with pytest.raises(RunError, match="cannot connect to MCP server"):
        await source.functions()


async def test_a_run_calls_mcp_tools_with_json_arguments(tools: MCPTools) -> None:
    model = calls_then_answer(
        ToolCall("add", {"a": 2, "b": 40}, "c1"),
        ToolCall("forecast", {"city": "Oslo"}, "c2"),
        ToolCall("echo", {"text": "plain text"}, "c3"),
    )
    agent = Agent(model=model, tools=[tools])
    output = await agent.arun("go")
    assert output.content == (
        '{"result":42} | {"city":"Oslo","sky":"rain","celsius":7} | plain text'
    )


async def test_errors_go_back_to_the_model_like_any_tool_error(tools: MCPTools) -> None:
    model = calls_then_answer(
        ToolCall("explode", {"message": "kaboom"}, "c1"),
        ToolCall("add", {"a": "two"}, "c2"),
    )
    agent = Agent(model=model, tools=[tools])
    events = [e async for e in await agent.arun("go", stream=True)]
    completed = [e for e in events if isinstance(e, ToolCallCompleted)]
    assert [e.is_error for e in completed] == [True, True]
    assert completed[0].result == "Error: MCPToolError: Error executing tool explode: kaboom"
    assert "validation error" in completed[1].result and "addArguments" in completed[1].result


async def test_hooks_and_callbacks_apply_to_mcp_tools(http_tools: MCPTools) -> None:
    tools = http_tools

    async def audit(
        function_name: str,
        function_call: Callable[..., Awaitable[Any]],
        arguments: dict[str, Any],
        session_state: dict[str, Any],
    ) -> Any:
        session_state.setdefault("audit", []).append(f"before {function_name}")
        result = await function_call(**arguments)
        session_state["audit"].append(f"after {function_name}: {result}")
        return result

    def block_echo(tool_name: str, args: dict[str, Any]) -> str | None:
        return "echo is switched off" if tool_name == "echo" else None

    model = calls_then_answer(
        ToolCall("add", {"a": 1, "b": 2}, "c1"), ToolCall("echo", {"text": "x"}, "c2")
    )
    agent = Agent(model=model, tools=[tools], tool_hooks=[audit], before_tool_callback=block_echo)
    output = await agent.arun("go", session_id="mcp-hooks")
    assert output.content == '{"result":3} | echo is switched off'
    assert agent.get_session_state("mcp-hooks")["audit"] == [
        "before add",
        "after add: {'result': 3}",
    ]


async def test_a_failed_mcp_call_rolls_back_the_hooks_state_writes(
    http_tools: MCPTools,
) -> None:
    tools = http_tools

    async def mark(
        function_call: Callable[..., Awaitable[Any]],
        arguments: dict[str, Any],
        session_state: dict[str, Any],
    ) -> Any:
        session_state["touched"] = True
        return await function_call(**arguments)

    agent = Agent(
        model=calls_then_answer(ToolCall("explode", {"message": "no"}, "c1")),
        tools=[tools],
        tool_hooks=[mark],
    )
    await agent.arun("go", session_id="mcp-rollback")
    assert "touched" not in agent.get_session_state("mcp-rollback")


async def test_prefix_include_exclude_and_duplicate_names(http_url: str) -> None:
    async with MCPTools(
        url=http_url, prefix="calc_", include=["add", "echo"], exclude=["echo"]
    ) as source:
        assert [f.name for f in await source.functions()] == ["calc_add"]
        model = calls_then_answer(ToolCall("calc_add", {"a": 1, "b": 1}, "c1"))
        assert (await Agent(model=model, tools=[source]).arun("go")).content == '{"result":2}'

    def add(a: int, b: int) -> int:
        return a - b

    async with MCPTools(url=http_url) as clash:
        agent = Agent(model=calls_then_answer(), tools=[add, clash])
        with pytest.raises(RunError, match="two tools are named 'add'"):
            await agent.arun("go")


async def test_the_agent_closes_the_connection_and_can_reconnect(http_url: str) -> None:
    source = MCPTools(url=http_url)
    model = calls_then_answer(ToolCall("add", {"a": 1, "b": 1}, "c1"))
    async with Agent(model=model, tools=[source]) as agent:
        assert (await agent.arun("go")).content == '{"result":2}'
        connection = next(iter(source._connections.values()))
        assert connection.task is not None and not connection.task.done()
    assert connection.task.done() and source._connections == {}
    assert (await agent.arun("again")).content == '{"result":2}'  # reconnects
    await agent.aclose()


def test_sync_runs_and_close() -> None:
    source = MCPTools(command=STDIO)
    model = calls_then_answer(ToolCall("add", {"a": 20, "b": 22}, "c1"))
    with Agent(model=model, tools=[source]) as agent:
        assert agent.run("go").content == '{"result":42}'
        assert agent.run("again").content == '{"result":42}'
        assert len(source._connections) == 1  # one connection served both sync runs
    assert source._connections == {}


def test_bad_configuration_is_refused_at_once() -> None:
    with pytest.raises(ConfigurationError, match="exactly one of command"):
        MCPTools()
    with pytest.raises(ConfigurationError, match="exactly one of command"):
        MCPTools(command=["x"], url="http://127.0.0.1:1/mcp")
    with pytest.raises(ConfigurationError, match="non-empty list"):
        MCPTools(command=[])
    with pytest.raises(ConfigurationError, match="http"):
        MCPTools(url="ftp://example")
    with pytest.raises(ConfigurationError, match="listed when a run starts"):
        normalize_tools([MCPTools(command=STDIO)])  # type: ignore[list-item]


async def test_concurrent_first_runs_list_once(http_url: str) -> None:
    async with MCPTools(url=http_url) as source:
        lists = await asyncio.gather(*(source.functions() for _ in range(5)))
    assert len({tuple(id(f) for f in functions) for functions in lists}) == 1


async def test_after_a_crash_the_next_call_reconnects(tmp_path: Path) -> None:
    down = tmp_path / "down"
    source = MCPTools(command=STDIO, env={"MCP_TEST_DOWN_FILE": str(down)}, timeout=10)
    async with source:
        functions = {f.name: f for f in await source.functions()}
        assert await source.call("add", {"a": 1, "b": 2}) == {"result": 3}
        with pytest.raises(MCPToolError, match="failed the call"):
            await functions["crash"].function()
        # That call's error only: the next call starts the server again.
        for n in range(3):
            assert await source.call("add", {"a": n, "b": 1}) == {"result": n + 1}
        # A server that stays down: a clear error after a bounded number of attempts.
        down.write_text("")
        with pytest.raises(MCPToolError, match="failed the call"):
            await source.call("crash", {})
        started = time.monotonic()
        with pytest.raises(RunError, match=r"cannot reconnect to MCP server .* 3 attempts"):
            await source.call("add", {"a": 1, "b": 1})
        assert time.monotonic() - started < 30
        down.unlink()
        assert await source.call("add", {"a": 2, "b": 2}) == {"result": 4}


async def test_a_run_after_a_crash_reaches_the_tool_again() -> None:
    model = calls_then_answer(ToolCall("crash", {}, "c1"))
    again = calls_then_answer(ToolCall("add", {"a": 5, "b": 5}, "c1"))
    source = MCPTools(command=STDIO)
    async with source:
        crashed = await Agent(model=model, tools=[source]).arun("go")
        assert "Error" in str(crashed.content)
        assert (await Agent(model=again, tools=[source]).arun("go")).content == '{"result":10}'
