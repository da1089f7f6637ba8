"""`@tool` and `@tool(name=..., description=...)`: declare a tool where it is defined."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, overload

from statewise.tools.function import Function


@overload
def tool(fn: Callable[..., Any], /) -> Function: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    requires_confirmation: bool = False,
) -> Callable[[Callable[..., Any]], Function]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    requires_confirmation: bool = False,
) -> Function | Callable[[Callable[..., Any]], Function]:
    """Turn a function into a `Function`; the result is still callable like the function.

    With `requires_confirmation=True` a run pauses before each call of the tool until a
    person approves, rejects or edits it (`agent.continue_run(...)`).

    Errors in the signature surface at import time, where the tool is defined, rather than
    when an agent first uses it.
    """
    if fn is not None:
        return Function.from_callable(fn, name=name, description=description)

    def decorate(inner: Callable[..., Any]) -> Function:
        return Function.from_callable(
            inner,
            name=name,
            description=description,
            requires_confirmation=requires_confirmation,
        )

    return decorate
