"""Tools: Python callables turned into tools a model can call.

`Function.from_callable` (or `@tool`) reads a callable's type hints, defaults and docstring
once and builds its JSON schema and argument validator. Parameters named like the run's
objects (`run_context`, `session_state`, `agent`, ... see `INJECTABLE_NAMES`) are filled in
by the run at call time and never shown to the model.
"""

from statewise.tools._introspect import INJECTABLE_NAMES
from statewise.tools.decorator import tool
from statewise.tools.errors import ToolArgumentsError
from statewise.tools.function import Function

__all__ = [
    "INJECTABLE_NAMES",
    "Function",
    "ToolArgumentsError",
    "tool",
]
