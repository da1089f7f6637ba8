"""Turning what a model sent, as a whole or streamed, into our messages.

Tool-call arguments arrive as a JSON string. Models sometimes send arguments that are not
JSON, or JSON that is not an object. That is an error the model can fix, so instead of
raising we return it next to empty arguments; the run loop answers the tool call with the
error and the model tries again. Streams are assembled here too, so that every provider
and offline model turns deltas into a final response the same way.
"""

from __future__ import annotations

import json
from typing import Any

from statewise.models.messages import ModelResponse, TextDelta, ToolCall, ToolCallDelta


class _NotJson(ValueError):
    pass


def _no_constant(name: str) -> Any:
    """Python's json accepts NaN and Infinity; JSON does not (and state cannot hold them)."""
    raise _NotJson(f"{name} is not a JSON value")


def parse_arguments(raw: str | None) -> tuple[dict[str, Any], str | None]:
    """Return `(arguments, error)`; exactly one of them is meaningful.

    An empty string or JSON `null` means "no arguments" (models send either for tools
    without parameters).
    """
    if raw is None or not raw.strip() or raw.strip() == "null":
        return {}, None
    try:
        value = json.loads(raw, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        return {}, f"tool arguments are not valid JSON ({exc.msg} at position {exc.pos}): {raw!r}"
    except RecursionError:
        return {}, "tool arguments nest too deeply"
    except ValueError as exc:  # NaN/Infinity, an integer with too many digits
        return {}, f"tool arguments are not valid JSON ({exc}): {raw[:200]!r}"
    if not isinstance(value, dict):
        return {}, f"tool arguments must be a JSON object, got {type(value).__name__}: {raw!r}"
    return value, None


class StreamAssembler:
    """Collects streamed deltas into the complete response they add up to.

    Tool-call deltas are merged by `index`: the first non-empty id and name win and the
    argument pieces are concatenated, then parsed once at the end (bad JSON becomes
    `ToolCall.arguments_error`). Providers use this too, so every stream assembles alike.
    """

    def __init__(self) -> None:
        self._text: list[str] = []
        self._ids: dict[int, str | None] = {}
        self._names: dict[int, str] = {}
        self._args: dict[int, list[str]] = {}

    def add(self, chunk: TextDelta | ToolCallDelta) -> TextDelta | ToolCallDelta:
        """Record `chunk` and return it, so callers can `yield assembler.add(chunk)`."""
        if isinstance(chunk, TextDelta):
            self._text.append(chunk.content)
            return chunk
        if chunk.id and not self._ids.get(chunk.index):
            self._ids[chunk.index] = chunk.id
        self._ids.setdefault(chunk.index, None)
        if chunk.name and not self._names.get(chunk.index):
            self._names[chunk.index] = chunk.name
        self._args.setdefault(chunk.index, []).append(chunk.arguments_delta)
        return chunk

    @property
    def text(self) -> str:
        return "".join(self._text)

    def tool_calls(self) -> list[ToolCall]:
        calls = []
        for index in sorted(self._ids):
            arguments, error = parse_arguments("".join(self._args.get(index, [])))
            calls.append(
                ToolCall(
                    self._names.get(index, ""), arguments, self._ids[index], arguments_error=error
                )
            )
        return calls

    def response(self) -> ModelResponse:
        return ModelResponse(content=self.text or None, tool_calls=self.tool_calls())
