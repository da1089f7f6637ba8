"""`normalize_tools`: whatever a user passes as `tools=[...]`, as one flat list of Functions."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from statewise.exceptions import ConfigurationError
from statewise.tools.function import Function
from statewise.tools.toolkit import Toolkit

ToolLike = Callable[..., Any] | Function | Toolkit


def normalize_tools(tools: Sequence[ToolLike]) -> list[Function]:
    """Flatten toolkits, build Functions from plain callables, reject what cannot work.

    Tool names must be unique across the whole list: the model calls tools by name, so a
    second tool with the same name would silently shadow the first. Errors name the
    position in `tools` of each offender. Tool schemas are built when the run first
    needs them (and cached per function), so building an agent per request stays cheap.
    """
    if callable(tools) or isinstance(tools, Toolkit):
        raise ConfigurationError(f"tools must be a list, got a single {type(tools).__name__}")
    functions: list[Function] = []
    origins: dict[str, str] = {}
    for index, item in enumerate(tools):
        where = f"tools[{index}]"
        members: list[tuple[Function, str]]
        if isinstance(item, Toolkit):
            members = [(fn, f"{where} (toolkit {item.name!r})") for fn in item.functions]
        elif isinstance(item, type) and issubclass(item, Toolkit):
            raise ConfigurationError(
                f"{where} is the class {item.__name__}; pass an instance: {item.__name__}()"
            )
        elif callable(item):
            members = [(Function.from_callable(item, lazy=True), where)]
        else:
            raise ConfigurationError(f"{where} is not callable: got {type(item).__name__}")
        for fn, origin in members:
            if fn.name in origins:
                raise ConfigurationError(
                    f"duplicate tool name {fn.name!r}: {origins[fn.name]} and {origin}; "
                    "rename one with name=..."
                )
            origins[fn.name] = origin
            functions.append(fn)
    return functions
