"""Read what a callable declares: its name, docstring, parameters and their types.

Everything here runs once, when a tool or a hook is set up, never per call. The results are
plain data that `Function` and the hook chain use on the hot path without re-inspecting.
"""

from __future__ import annotations

import functools
import inspect
import re
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

import docstring_parser

from statewise.exceptions import ConfigurationError

INJECTABLE_NAMES = frozenset(
    {
        "agent",
        "agent_state",
        "callback_context",
        "run_context",
        "session_state",
        "team",
        "tool_context",
        "workflow",
    }
)
"""Parameter names the run fills in itself; the model never sees or sets them."""

# What OpenAI, Anthropic and most OpenAI-compatible servers accept as a tool name.
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def target_of(fn: Callable[..., Any]) -> Any:
    """The object that carries `fn`'s code: partials and bound methods peeled off.

    Its `__globals__` resolve string annotations, its `__doc__` describes the tool.
    """
    target: Any = inspect.unwrap(fn)
    while isinstance(target, functools.partial):
        target = inspect.unwrap(target.func)
    return getattr(target, "__func__", target)


def callable_name(fn: Callable[..., Any]) -> str:
    target = target_of(fn)
    name = getattr(target, "__name__", None)
    return name if isinstance(name, str) else type(target).__name__


def check_tool_name(name: str) -> str:
    if not TOOL_NAME.fullmatch(name):
        raise ConfigurationError(
            f"tool name {name!r} is not accepted by model providers: use 1-64 letters, "
            "digits, '_' or '-' (pass name=... to choose one)"
        )
    return name


def is_async_callable(fn: Callable[..., Any]) -> bool:
    """True for `async def` functions, methods, partials of them and async `__call__`s."""
    if inspect.iscoroutinefunction(fn):
        return True
    # A callable object: look at its class's __call__ (fn is callable, so it has one).
    return not inspect.isroutine(fn) and inspect.iscoroutinefunction(type(fn).__call__)


def parameters_of(fn: Callable[..., Any], what: str) -> list[inspect.Parameter]:
    """The parameters of `fn` as it will be called (bound methods without `self`)."""
    try:
        return list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"{what}: cannot read its signature ({exc})") from None


def split_injected(params: list[inspect.Parameter]) -> tuple[frozenset[str], frozenset[str]]:
    """The injectable names `params` declares, and those among them without a default.

    An injectable the run cannot supply is passed as None, unless the callable gave it a
    default of its own, which is then left to apply.
    """
    injected = frozenset(p.name for p in params if p.name in INJECTABLE_NAMES)
    required = frozenset(p.name for p in params if p.name in injected and p.default is p.empty)
    return injected, required


def fill_injected(
    kwargs: dict[str, Any],
    declared: frozenset[str],
    required: frozenset[str],
    values: Mapping[str, Any],
) -> None:
    """Add to `kwargs` the injectables a callable declared, as `split_injected` describes."""
    for name in declared:
        if name in values:
            kwargs[name] = values[name]
        elif name in required:
            kwargs[name] = None


def resolve_annotation(fn: Callable[..., Any], param: inspect.Parameter, what: str) -> Any:
    """The type of `param`, with string annotations (PEP 563, forward refs) evaluated.

    Parameters are resolved one at a time, so that an annotation that only resolves under
    TYPE_CHECKING (`agent: Agent` on an injected parameter) never stops the others: callers
    skip injected parameters altogether.
    """
    annotation = param.annotation
    if annotation is param.empty:
        return Any
    if not isinstance(annotation, str):
        return annotation
    shim = types.SimpleNamespace(__annotations__={param.name: annotation})
    globalns = getattr(target_of(fn), "__globals__", None)
    if globalns is None:  # a callable object: its class's __call__ knows the module
        globalns = getattr(type(fn).__call__, "__globals__", {})
    try:
        return typing.get_type_hints(shim, globalns=globalns, include_extras=True)[param.name]
    except Exception as exc:
        raise ConfigurationError(
            f"{what}: cannot resolve the type of parameter {param.name!r} ({annotation!r}): {exc}"
        ) from None


def parse_docstring(fn: Callable[..., Any]) -> tuple[str, dict[str, str]]:
    """The description (summary and prose, without sections) and per-parameter descriptions.

    Google (`Args:`), NumPy (`Parameters`), Sphinx (`:param x:`) and Epydoc styles are all
    understood, by docstring_parser.
    """
    doc = inspect.getdoc(target_of(fn))
    if not doc:
        return "", {}
    try:
        parsed = docstring_parser.parse(doc)
    except docstring_parser.ParseError:
        return doc, {}
    parts = (parsed.short_description, parsed.long_description)
    description = "\n\n".join(part for part in parts if part)
    params = {p.arg_name: p.description for p in parsed.params if p.description}
    return description, params
