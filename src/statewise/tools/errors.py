"""The one error of the tools layer.

`ToolArgumentsError` is deliberately not part of `statewise.exceptions`: it never reaches
the user. The run loop catches it and sends its message back to the model as the tool's
result, so the message is written for a model to act on: it names every bad, missing or
unexpected argument.
"""

from __future__ import annotations


class ToolArgumentsError(ValueError):
    """A model called a tool with arguments that do not fit the tool's schema."""

    def __init__(self, tool_name: str, problems: list[str]) -> None:
        super().__init__(f"Invalid arguments for tool {tool_name!r}: " + "; ".join(problems))
        self.tool_name = tool_name
        self.problems = problems
