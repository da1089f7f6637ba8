"""`Toolkit`: a named group of tools, usually the methods of one object.

A toolkit holds what its tools share (a client, credentials, configuration) on `self`;
subclasses register their methods in `__init__`:

    class CustomerDBTools(Toolkit):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.register(self.process_customer_request)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from statewise.exceptions import ConfigurationError
from statewise.tools.function import Function


class Toolkit:
    """A named list of `Function`s; `normalize_tools` flattens it into an agent's tools."""

    def __init__(
        self,
        name: str | None = None,
        tools: Sequence[Callable[..., Any]] | None = None,
    ) -> None:
        self.name = name if name is not None else type(self).__name__
        self.functions: list[Function] = []
        for fn in tools or ():
            self.register(fn)

    def register(self, fn: Callable[..., Any], name: str | None = None) -> Function:
        """Add `fn` (a function, a bound method, or a `Function`) as a tool of this kit."""
        function = Function.from_callable(fn, name=name)
        if any(existing.name == function.name for existing in self.functions):
            raise ConfigurationError(
                f"toolkit {self.name!r} already has a tool named {function.name!r}; "
                "pass name=... to register this one under another name"
            )
        self.functions.append(function)
        return function

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.name!r}, tools={[f.name for f in self.functions]})"
        )
