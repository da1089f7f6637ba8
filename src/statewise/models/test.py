"""TestModel: a model that exercises every tool, then answers, with no network.

It lets tests check that tools are wired up without scripting any model behaviour: the
first request calls each tool once with arguments generated from its JSON schema, and when
the tool results come back the answer is those results as JSON (or `custom_output_text`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any, Literal

from statewise.models._offline import estimate_usage, response_chunks
from statewise.models._schema_args import generate_arguments
from statewise.models.base import Model
from statewise.models.messages import (
    Message,
    ModelResponse,
    RequestInfo,
    StreamChunk,
    ToolCall,
)
from statewise.models.structured import example_for


class TestModel(Model):
    """Calls every tool once, then answers with a summary of the tool results.

    - `call_tools`: `"all"` or the names of the tools to call (others are left alone).
    - `custom_args`: per-tool arguments merged over the generated ones, for tools whose
      schema alone does not describe valid input (`{"search": {"query": "cats"}}`).
    - `custom_output_text`: the final answer; by default the tool results as JSON,
      `{"tool_name": result, ...}` (results that are JSON are embedded parsed), or
      `"success (no tool calls)"` when nothing was called. A run that wants a typed
      answer (`output_schema`) gets a small value that fits the schema instead.

    The rule is stateless, so one instance serves any number of runs: when the last
    message is a tool result, answer; otherwise call the tools (if there are any).
    """

    __test__ = False  # not a pytest test class, despite the name
    provider = "test"

    def __init__(
        self,
        *,
        call_tools: Literal["all"] | list[str] = "all",
        custom_output_text: str | None = None,
        custom_args: dict[str, dict[str, Any]] | None = None,
        id: str = "test",
    ) -> None:
        self.call_tools = call_tools
        self.custom_output_text = custom_output_text
        self.custom_args = dict(custom_args or {})
        self.id = id

    async def request(self, messages: list[Message], info: RequestInfo) -> ModelResponse:
        if messages and messages[-1].role == "tool":
            response = ModelResponse(content=self._answer(messages, info))
        else:
            calls = self._tool_calls(messages, info)
            response = (
                ModelResponse(tool_calls=calls)
                if calls
                else ModelResponse(content=self._answer(messages, info))
            )
        response.model_name = self.id
        response.usage = estimate_usage(messages, response)
        return response

    async def request_stream(
        self, messages: list[Message], info: RequestInfo
    ) -> AsyncIterator[StreamChunk]:
        response = await self.request(messages, info)
        for chunk in response_chunks(response):
            yield chunk
        yield response

    def _tool_calls(self, messages: list[Message], info: RequestInfo) -> list[ToolCall]:
        turn = sum(1 for m in messages if m.role == "assistant")
        wanted = info.tools
        if self.call_tools != "all":
            names = set(self.call_tools)
            wanted = [t for t in info.tools if t.name in names]
        return [
            ToolCall(
                tool.name,
                {**generate_arguments(tool.parameters), **self.custom_args.get(tool.name, {})},
                f"call_{turn}_{index}",
            )
            for index, tool in enumerate(wanted)
        ]

    def _answer(self, messages: list[Message], info: RequestInfo) -> str:
        if self.custom_output_text is not None:
            return self.custom_output_text
        if info.output is not None:  # a typed answer: a small value that fits its schema
            return json.dumps(example_for(info.output.json_schema), ensure_ascii=False)
        results = _trailing_tool_results(messages)
        if not results:
            return "success (no tool calls)"
        summary: dict[str, Any] = {}
        for name, value in results:
            if name not in summary:
                summary[name] = value
            elif isinstance(summary[name], _Many):
                summary[name].append(value)
            else:
                summary[name] = _Many([summary[name], value])
        return json.dumps(summary, ensure_ascii=False, default=str)


class _Many(list[Any]):
    """Several results of one tool name (only when a tool was called more than once)."""


def _trailing_tool_results(messages: list[Message]) -> list[tuple[str, Any]]:
    """The results after the last assistant message, named by the call they answer."""
    names: dict[str | None, str] = {}
    results: list[tuple[str, Any]] = []
    for message in messages:
        if message.role == "assistant":
            names = {call.id: call.name for call in message.tool_calls}
            results = []
        elif message.role == "tool":
            name = message.name or names.get(message.tool_call_id) or "tool"
            results.append((name, _maybe_json(message.content)))
    return results


def _maybe_json(content: str | None) -> Any:
    if content is None:
        return None
    try:
        return json.loads(content)
    except ValueError:
        return content
