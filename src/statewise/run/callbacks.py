"""Calling user callbacks with the arguments they ask for, by parameter name.

A callback declares what it needs (`callback_context`, `llm_request`, `tool_name`,
`args`, `tool_response`, ...) and gets exactly that. Signatures are read once per
function, not per call.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from statewise.exceptions import ConfigurationError

_signatures: dict[Callable[..., Any], tuple[tuple[str, ...], bool, frozenset[str]]] = {}


def _signature(fn: Callable[..., Any]) -> tuple[tuple[str, ...], bool, frozenset[str]]:
    found = _signatures.get(fn)
    if found is None:
        params = inspect.signature(fn).parameters.values()
        names = tuple(p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD))
        required = frozenset(
            p.name
            for p in params
            if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        )
        var_kw = any(p.kind is p.VAR_KEYWORD for p in params)
        found = _signatures[fn] = (names, var_kw, required)
    return found


async def call_with_available(fn: Callable[..., Any], available: Mapping[str, Any]) -> Any:
    """Call `fn` with the entries of `available` its parameters name; await if needed."""
    names, var_kw, required = _signature(fn)
    if var_kw:
        kwargs = dict(available)
    else:
        kwargs = {name: available[name] for name in names if name in available}
    missing = required - kwargs.keys()
    if missing:
        raise ConfigurationError(
            f"{getattr(fn, '__qualname__', fn)!r} asks for {sorted(missing)}, which this hook "
            f"does not provide; it can take: {sorted(available)}"
        )
    result = fn(**kwargs)
    if inspect.isawaitable(result):
        result = await result
    return result


def as_callbacks(
    value: Callable[..., Any] | Sequence[Callable[..., Any]] | None, what: str
) -> tuple[Callable[..., Any], ...]:
    if value is None:
        return ()
    items = [value] if callable(value) else list(value)
    for i, item in enumerate(items):
        if not callable(item):
            raise ConfigurationError(f"{what}[{i}] is not callable: {item!r}")
    return tuple(items)


@dataclass(kw_only=True, frozen=True, slots=True)
class Callbacks:
    """An agent's lifecycle callbacks, each a tuple run in order until one returns a value."""

    before_agent: tuple[Callable[..., Any], ...] = ()
    after_agent: tuple[Callable[..., Any], ...] = ()
    before_model: tuple[Callable[..., Any], ...] = ()
    after_model: tuple[Callable[..., Any], ...] = ()
    before_tool: tuple[Callable[..., Any], ...] = ()
    after_tool: tuple[Callable[..., Any], ...] = ()


async def first_result(
    callbacks: Sequence[Callable[..., Any]], available: Mapping[str, Any]
) -> Any:
    """Run callbacks in order; the first that returns something other than None wins."""
    for callback in callbacks:
        result = await call_with_available(callback, available)
        if result is not None:
            return result
    return None
