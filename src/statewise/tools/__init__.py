"""Tools: Python callables turned into tools a model can call.

`Function.from_callable` (or `@tool`) reads a callable's type hints, defaults and docstring
once and builds its JSON schema and argument validator. Parameters named like the run's
objects (`run_context`, `session_state`, `agent`, ... see `INJECTABLE_NAMES`) are filled in
by the run at call time and never shown to the model. `Toolkit` groups tools,
`normalize_tools` flattens an agent's `tools=[...]`, `call_with_hooks` runs a call through
tool hooks, and `format_tool_result` turns what a tool returned into text for the model.
`MCPTools` brings in the tools of a Model Context Protocol server (a `ToolSource`: its
tools are listed when a run starts).
"""

from statewise.tools._introspect import INJECTABLE_NAMES
from statewise.tools.decorator import tool
from statewise.tools.errors import ToolArgumentsError
from statewise.tools.function import Function
from statewise.tools.hooks import call_with_hooks
from statewise.tools.mcp import MCPTools, ToolSource
from statewise.tools.normalize import normalize_tools, split_tool_sources
from statewise.tools.result import format_tool_result
from statewise.tools.toolkit import Toolkit

__all__ = [
    "INJECTABLE_NAMES",
    "Function",
    "MCPTools",
    "ToolArgumentsError",
    "ToolSource",
    "Toolkit",
    "call_with_hooks",
    "format_tool_result",
    "normalize_tools",
    "split_tool_sources",
    "tool",
]
