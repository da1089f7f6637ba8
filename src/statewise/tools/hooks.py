"""Tool hooks: middleware around every tool call.

A hook declares, by parameter name, what it wants: `function_name`, `function_call`,
`arguments`, and any injectable (`run_context`, `agent`, ...). The first hook wraps the
second, ..., the last wraps the tool:

    def logger(function_name, function_call, arguments):
        result = function_call(**arguments)    # the next hook, or the tool
        return result                         # what the hook returns is the call's result

A hook may change the arguments it passes on, or return a result of its own without
calling through (a hook without a `function_call` parameter always does). Hooks see the
arguments as the model sent them; the tool validates them when the call reaches it.

Sync hooks get a sync `function_call` and run like sync tools: in a worker thread when the
run is on a shared event loop, inline under a sync call. When a sync hook calls through to something
async (an async hook or tool), that rest of the chain runs to completion on a helper
thread with its own event loop while the hook waits: nothing else touches the run's state
meanwhile, so state needs no locking. An async tool that uses objects bound to the
caller's loop should be wrapped by async hooks only.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from statewise._workers import run_user_code
from statewise.exceptions import ConfigurationError
from statewise.tools._introspect import (
    INJECTABLE_NAMES,
    callable_name,
    fill_injected,
    is_async_callable,
    parameters_of,
    split_injected,
)
from statewise.tools.function import Function

_HOOK_ARGUMENTS = frozenset({"function_name", "function_call", "arguments"})


@dataclass(frozen=True, slots=True)
class _HookSpec:
    """What a hook declares; read once per hook (see `_spec`), used on every call."""

    is_async: bool
    wants: frozenset[str]  # among _HOOK_ARGUMENTS
    injected: frozenset[str]
    injected_required: frozenset[str]


def _build_spec(hook: Callable[..., Any]) -> _HookSpec:
    what = f"tool hook {callable_name(hook)!r}"
    params = parameters_of(hook, what)
    named = [p for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    for param in named:
        unknown = param.name not in _HOOK_ARGUMENTS and param.name not in INJECTABLE_NAMES
        if unknown and param.default is param.empty:
            raise ConfigurationError(
                f"{what} has a parameter {param.name!r} that statewise cannot fill; a hook "
                "may declare function_name, function_call, arguments and "
                + ", ".join(sorted(INJECTABLE_NAMES))
            )
        if param.kind is param.POSITIONAL_ONLY:
            raise ConfigurationError(f"{what}: parameter {param.name!r} is positional-only")
    injected, injected_required = split_injected(named)
    return _HookSpec(
        is_async=is_async_callable(hook),
        wants=frozenset(p.name for p in named if p.name in _HOOK_ARGUMENTS),
        injected=injected,
        injected_required=injected_required,
    )


# Hooks arrive as plain callables on every call; inspecting them is the slow part, so it
# is done once per hook. Bounded, because bound methods are new objects at each access.
_cached_spec = functools.lru_cache(maxsize=512)(_build_spec)


def _spec(hook: Callable[..., Any]) -> _HookSpec:
    try:
        hash(hook)
    except TypeError:  # an unhashable callable object: inspect it every time
        return _build_spec(hook)
    return _cached_spec(hook)


async def call_with_hooks(
    function: Function,
    arguments: Mapping[str, Any],
    hooks: Sequence[Callable[..., Any]],
    injected: Mapping[str, Any],
) -> Any:
    """Call `function` through `hooks`, outermost first; exceptions propagate unchanged.

    Sync hooks and tools are blocking calls, off a shared loop's thread (see
    `Function.call`)."""
    if not hooks:
        return await function.call(arguments, injected)
    return await _Chain(function, hooks, injected).acall(0, arguments)


class _Chain:
    """One tool call's trip through the hooks; link `i` is hook `i`, link `len` the tool."""

    __slots__ = ("function", "hooks", "injected")

    def __init__(
        self,
        function: Function,
        hooks: Sequence[Callable[..., Any]],
        injected: Mapping[str, Any],
    ) -> None:
        self.function = function
        self.hooks = hooks
        self.injected = injected

    async def acall(self, index: int, arguments: Mapping[str, Any]) -> Any:
        """Run link `index` and everything under it, from async code."""
        if index == len(self.hooks):
            return await self.function.call(arguments, self.injected)
        hook = self.hooks[index]
        spec = _spec(hook)
        if spec.is_async:

            async def next_async(**kwargs: Any) -> Any:
                return await self.acall(index + 1, kwargs)

            result = hook(**self._hook_kwargs(spec, arguments, next_async))
        else:
            # A sync hook (and the sync chain under it) is a blocking call, like a sync
            # tool: off a shared loop's thread.
            return await run_user_code(self.call, index, arguments)
        if inspect.isawaitable(result):
            result = await result
        return result

    def call(self, index: int, arguments: Mapping[str, Any]) -> Any:
        """Run link `index` and everything under it, from sync code (a sync hook)."""
        if index == len(self.hooks):
            result = self.function.invoke(arguments, self.injected)
        else:
            hook = self.hooks[index]
            spec = _spec(hook)
            if spec.is_async:
                return _run_blocking(self.acall(index, arguments))

            def next_sync(**kwargs: Any) -> Any:
                return self.call(index + 1, kwargs)

            result = hook(**self._hook_kwargs(spec, arguments, next_sync))
        if inspect.isawaitable(result):
            result = _run_blocking(result)
        return result

    def _hook_kwargs(
        self,
        spec: _HookSpec,
        arguments: Mapping[str, Any],
        function_call: Callable[..., Any],
    ) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        fill_injected(kwargs, spec.injected, spec.injected_required, self.injected)
        if "function_name" in spec.wants:
            kwargs["function_name"] = self.function.name
        if "function_call" in spec.wants:
            kwargs["function_call"] = function_call
        if "arguments" in spec.wants:
            # A copy: a hook that edits its dict must not rewrite the recorded tool call.
            kwargs["arguments"] = dict(arguments)
        return kwargs


def _run_blocking(awaitable: Awaitable[Any]) -> Any:
    """Await `awaitable` from sync code that may be running inside an event loop.

    The calling thread's loop (if any) is busy running that sync code, so the awaitable
    runs on a fresh loop in a helper thread, with a copy of the caller's context
    variables; the caller blocks until it finishes. Its exception, if any, is re-raised.
    """

    async def run() -> Any:
        return await awaitable

    context = contextvars.copy_context()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="statewise-tool") as pool:
        return pool.submit(context.run, asyncio.run, run()).result()
