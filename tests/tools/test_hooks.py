"""Tool hooks: order, argument rewriting, short-circuits, sync/async mixes, errors."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from statewise.exceptions import ConfigurationError
from statewise.tools import Function, ToolArgumentsError, call_with_hooks

pytestmark = pytest.mark.anyio

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")


def echo(text: str, times: int = 1) -> str:
    """Repeat text."""
    return text * times


async def async_echo(text: str, times: int = 1) -> str:
    await asyncio.sleep(0)
    return f"{text * times} on {threading.current_thread().name}"


ECHO = Function.from_callable(echo)
ASYNC_ECHO = Function.from_callable(async_echo)


async def test_no_hooks_calls_the_tool() -> None:
    assert await call_with_hooks(ECHO, {"text": "a", "times": 2}, [], {}) == "aa"


async def test_first_hook_is_outermost() -> None:
    trace: list[str] = []

    def make(label: str) -> Callable[..., Any]:
        def hook(
            function_name: str, function_call: Callable[..., Any], arguments: dict[str, Any]
        ) -> Any:
            trace.append(f"{label}>{function_name}")
            result = function_call(**arguments)
            trace.append(f"<{label}")
            return f"{label}({result})"

        return hook

    result = await call_with_hooks(ECHO, {"text": "x"}, [make("a"), make("b")], {})
    assert result == "a(b(x))"
    assert trace == ["a>echo", "b>echo", "<b", "<a"]


async def test_hooks_can_rewrite_arguments() -> None:
    def shout(function_call: Callable[..., Any], arguments: dict[str, Any]) -> Any:
        arguments["text"] = arguments["text"].upper()
        return function_call(**arguments)

    async def twice(function_call: Callable[..., Awaitable[Any]], arguments: dict[str, Any]) -> Any:
        return await function_call(**arguments, times=2)

    original = {"text": "hi"}
    assert await call_with_hooks(ECHO, original, [shout, twice], {}) == "HIHI"
    assert original == {"text": "hi"}  # the recorded tool call is not rewritten


async def test_hook_can_short_circuit() -> None:
    calls: list[str] = []

    def tool_never_called(x: str) -> str:
        calls.append(x)
        return "tool"

    def cache(arguments: dict[str, Any]) -> str:
        return f"cached {arguments['x']}"

    def outer(function_call: Callable[..., Any], arguments: dict[str, Any]) -> Any:
        return "outer saw " + function_call(**arguments)

    fn = Function.from_callable(tool_never_called)
    assert await call_with_hooks(fn, {"x": "k"}, [outer, cache], {}) == "outer saw cached k"
    assert calls == []


async def test_hooks_get_declared_injectables_only() -> None:
    seen: dict[str, Any] = {}

    def hook(run_context: Any, agent: Any, team: Any = "no team", *, function_call: Any) -> Any:
        seen.update(run_context=run_context, agent=agent, team=team)
        return function_call(text="z")

    result = await call_with_hooks(ECHO, {}, [hook], {"run_context": "ctx", "session_state": {}})
    assert result == "z"
    assert seen == {"run_context": "ctx", "agent": None, "team": "no team"}


async def test_async_hooks_over_async_tool() -> None:
    async def hook(function_call: Callable[..., Awaitable[Any]], arguments: dict[str, Any]) -> Any:
        return "[" + await function_call(**arguments) + "]"

    result = await call_with_hooks(ASYNC_ECHO, {"text": "a"}, [hook], {})
    assert result == f"[a on {threading.current_thread().name}]"


async def test_sync_hook_over_async_tool_runs_it_to_completion() -> None:
    def hook(function_call: Callable[..., Any], arguments: dict[str, Any]) -> Any:
        result = function_call(**arguments)
        assert isinstance(result, str)  # a value, not a coroutine
        return result

    token = request_id.set("req-1")
    try:

        async def tool_reads_context(text: str) -> str:
            await asyncio.sleep(0)
            return f"{text} {request_id.get()} {threading.current_thread().name}"

        fn = Function.from_callable(tool_reads_context)
        result = await call_with_hooks(fn, {"text": "t"}, [hook], {})
    finally:
        request_id.reset(token)
    assert result.startswith("t req-1 statewise-tool")


async def test_sync_hook_over_async_hook_over_sync_tool() -> None:
    def outer(function_call: Callable[..., Any], arguments: dict[str, Any]) -> Any:
        return "outer:" + function_call(**arguments)

    async def inner(function_call: Callable[..., Awaitable[Any]], arguments: dict[str, Any]) -> Any:
        return "inner:" + await function_call(**arguments)

    assert await call_with_hooks(ECHO, {"text": "t"}, [outer, inner], {}) == "outer:inner:t"


async def test_async_hook_over_sync_hook_over_async_tool() -> None:
    async def outer(function_call: Callable[..., Awaitable[Any]], arguments: dict[str, Any]) -> Any:
        return "outer:" + await function_call(**arguments)

    def inner(function_call: Callable[..., Any], arguments: dict[str, Any]) -> Any:
        return "inner:" + function_call(**arguments)

    result = await call_with_hooks(ASYNC_ECHO, {"text": "t"}, [outer, inner], {})
    assert result.startswith("outer:inner:t on statewise-tool")


async def test_sync_hook_over_async_tool_propagates_its_exception() -> None:
    async def failing(x: int) -> None:
        raise LookupError(f"no {x}")

    def hook(function_call: Callable[..., Any], arguments: dict[str, Any]) -> Any:
        return function_call(**arguments)

    with pytest.raises(LookupError, match="no 3"):
        await call_with_hooks(Function.from_callable(failing), {"x": 3}, [hook], {})


async def test_hook_exceptions_propagate() -> None:
    def guard(arguments: dict[str, Any]) -> None:
        raise ValueError("customer_id is required.")

    with pytest.raises(ValueError, match="customer_id is required"):
        await call_with_hooks(ECHO, {"text": "t"}, [guard], {})


async def test_tool_exceptions_propagate_through_hooks() -> None:
    def boom(x: int) -> None:
        raise RuntimeError("tool failed")

    async def passthrough(
        function_call: Callable[..., Awaitable[Any]], arguments: dict[str, Any]
    ) -> Any:
        return await function_call(**arguments)

    with pytest.raises(RuntimeError, match="tool failed"):
        await call_with_hooks(Function.from_callable(boom), {"x": 1}, [passthrough], {})


async def test_arguments_are_validated_when_the_call_reaches_the_tool() -> None:
    def rewrite(function_call: Callable[..., Any], arguments: dict[str, Any]) -> Any:
        return function_call(text="t", times="many")

    with pytest.raises(ToolArgumentsError, match="times: input should be a valid integer"):
        await call_with_hooks(ECHO, {"text": "t"}, [rewrite], {})


async def test_hook_with_unknown_parameter_is_a_configuration_error() -> None:
    def hook(function_call: Callable[..., Any], user: str) -> Any:
        return function_call()

    with pytest.raises(ConfigurationError, match=r"tool hook 'hook'.*'user'"):
        await call_with_hooks(ECHO, {"text": "t"}, [hook], {})


async def test_hooks_may_be_bound_methods_or_unhashable_objects() -> None:
    class Prefixer:
        __hash__ = None  # type: ignore[assignment]

        def __init__(self, prefix: str) -> None:
            self.prefix = prefix

        def __call__(self, function_call: Callable[..., Any], arguments: dict[str, Any]) -> Any:
            return self.prefix + function_call(**arguments)

        def hook(self, function_call: Callable[..., Any], arguments: dict[str, Any]) -> Any:
            return self.prefix.upper() + function_call(**arguments)

    prefixer = Prefixer("p:")
    assert await call_with_hooks(ECHO, {"text": "t"}, [prefixer, prefixer.hook], {}) == "p:P:t"
